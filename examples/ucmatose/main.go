// Command ucmatose is rdma-core's ucmatose (librdmacm/examples/cmatose.c)
// over cmrt: it connects one or more RC ids, exchanges Sends both ways and
// disconnects, with the same options, defaults and output.
//
// Without -s it is the server: it listens (on -b, or any address), accepts
// -c connections, sends -C messages of -S bytes on each, receives as many,
// and disconnects. With -s it is the client: it connects -c ids to the
// server, receives the messages, sends as many back and waits for the
// server to disconnect.
//
//	ucmatose [-s server_address] [-b bind_address] [-f name|ip|ipv6]
//	         [-P tcp|ib] [-c connections (1)] [-C message_count (10)]
//	         [-S message_size (100)] [-t type_of_service] [-p port (7471)]
//	         [-m] [-a ack_timeout]
//
// It runs on the software fabric by default ($CMRT_FABRIC selects another;
// see examples/internal/tool for the software fabric's CMRT_SOFT_* knobs).
// A failed call is reported on stderr as perror(3) words it, followed by
// cmrt's account in parentheses. The exit status is the C program's: 1 on
// a usage error or when no event channel opens, otherwise the "return
// status" it prints, & 0xff (-111 exits 145).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

func main() { os.Exit(run(tool.Args(), os.Stdout, os.Stderr)) }

// node is one connection, as struct cmatest_node.
type node struct {
	idx       int
	cmaID     *id.ID
	connected bool
	mem       []byte
	mr        id.MR
}

// test is the program's state, as struct cmatest plus the options.
type test struct {
	out, errw io.Writer

	ch              *channel.Channel
	fab             fabric.Fabric
	nodes           []node
	connIndex       int
	connectsLeft    int
	disconnectsLeft int

	dst, src     string
	family       string // "", "ip", "ipv6"
	ps           id.PortSpace
	connections  int
	messageCount int
	messageSize  int
	port         string
	tos          uint8
	setTOS       bool
	ackTimeout   uint8
	setAck       bool
	migrate      bool

	srcAddr, dstAddr netip.AddrPort
}

func (t *test) printf(format string, a ...any) { fmt.Fprintf(t.out, format, a...) }

// perror prints a failed call the way perror(3) does, with cmrt's account,
// to stderr.
func (t *test) perror(what string, err error) { tool.Perror(t.errw, what, err) }

func usage(w io.Writer, prog string) {
	fmt.Fprint(w, "usage: "+prog+"\n"+
		"\t[-s server_address]\n"+
		"\t[-b bind_address]\n"+
		"\t[-f address_format]\n"+
		"\t    name, ip, ipv6, or gid\n"+
		"\t[-P port_space]\n"+
		"\t    tcp or ib\n"+
		"\t[-c connections]\n"+
		"\t[-C message_count]\n"+
		"\t[-S message_size]\n"+
		"\t[-t type_of_service]\n"+
		"\t[-p port_number]\n"+
		"\t[-m(igrate)]\n"+
		"\t[-a ack_timeout]\n")
}

// atoi is C's atoi: leading digits, 0 for none.
func atoi(s string) int {
	s = strings.TrimSpace(s)
	end := 0
	if end < len(s) && (s[end] == '-' || s[end] == '+') {
		end++
	}
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, _ := strconv.Atoi(s[:end])
	return n
}

// strtoul8 is strtoul(s, NULL, 0) truncated to a byte.
func strtoul8(s string) uint8 {
	n, err := strconv.ParseUint(strings.TrimSpace(s), 0, 64)
	if err != nil {
		return 0
	}
	return uint8(n)
}

