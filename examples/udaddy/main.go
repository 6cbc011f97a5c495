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
// changes it. Ids live on the default fabric (the software fabric, or the
// one $CMRT_FABRIC names). A PS_IB port space (-p 0x13f) gets UD ids. The
// exit status is 0 on success and 1 on failure; the last line says "return
// status N" with the status rdma-core would return.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
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

// errStatus is the status rdma-core returns for an error: -errno.
func errStatus(err error) int { return tool.Status(err) }

func createID(ctx any) (*id.ID, error) {
	var opts []id.Option
	if portSpace == id.PSIB {
		opts = append(opts, id.WithQPType(id.UD))
	}
	return id.Create(t.ch, ctx, portSpace, opts...)
}

func createMessage(n *node) error {
	if messageSize == 0 {
		messageCount = 0
	}
	if messageCount == 0 {
		return nil
	}
	n.mem = make([]byte, messageSize+grhSize)
	mr, err := n.id.RegMsgs(n.mem)
	if err != nil {
		fmt.Println("failed to reg MR")
		return err
	}
	n.mr = mr
	return nil
}

// verifyTestParams checks the message size against what the path carries.
func verifyTestParams(n *node) error {
	x, ok := n.id.QP().(interface{ MaxMessageSize() int })
	if ok && messageCount > 0 && messageSize > x.MaxMessageSize() {
		fmt.Printf("udaddy: message_size %d is larger than active mtu %d\n", messageSize, x.MaxMessageSize())
		return fmt.Errorf("message too large: %w", errEINVAL)
	}
	return nil
}

