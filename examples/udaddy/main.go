// Command udaddy is librdmacm's udaddy over cmrt: unreliable datagram ids
// connected through SIDR, exchanging datagrams.
//
// The server (no -s) listens; each client connection sends -C messages of -S
// bytes to the server, which answers each connection with as many replies,
// addressed from the completions it received. Options, defaults and output
// are rdma-core's:
//
//	udaddy [-s server_address] [-b bind_address] [-f name|ip|ipv6|gid]
//	       [-P udp|ipoib] [-c connections (1)] [-C message_count (10)]
//	       [-S message_size (100)] [-t type_of_service]
//	       [-p port_space: 0x111 UDP (default), 0x2 IPOIB]
//
// The rdma_cm port is 7174, as in rdma-core; -port (a cmrt extension)
// changes it (as "-port N", "-port=N" or "--port N"). Ids live on the
// default fabric (the software fabric, or the one $CMRT_FABRIC names). A
// PS_IB port space (-p 0x13f) gets UD ids. A failed call is reported on
// stderr as perror(3) words it, followed by cmrt's account in parentheses.
// The exit status is the C program's: 1 on a usage error or when no event
// channel opens, otherwise the "return status" it prints, & 0xff (-110
// exits 146).
package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/id"
)

type node struct {
	id         *id.ID
	connected  bool
	mr         id.MR
	mem        []byte
	ah         *id.AHAttr
	remoteQPN  uint32
	remoteQKey uint32
}

type test struct {
	ch           *channel.Channel
	nodes        []node
	connIndex    int
	connectsLeft int
	src, dst     netip.AddrPort
}

var (
	connections  = 1
	messageSize  = 100
	messageCount = 10
	port         = 7174
	setTOS       bool
	tos          uint8
	dstAddr      string
	srcAddr      string
	portSpace    = id.PSUDP
	t            test
)

const grhSize = 40

// perror reports a failed call as perror(3) does, with cmrt's account.
func perror(what string, err error) { tool.Perror(os.Stderr, what, err) }

// The statuses udaddy.c's functions return: librdmacm calls return -1 and
// leave the errno for perror; verbs posts return the errno itself.
const failed = -1

// postStatus is what ibv_post_send and ibv_post_recv return for err: the
// errno.
func postStatus(err error) int { return -tool.Status(err) }

func createID(ctx any) (*id.ID, error) {
	var opts []id.Option
	if portSpace == id.PSIB {
		opts = append(opts, id.WithQPType(id.UD))
	}
	return id.Create(t.ch, ctx, portSpace, opts...)
}

func createMessage(n *node) int {
	if messageSize == 0 {
		messageCount = 0
	}
	if messageCount == 0 {
		return 0
	}
	n.mem = make([]byte, messageSize+grhSize)
	mr, err := n.id.RegMsgs(n.mem)
	if err != nil {
		fmt.Println("failed to reg MR")
		return failed
	}
	n.mr = mr
	return 0
}

// verifyTestParams checks the message size against what the path carries.
func verifyTestParams(n *node) int {
	x, ok := n.id.QP().(interface{ MaxMessageSize() int })
	if ok && messageCount > 0 && messageSize > x.MaxMessageSize() {
		fmt.Printf("udaddy: message_size %d is larger than active mtu %d\n", messageSize, x.MaxMessageSize())
		return -int(syscall.EINVAL)
	}
	return 0
}