// run is the program: argv is its command line, program name first, as C's
// main gets it. It runs the server or the client and returns the exit
// status.
func run(argv []string, stdout, stderr io.Writer) int {
	t := &test{out: stdout, errw: stderr, ps: id.PSTCP, connections: 1, messageCount: 10, messageSize: 100, port: "7471"}
	opts, _, err := tool.Getopt(argv[1:], "s:b:f:P:c:C:S:t:p:ma:")
	if err != nil {
		tool.PrintGetoptError(stderr, argv[0], err)
		usage(stdout, argv[0])
		return tool.ExitFailure
	}
	for _, o := range opts {
		switch o.Name {
		case 's':
			t.dst = o.Arg
		case 'b':
			t.src = o.Arg
		case 'f':
			switch a := strings.ToLower(o.Arg); {
			case strings.HasPrefix(a, "ipv6"):
				t.family = "ipv6"
			case strings.HasPrefix(a, "ip"):
				t.family = "ip"
			case strings.HasPrefix(a, "gid"):
				fmt.Fprintln(stderr, argv[0]+": gid addresses (AF_IB) are not supported")
				return tool.ExitFailure
			case !strings.HasPrefix(a, "name"):
				fmt.Fprintln(stderr, "Warning: unknown address format")
			}
		case 'P':
			switch a := strings.ToLower(o.Arg); {
			case strings.HasPrefix(a, "ib"):
				t.ps = id.PSIB
			case !strings.HasPrefix(a, "tcp"):
				fmt.Fprintln(stderr, "Warning: unknown port space format")
			}
		case 'c':
			t.connections = atoi(o.Arg)
		case 'C':
			t.messageCount = atoi(o.Arg)
		case 'S':
			t.messageSize = atoi(o.Arg)
		case 't':
			t.setTOS, t.tos = true, strtoul8(o.Arg)
		case 'p':
			t.port = o.Arg
		case 'm':
			t.migrate = true
		case 'a':
			t.setAck, t.ackTimeout = true, strtoul8(o.Arg)
		}
	}
	if t.connections < 1 {
		t.connections = 1
	}
	t.connectsLeft = t.connections

	if t.ch, err = tool.CreateEventChannel(stderr); err != nil {
		return tool.ExitFailure
	}
	t.fab = t.ch.Fabric()
	if err := t.allocNodes(); err != nil {
		_ = t.ch.Close()
		return tool.ExitFailure
	}
	var ret int
	if t.dst != "" {
		ret = t.runClient()
	} else {
		ret = t.runServer()
	}
	t.printf("test complete\n")
	t.destroyNodes()
	if err := t.ch.Close(); err != nil {
		t.perror("ucmatose: destroy event channel", err)
	}
	t.printf("return status %d\n", ret)
	return tool.ExitStatus(ret)
}

// resolve turns a host (name or numeric) and the port into an address, as
// get_rdma_addr's rdma_getaddrinfo: the wildcard address when passive and
// host is empty, numeric hosts only with -f ip or -f ipv6, IPv6 only with
// -f ipv6. Failures are *id.AddrInfoError.
func (t *test) resolve(host string, passive bool) (netip.AddrPort, error) {
	hints := &id.AddrInfo{PortSpace: t.ps}
	switch t.family {
	case "ip":
		hints.Flags = id.AINumericHost
	case "ipv6":
		hints.Flags, hints.Family = id.AINumericHost|id.AIFamily, syscall.AF_INET6
	}
	if passive {
		hints.Flags |= id.AIPassive
	}
	ai, err := id.GetAddrInfo(context.Background(), host, t.port, hints)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if passive {
		return ai.Src, nil
	}
	return ai.Dst, nil
}

// gaiStatus is the status rdma_getaddrinfo returns for err: the EAI_* code.
func gaiStatus(err error) int {
	var e *id.AddrInfoError
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
}

func (t *test) allocNodes() error {
	t.nodes = make([]node, t.connections)
	for i := range t.nodes {
		t.nodes[i].idx = i
		if t.dst != "" {
			cid, err := id.Create(t.ch, &t.nodes[i], t.ps)
			if err != nil {
				t.perror("cmatose: unable to create id", err)
				for j := i - 1; j >= 0; j-- {
					_ = t.nodes[j].cmaID.Destroy()
				}
				return err
			}
			t.nodes[i].cmaID = cid
		}
	}
	return nil
}

// createMessage registers the node's message buffer.
func (t *test) createMessage(n *node) error {
	if t.messageSize == 0 {
		t.messageCount = 0
	}
	if t.messageCount == 0 {
		return nil
	}
	n.mem = make([]byte, t.messageSize)
	mr, err := n.cmaID.RegMsgs(n.mem)
	if err != nil {
		t.printf("failed to reg MR\n")
		return err
	}
	n.mr = mr
	return nil
}

// initNode creates the QP (queues as deep as the message count, every send
// signaled) and the message buffer.
func (t *test) initNode(n *node) error {
	cqe := t.messageCount
	if cqe == 0 {
		cqe = 1
	}
	attr := id.QPInitAttr{Cap: id.QPCap{MaxSendWR: cqe, MaxRecvWR: cqe, MaxSendSGE: 1, MaxRecvSGE: 1}, SigAll: true}
	if err := n.cmaID.CreateQP(&attr); err != nil {
		t.perror("cmatose: unable to create QP", err)
		return err
	}
	if err := t.createMessage(n); err != nil {
		t.printf("cmatose: failed to create messages: %v\n", err)
		return err
	}
	return nil
}