func initNode(n *node) error {
	cnt := max(messageCount, 1)
	err := n.id.CreateQP(&id.QPInitAttr{Cap: id.QPCap{MaxSendWR: cnt, MaxRecvWR: cnt, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err != nil {
		perror("udaddy: unable to create QP", err)
		return err
	}
	if err := verifyTestParams(n); err != nil {
		return err
	}
	if err := createMessage(n); err != nil {
		fmt.Printf("udaddy: failed to create messages: %d\n", errStatus(err))
		return err
	}
	return nil
}

func postRecvs(n *node) error {
	for k := 0; k < messageCount; k++ {
		if err := n.id.PostRecv(uint64(k), n.mem, n.mr); err != nil {
			fmt.Printf("failed to post receives: %d\n", errStatus(err))
			return err
		}
	}
	return nil
}

func postSends(n *node, flags id.SendFlags) error {
	if !n.connected || messageCount == 0 {
		return nil
	}
	for k := 0; k < messageCount; k++ {
		if err := n.id.PostUDSend(uint64(k), n.mem[:messageSize], n.mr, flags, n.ah, n.remoteQPN); err != nil {
			fmt.Printf("failed to post sends: %d\n", errStatus(err))
			return err
		}
	}
	return nil
}

func connectError() { t.connectsLeft-- }

func addrHandler(n *node) error {
	if setTOS {
		if err := n.id.SetTOS(tos); err != nil {
			perror("udaddy: set TOS option failed", err)
		}
	}
	if err := n.id.ResolveRoute(2000 * time.Millisecond); err != nil {
		perror("udaddy: resolve route failed", err)
		connectError()
		return err
	}
	return nil
}

func routeHandler(n *node) error {
	err := initNode(n)
	if err == nil {
		err = postRecvs(n)
	}
	if err == nil {
		if err = n.id.Connect(&id.ConnParam{}); err != nil {
			perror("udaddy: failure connecting", err)
		}
	}
	if err != nil {
		connectError()
	}
	return err
}

func connectHandler(cid *id.ID) error {
	if t.connIndex == connections {
		fmt.Println("udaddy: failing connection request")
		_ = cid.Reject(nil)
		return errENOMEM
	}
	n := &t.nodes[t.connIndex]
	t.connIndex++
	n.id = cid
	cid.SetContext(n)
	err := initNode(n)
	if err == nil {
		err = postRecvs(n)
	}
	if err == nil {
		if err = cid.Accept(&id.ConnParam{QPNum: cid.QP().Num()}); err != nil {
			perror("udaddy: failure accepting", err)
		}
	}
	if err != nil {
		n.id = nil
		connectError()
		fmt.Println("udaddy: failing connection request")
		_ = cid.Reject(nil)
		return err
	}
	n.connected = true
	t.connectsLeft--
	return nil
}

func resolvedHandler(n *node, ev *id.Event) error {
	n.remoteQPN, n.remoteQKey = ev.UD.QPNum, ev.UD.QKey
	ah := ev.UD.AH
	n.ah = &ah
	n.connected = true
	t.connectsLeft--
	return nil
}

// cmaHandler handles one event; a non-zero status ends the test.
func cmaHandler(ev *id.Event) int {
	var err error
	switch ev.Type {
	case id.EventAddrResolved:
		err = addrHandler(ev.ID.Context().(*node))
	case id.EventRouteResolved:
		err = routeHandler(ev.ID.Context().(*node))
	case id.EventConnectRequest:
		err = connectHandler(ev.ID)
	case id.EventEstablished:
		err = resolvedHandler(ev.ID.Context().(*node), ev)
	case id.EventAddrError, id.EventRouteError, id.EventConnectError, id.EventUnreachable, id.EventRejected:
		fmt.Printf("udaddy: event: %s, error: %d\n", ev.Type, ev.Status)
		connectError()
		return ev.Status
	}
	if err != nil {
		return errStatus(err)
	}
	return 0
}

func connectEvents() int {
	ret := 0
	for t.connectsLeft > 0 && ret == 0 {
		ev, err := t.ch.GetEvent()
		if err != nil {
			perror("udaddy: rdma_get_cm_event", err)
			return errStatus(err)
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
					fmt.Printf("udaddy: failed polling CQ: %d\n", errStatus(err))
					return errStatus(err)
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
		return errStatus(err)
	}
	defer lis.Destroy()
	if err := lis.Bind(t.src); err != nil {
		perror("udaddy: bind address failed", err)
		return errStatus(err)
	}
	if err := lis.Listen(0); err != nil {
		perror("udaddy: failure trying to listen", err)
		return errStatus(err)
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
		if err := postSends(&t.nodes[k], id.SendSignaled); err != nil {
			return errStatus(err)
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
	fmt.Println("udaddy: connecting")
	for k := range t.nodes {
		if err := t.nodes[k].id.ResolveAddr(t.src, t.dst, 2000*time.Millisecond); err != nil {
			perror("udaddy: failure getting addr", err)
			connectError()
			return errStatus(err)
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
		if err := postSends(&t.nodes[k], 0); err != nil {
			return errStatus(err)
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

// lookup resolves a host name or address (the first address, as
// getaddrinfo gives them).
func lookup(host string) (netip.Addr, error) {
	a, err := tool.LookupHost(host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("getaddrinfo %s: %w", host, err)
	}
	return a, nil
}

func parseArgs(args []string) bool {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.Usage = func() { usage(args[0]) }
	fs.SetOutput(os.Stdout)
	var tosArg, psArg, psName, format string
	fs.StringVar(&dstAddr, "s", "", "")
	fs.StringVar(&srcAddr, "b", "", "")
	fs.IntVar(&connections, "c", 1, "")
	fs.IntVar(&messageCount, "C", 10, "")
	fs.IntVar(&messageSize, "S", 100, "")
	fs.StringVar(&tosArg, "t", "", "")
	fs.StringVar(&psArg, "p", "", "")
	fs.StringVar(&psName, "P", "", "")
	fs.StringVar(&format, "f", "", "")
	fs.IntVar(&port, "port", 7174, "")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() > 0 {
		if err == nil {
			usage(args[0])
		}
		return false
	}
	if tosArg != "" {
		v, err := strconv.ParseUint(tosArg, 0, 8)
		if err != nil {
			usage(args[0])
			return false
		}
		setTOS, tos = true, uint8(v)
	}
	if psArg != "" {
		v, err := strconv.ParseInt(psArg, 0, 32)
		if err != nil {
			usage(args[0])
			return false
		}
		portSpace = id.PortSpace(v)
	}
	switch {
	case psName == "":
	case strings.HasPrefix(strings.ToLower(psName), "ipoib"):
		portSpace = id.PSIPoIB
	case !strings.HasPrefix(strings.ToLower(psName), "udp"):
		fmt.Fprintln(os.Stderr, "Warning: unknown port space format")
	}
	switch f := strings.ToLower(format); {
	case f == "" || strings.HasPrefix(f, "ip") || strings.HasPrefix(f, "name"):
	case strings.HasPrefix(f, "gid"):
		fmt.Fprintln(os.Stderr, "udaddy: gid addresses (AF_IB) are not supported")
		return false
	default:
		fmt.Fprintln(os.Stderr, "Warning: unknown address format")
	}
	if connections < 1 || port < 0 || port > 0xFFFF || messageCount < 0 || messageSize < 0 {
		usage(args[0])
		return false
	}
	return true
}

func run() int {
	var err error
	if srcAddr != "" {
		a, err := lookup(srcAddr)
		if err != nil {
			fmt.Printf("udaddy: %v\n", err)
			return -1
		}
		t.src = netip.AddrPortFrom(a, 0)
	}
	if dstAddr != "" {
		a, err := lookup(dstAddr)
		if err != nil {
			fmt.Printf("udaddy: %v\n", err)
			return -1
		}
		t.dst = netip.AddrPortFrom(a, uint16(port))
	} else {
		a := netip.IPv4Unspecified()
		if t.src.IsValid() {
			a = t.src.Addr()
		}
		t.src = netip.AddrPortFrom(a, uint16(port))
	}
	t.nodes = make([]node, connections)
	if dstAddr != "" {
		for k := range t.nodes {
			if t.nodes[k].id, err = createID(&t.nodes[k]); err != nil {
				perror("udaddy: unable to create id", err)
				return errStatus(err)
			}
		}
		return runClient()
	}
	return runServer()
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
	if !parseArgs(os.Args) {
		os.Exit(1)
	}
	t.connectsLeft = connections
	ch, err := channel.New()
	if err != nil {
		perror("udaddy: unable to create event channel", err)
		os.Exit(1)
	}
	t.ch = ch
	ret := run()
	fmt.Println("test complete")
	destroyNodes()
	_ = ch.Close()
	fmt.Printf("return status %d\n", ret)
	if ret != 0 {
		os.Exit(1)
	}
}