// initNode creates the QP and the message buffer. The path's MTU is known
// once the QP exists, so the message size is checked after it (udaddy.c
// checks it first).
func initNode(n *node) int {
	cnt := max(messageCount, 1)
	err := n.id.CreateQP(&id.QPInitAttr{Cap: id.QPCap{MaxSendWR: cnt, MaxRecvWR: cnt, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		perror("udaddy: unable to create QP", err)
		return failed
	}
	if ret := verifyTestParams(n); ret != 0 {
		return ret
	}
	if ret := createMessage(n); ret != 0 {
		fmt.Printf("udaddy: failed to create messages: %d\n", ret)
		return ret
	}
	return 0
}

func postRecvs(n *node) int {
	for k := 0; k < messageCount; k++ {
		if err := n.id.PostRecv(uint64(k), n.mem, n.mr); err != nil {
			fmt.Printf("failed to post receives: %d\n", postStatus(err))
			return postStatus(err)
		}
	}
	return 0
}

func postSends(n *node, flags id.SendFlags) int {
	if !n.connected || messageCount == 0 {
		return 0
	}
	// As rdma-core's udaddy, each message carries the sender's QP number as
	// immediate data (the C server replies to it); fabrics without
	// immediate data on UD (the software fabric) get plain Sends, whose
	// completions name the sender too.
	qp := n.id.QP()
	imm := true
	for k := 0; k < messageCount; k++ {
		var err error
		if imm {
			err = qp.PostSend(&id.SendWR{WRID: uint64(k), Opcode: id.WRSendWithImm, Flags: flags, Buf: n.mem[:messageSize],
				MR: n.mr, AH: n.ah, RemoteQPN: n.remoteQPN, RemoteQKey: id.UDPQKey, ImmData: qp.Num()})
			if errors.Is(err, syscall.EINVAL) && k == 0 {
				imm = false
			}
		}
		if !imm {
			err = n.id.PostUDSend(uint64(k), n.mem[:messageSize], n.mr, flags, n.ah, n.remoteQPN)
		}
		if err != nil {
			fmt.Printf("failed to post sends: %d\n", postStatus(err))
			return postStatus(err)
		}
	}
	return 0
}

func connectError() { t.connectsLeft-- }

func addrHandler(n *node) int {
	if setTOS {
		if err := n.id.SetTOS(tos); err != nil {
			perror("udaddy: set TOS option failed", err)
		}
	}
	if err := n.id.ResolveRoute(2000 * time.Millisecond); err != nil {
		perror("udaddy: resolve route failed", err)
		connectError()
		return failed
	}
	return 0
}

func routeHandler(n *node) int {
	ret := initNode(n)
	if ret == 0 {
		ret = postRecvs(n)
	}
	if ret == 0 {
		if err := n.id.Connect(&id.ConnParam{}); err != nil {
			perror("udaddy: failure connecting", err)
			ret = failed
		}
	}
	if ret != 0 {
		connectError()
	}
	return ret
}

func connectHandler(cid *id.ID) int {
	if t.connIndex == connections {
		fmt.Println("udaddy: failing connection request")
		_ = cid.Reject(nil)
		return -int(syscall.ENOMEM)
	}
	n := &t.nodes[t.connIndex]
	t.connIndex++
	n.id = cid
	cid.SetContext(n)
	ret := initNode(n)
	if ret == 0 {
		ret = postRecvs(n)
	}
	if ret == 0 {
		if err := cid.Accept(&id.ConnParam{QPNum: cid.QP().Num()}); err != nil {
			perror("udaddy: failure accepting", err)
			ret = failed
		}
	}
	if ret != 0 {
		n.id = nil
		connectError()
		fmt.Println("udaddy: failing connection request")
		_ = cid.Reject(nil)
		return ret
	}
	n.connected = true
	t.connectsLeft--
	return 0
}

func resolvedHandler(n *node, ev *id.Event) int {
	n.remoteQPN, n.remoteQKey = ev.UD.QPNum, ev.UD.QKey
	ah := ev.UD.AH
	n.ah = &ah
	n.connected = true
	t.connectsLeft--
	return 0
}

// cmaHandler handles one event; a non-zero status ends the test.
func cmaHandler(ev *id.Event) int {
	switch ev.Type {
	case id.EventAddrResolved:
		return addrHandler(ev.ID.Context().(*node))
	case id.EventRouteResolved:
		return routeHandler(ev.ID.Context().(*node))
	case id.EventConnectRequest:
		return connectHandler(ev.ID)
	case id.EventEstablished:
		return resolvedHandler(ev.ID.Context().(*node), ev)
	case id.EventAddrError, id.EventRouteError, id.EventConnectError, id.EventUnreachable, id.EventRejected:
		fmt.Printf("udaddy: event: %s, error: %d\n", ev.Type, ev.Status)
		connectError()
		return ev.Status
	}
	return 0
}

func connectEvents() int {
	ret := 0
	for t.connectsLeft > 0 && ret == 0 {
		ev, err := t.ch.GetEvent()
		if err != nil {
			perror("udaddy: rdma_get_cm_event", err)
			return failed
		}
		ret = cmaHandler(ev)
		_ = ev.Ack()
	}
	return ret
}

// pollCQs waits for message_count completions per connected node: receives,
// or sends when sends is set. The first receive gives the server the
// address to reply to.
func pollCQs(sends bool) int {
	for k := range t.nodes {
		n := &t.nodes[k]
		if !n.connected {
			continue
		}
		cq := n.id.QP().RecvCQ()
		if sends {
			cq = n.id.QP().SendCQ()
		}
		wcs := make([]id.WC, 8)
		for done := 0; done < messageCount; {
			got := cq.Poll(wcs)
			if got == 0 {
				if err := cq.Wait(context.Background()); err != nil {
					fmt.Printf("udaddy: failed polling CQ: %d\n", tool.Status(err))
					return tool.Status(err)
				}
				continue
			}
			for _, wc := range wcs[:got] {
				if wc.Status != id.WCSuccess {
					fmt.Printf("udaddy: completion error: %s\n", wc.Status)
					return -1
				}
			}
			if !sends && n.ah == nil {
				// The reply goes where the first message came from.
				ah := id.AHAttr{DGID: wcs[0].Src.Addr().As16(), DLID: wcs[0].Src.Port(), IsGlobal: 1, HopLimit: 64, PortNum: 1}
				n.ah, n.remoteQPN, n.remoteQKey = &ah, wcs[0].SrcQP, id.UDPQKey
			}
			done += got
		}
	}
	return 0
}

func runServer() int {
	fmt.Println("udaddy: starting server")
	lis, err := createID(&t)
	if err != nil {
		perror("udaddy: listen request failed", err)
		return failed
	}
	defer lis.Destroy()
	if err := getRDMAAddr(true); err != nil {
		fmt.Printf("udaddy: getrdmaaddr error: %v\n", err)
		return gaiStatus(err)
	}
	if err := lis.Bind(t.src); err != nil {
		perror("udaddy: bind address failed", err)
		return failed
	}
	if err := lis.Listen(0); err != nil {
		perror("udaddy: failure trying to listen", err)
		return failed
	}
	connectEvents()
	if messageCount == 0 {
		return 0
	}
	fmt.Println("receiving data transfers")
	if ret := pollCQs(false); ret != 0 {
		return ret
	}
	fmt.Println("sending replies")
	for k := range t.nodes {
		if ret := postSends(&t.nodes[k], id.SendSignaled); ret != 0 {
			return ret
		}
	}
	if ret := pollCQs(true); ret != 0 {
		return ret
	}
	fmt.Println("data transfers complete")
	return 0
}

func runClient() int {
	fmt.Println("udaddy: starting client")
	if err := getRDMAAddr(false); err != nil {
		fmt.Printf("udaddy: getaddrinfo error: %v\n", err)
		return gaiStatus(err)
	}
	fmt.Println("udaddy: connecting")
	for k := range t.nodes {
		if err := t.nodes[k].id.ResolveAddr(t.src, t.dst, 2000*time.Millisecond); err != nil {
			perror("udaddy: failure getting addr", err)
			connectError()
			return failed
		}
	}
	if ret := connectEvents(); ret != 0 {
		return ret
	}
	if messageCount == 0 {
		return 0
	}
	fmt.Println("initiating data transfers")
	for k := range t.nodes {
		if ret := postSends(&t.nodes[k], 0); ret != 0 {
			return ret
		}
	}
	fmt.Println("receiving data transfers")
	if ret := pollCQs(false); ret != 0 {
		return ret
	}
	fmt.Println("data transfers complete")
	return 0
}

func usage(name string) {
	fmt.Printf("usage: %s\n", name)
	fmt.Printf("\t[-s server_address]\n")
	fmt.Printf("\t[-b bind_address]\n")
	fmt.Printf("\t[-f address_format]\n")
	fmt.Printf("\t    name, ip, ipv6, or gid\n")
	fmt.Printf("\t[-P port_space]\n")
	fmt.Printf("\t    udp or ipoib\n")
	fmt.Printf("\t[-c connections]\n")
	fmt.Printf("\t[-C message_count]\n")
	fmt.Printf("\t[-S message_size]\n")
	fmt.Printf("\t[-t type_of_service]\n")
	fmt.Printf("\t[-p port_space - %#x for UDP (default), %#x for IPOIB]\n", uint16(id.PSUDP), uint16(id.PSIPoIB))
	fmt.Printf("\t[-port rdma_cm_port (cmrt extension, default 7174)]\n")
}

// getRDMAAddr resolves the addresses as get_rdma_addr (rdma_getaddrinfo):
// the server's -b (or the wildcard) with the port; the client's -s with the
// port, and its -b with port 0. Failures are *tool.GAIError.
func getRDMAAddr(passive bool) error {
	var err error
	service := strconv.Itoa(port)
	if passive {
		t.src, err = tool.Getaddrinfo(srcAddr, service, true)
		return err
	}
	if srcAddr != "" {
		if t.src, err = tool.Getaddrinfo(srcAddr, "", true); err != nil {
			return err
		}
	}
	t.dst, err = tool.Getaddrinfo(dstAddr, service, false)
	return err
}

// gaiStatus is the status rdma_getaddrinfo returns for err: the EAI_* code.
func gaiStatus(err error) int {
	var e *tool.GAIError
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
}

// parseArgs parses the command line (program name first) as udaddy.c's
// getopt loop, with -port added; it returns false after a usage error.
func parseArgs(argv []string) bool {
	opts, _, err := tool.Getopt(argv[1:], "s:b:c:C:S:t:p:P:f:", "port:")
	if err != nil {
		tool.PrintGetoptError(os.Stderr, argv[0], err)
		usage(argv[0])
		return false
	}
	for _, o := range opts {
		switch o.Name {
		case 's':
			dstAddr = o.Arg
		case 'b':
			srcAddr = o.Arg
		case 'c':
			connections = tool.Atoi(o.Arg)
		case 'C':
			messageCount = tool.Atoi(o.Arg)
		case 'S':
			messageSize = tool.Atoi(o.Arg)
		case 't':
			v, err := strconv.ParseUint(o.Arg, 0, 8)
			if err != nil {
				usage(argv[0])
				return false
			}
			setTOS, tos = true, uint8(v)
		case 'p':
			v, err := strconv.ParseInt(o.Arg, 0, 32)
			if err != nil {
				usage(argv[0])
				return false
			}
			portSpace = id.PortSpace(v)
		case 'f':
			switch f := strings.ToLower(o.Arg); {
			case strings.HasPrefix(f, "ip") || strings.HasPrefix(f, "name"):
			case strings.HasPrefix(f, "gid"):
				fmt.Fprintln(os.Stderr, argv[0]+": gid addresses (AF_IB) are not supported")
				return false
			default:
				fmt.Fprintln(os.Stderr, "Warning: unknown address format")
			}
		case 'P':
			switch p := strings.ToLower(o.Arg); {
			case strings.HasPrefix(p, "ipoib"):
				portSpace = id.PSIPoIB
			case !strings.HasPrefix(p, "udp"):
				fmt.Fprintln(os.Stderr, "Warning: unknown port space format")
			}
		case 0: // -port
			v, err := strconv.ParseUint(o.Arg, 10, 16)
			if err != nil {
				usage(argv[0])
				return false
			}
			port = int(v)
		}
	}
	if connections < 1 || messageCount < 0 || messageSize < 0 {
		usage(argv[0])
		return false
	}
	return true
}

// allocNodes makes the client's ids (alloc_nodes).
func allocNodes() error {
	t.nodes = make([]node, connections)
	if dstAddr == "" {
		return nil
	}
	for k := range t.nodes {
		var err error
		if t.nodes[k].id, err = createID(&t.nodes[k]); err != nil {
			perror("udaddy: unable to create id", err)
			return err
		}
	}
	return nil
}

func destroyNodes() {
	for k := range t.nodes {
		if n := &t.nodes[k]; n.id != nil {
			if n.id.QP() != nil {
				_ = n.id.DestroyQP()
			}
			_ = n.id.Destroy()
		}
	}
}

func main() {
	if !parseArgs(tool.Args()) {
		os.Exit(tool.ExitFailure)
	}
	t.connectsLeft = connections
	ch, err := tool.CreateEventChannel(os.Stderr)
	if err != nil {
		os.Exit(tool.ExitFailure)
	}
	t.ch = ch
	if err := allocNodes(); err != nil {
		destroyNodes()
		_ = ch.Close()
		os.Exit(tool.ExitFailure)
	}
	var ret int
	if dstAddr != "" {
		ret = runClient()
	} else {
		ret = runServer()
	}
	fmt.Println("test complete")
	destroyNodes()
	_ = ch.Close()
	fmt.Printf("return status %d\n", ret)
	os.Exit(tool.ExitStatus(ret))
}