func (t *test) postRecvs(n *node) error {
	for i := 0; i < t.messageCount; i++ {
		if err := n.cmaID.PostRecv(uint64(n.idx), n.mem, n.mr); err != nil {
			t.printf("failed to post receives: %v\n", err)
			return err
		}
	}
	return nil
}

func (t *test) postSends(n *node) error {
	if !n.connected || t.messageCount == 0 {
		return nil
	}
	for i := 0; i < t.messageCount; i++ {
		if err := n.cmaID.PostSend(uint64(n.idx), n.mem, n.mr, 0); err != nil {
			t.printf("failed to post sends: %v\n", err)
			return err
		}
	}
	return nil
}

func (t *test) connectError() { t.connectsLeft-- }

func (t *test) setOptions(cid *id.ID) {
	if t.setTOS {
		if err := cid.SetTOS(t.tos); err != nil {
			t.perror("cmatose: set TOS option failed", err)
		}
	}
	if t.setAck {
		if err := cid.SetAckTimeout(t.ackTimeout); err != nil {
			t.perror("cmatose: set ack timeout option failed", err)
		}
	}
}

func (t *test) addrHandler(n *node) error {
	t.setOptions(n.cmaID)
	if err := n.cmaID.ResolveRoute(2000 * time.Millisecond); err != nil {
		t.perror("cmatose: resolve route failed", err)
		t.connectError()
		return err
	}
	return nil
}

func (t *test) routeHandler(n *node) error {
	err := t.initNode(n)
	if err == nil {
		err = t.postRecvs(n)
	}
	if err == nil {
		p := id.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5}
		if err = n.cmaID.Connect(&p); err != nil {
			t.perror("cmatose: failure connecting", err)
		}
	}
	if err != nil {
		t.connectError()
	}
	return err
}

func (t *test) connectHandler(cid *id.ID) error {
	if t.connIndex == t.connections {
		t.printf("cmatose: failing connection request\n")
		_ = cid.Reject(nil)
		_ = cid.Destroy()
		return syscall.ENOMEM
	}
	n := &t.nodes[t.connIndex]
	t.connIndex++
	n.cmaID = cid
	cid.SetContext(n)
	t.setOptions(cid)
	err := t.initNode(n)
	if err == nil {
		err = t.postRecvs(n)
	}
	if err == nil {
		if err = cid.Accept(nil); err != nil {
			t.perror("cmatose: failure accepting", err)
		}
	}
	if err != nil {
		n.cmaID = nil
		t.connectError()
		t.printf("cmatose: failing connection request\n")
		_ = cid.Reject(nil)
		_ = cid.Destroy()
	}
	return err
}

// cmaHandler handles one event, as cma_handler; it returns the status to
// stop on (0 to go on).
func (t *test) cmaHandler(ev *id.Event) int {
	n, _ := ev.ID.Context().(*node)
	switch ev.Type {
	case id.EventAddrResolved:
		if t.addrHandler(n) != nil {
			return -1
		}
	case id.EventRouteResolved:
		if t.routeHandler(n) != nil {
			return -1
		}
	case id.EventConnectRequest:
		if err := t.connectHandler(ev.ID); err != nil {
			return -int(errnoOf(err))
		}
	case id.EventEstablished:
		if n != nil {
			n.connected = true
		}
		t.connectsLeft--
		t.disconnectsLeft++
	case id.EventAddrError, id.EventRouteError, id.EventConnectError, id.EventUnreachable, id.EventRejected:
		t.printf("cmatose: event: %s, error: %d\n", ev.Type, ev.Status)
		t.connectError()
		return ev.Status
	case id.EventDisconnected:
		_ = ev.ID.Disconnect()
		t.disconnectsLeft--
	}
	return 0
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EIO
}

// events handles events while *left is not zero.
func (t *test) events(left *int, what string) int {
	ret := 0
	for *left > 0 && ret == 0 {
		ev, err := t.ch.GetEvent()
		if err != nil {
			t.perror("cmatose: failure in rdma_get_cm_event in "+what+" events", err)
			return int(errnoOf(err))
		}
		ret = t.cmaHandler(ev)
		_ = ev.Ack()
	}
	return ret
}

// pollCQs waits for message_count completions on every connected node.
func (t *test) pollCQs(recv bool) int {
	wcs := make([]id.WC, 8)
	for i := range t.nodes {
		n := &t.nodes[i]
		if !n.connected {
			continue
		}
		qp := n.cmaID.QP()
		cq := qp.SendCQ()
		if recv {
			cq = qp.RecvCQ()
		}
		for done := 0; done < t.messageCount; {
			got := cq.Poll(wcs)
			for _, wc := range wcs[:got] {
				if wc.Status != id.WCSuccess {
					t.printf("cmatose: failed polling CQ: %s (%d)\n", wc.Status, wc.Status)
					return -1
				}
			}
			done += got
			if got == 0 {
				if err := cq.Wait(context.Background()); err != nil {
					t.printf("cmatose: failed polling CQ: %v\n", err)
					return -1
				}
			}
		}
	}
	return 0
}

func (t *test) migrateChannel(listen *id.ID) int {
	t.printf("migrating to new event channel\n")
	ch, err := tool.NewChannel(t.fab)
	if err != nil {
		t.perror("cmatose: failed to create event channel", err)
		return -1
	}
	if listen != nil {
		err = listen.Migrate(ch)
	}
	for i := 0; i < t.connections && err == nil; i++ {
		if t.nodes[i].cmaID != nil {
			err = t.nodes[i].cmaID.Migrate(ch)
		}
	}
	if err != nil {
		t.perror("cmatose: failure migrating to channel", err)
		return -1
	}
	_ = t.ch.Close()
	t.ch = ch
	return 0
}

func (t *test) runServer() int {
	t.printf("cmatose: starting server\n")
	listen, err := id.Create(t.ch, t, t.ps)
	if err != nil {
		t.perror("cmatose: listen request failed", err)
		return -1
	}
	defer func() { _ = listen.Destroy() }()
	addr, err := t.resolve(t.src, true)
	if err != nil {
		t.printf("cmatose: getrdmaaddr error: %v\n", err)
		return gaiStatus(err)
	}
	if err := listen.Bind(addr); err != nil {
		t.perror("cmatose: bind address failed", err)
		return -1
	}
	if err := listen.Listen(0); err != nil {
		t.perror("cmatose: failure trying to listen", err)
		return -1
	}
	if ret := t.events(&t.connectsLeft, "connect"); ret != 0 {
		return ret
	}
	if t.messageCount > 0 {
		t.printf("initiating data transfers\n")
		for i := range t.nodes {
			if err := t.postSends(&t.nodes[i]); err != nil {
				return -1
			}
		}
		t.printf("completing sends\n")
		if ret := t.pollCQs(false); ret != 0 {
			return ret
		}
		t.printf("receiving data transfers\n")
		if ret := t.pollCQs(true); ret != 0 {
			return ret
		}
		t.printf("data transfers complete\n")
	}
	if t.migrate {
		if ret := t.migrateChannel(listen); ret != 0 {
			return ret
		}
	}
	t.printf("cmatose: disconnecting\n")
	for i := range t.nodes {
		n := &t.nodes[i]
		if !n.connected {
			continue
		}
		n.connected = false
		_ = n.cmaID.Disconnect()
	}
	ret := t.events(&t.disconnectsLeft, "disconnect")
	t.printf("disconnected\n")
	return ret
}

func (t *test) runClient() int {
	t.printf("cmatose: starting client\n")
	dst, err := t.resolve(t.dst, false)
	if err == nil && t.src != "" {
		t.srcAddr, err = t.resolve(t.src, true)
		t.srcAddr = netip.AddrPortFrom(t.srcAddr.Addr(), 0)
	}
	if err != nil {
		t.printf("cmatose: getaddrinfo error: %v\n", err)
		return gaiStatus(err)
	}
	t.printf("cmatose: connecting\n")
	for i := range t.nodes {
		if err := t.nodes[i].cmaID.ResolveAddr(t.srcAddr, dst, 2000*time.Millisecond); err != nil {
			t.perror("cmatose: failure getting addr", err)
			t.connectError()
			return -1
		}
	}
	ret := t.events(&t.connectsLeft, "connect")
	if ret == 0 && t.messageCount > 0 {
		t.printf("receiving data transfers\n")
		ret = t.pollCQs(true)
		if ret == 0 {
			t.printf("sending replies\n")
			for i := range t.nodes {
				if err := t.postSends(&t.nodes[i]); err != nil {
					ret = -1
					break
				}
			}
		}
		if ret == 0 {
			t.printf("data transfers complete\n")
		}
	}
	if ret == 0 && t.migrate {
		if ret = t.migrateChannel(nil); ret != 0 {
			return ret
		}
	}
	if ret2 := t.events(&t.disconnectsLeft, "disconnect"); ret2 != 0 {
		ret = ret2
	}
	return ret
}

func (t *test) destroyNodes() {
	for i := range t.nodes {
		if n := &t.nodes[i]; n.cmaID != nil {
			_ = n.cmaID.Destroy() // destroys its QP first
		}
	}
}
