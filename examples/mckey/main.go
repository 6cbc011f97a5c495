// Command mckey is librdmacm's mckey over cmrt: UD ids join a multicast
// group; the sender (-s) sends -C messages of -S bytes to the group and the
// receivers (the default) wait for them.
//
// Options, defaults and output are rdma-core's:
//
//	mckey -m multicast_address [-M unmapped_multicast_address] [-s]
//	      [-b bind_address] [-c connections (1)] [-C message_count (10)]
//	      [-S message_size (100)] [-p port_space: 0x111 UDP (default),
//	      0x2 IPOIB] [-o (join as a send-only full member)]
//	      [-l (join without multicast loopback)]
//
// As rdma-core, each id resolves the group address, creates its QP, joins
// and, three seconds after every join completed, sends or receives; a
// receiver waits for all -C messages. -T seconds (a cmrt extension) bounds
// that wait (0, the default, waits forever as rdma-core). Ids live on the
// default fabric (the software fabric, or the one $CMRT_FABRIC names), whose
// groups use UDP port 4792. -l keeps the sender's QP from receiving its own
// messages (IBV_QP_CREATE_BLOCK_SELF_MCAST_LB); other members still get
// them. -M (AF_IB addresses) is not supported. A PS_IB port space (-p
// 0x13f) gets UD ids. A failed call is reported on stderr as perror(3)
// words it, followed by cmrt's account in parentheses. The exit status is
// the C program's: 1 on a usage error or when no event channel opens,
// otherwise the "return status" it prints, & 0xff (-110 exits 146). One
// difference: rdma-core's status is the last leave's (0 after any earlier
// failure when leaving succeeds); here the first failure is kept.
package main

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
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

var (
	connections  = 1
	messageSize  = 100
	messageCount = 10
	isSender     bool
	sendOnly     bool
	loopback     = true
	dstAddr      string
	srcAddr      string
	unmapped     bool
	portSpace    = id.PSUDP
	recvTimeout  time.Duration

	ch           *channel.Channel
	nodes        []node
	connectsLeft int
	src, dst     netip.AddrPort
)

const grhSize = 40

// perror reports a failed call as perror(3) does, with cmrt's account.
func perror(what string, err error) { tool.Perror(os.Stderr, what, err) }

// The statuses mckey.c's functions return: librdmacm calls return -1 and
// leave the errno for perror; verbs posts return the errno itself.
const failed = -1

// postStatus is what ibv_post_send and ibv_post_recv return for err: the
// errno.
func postStatus(err error) int { return -tool.Status(err) }

// gaiStatus is the status getaddrinfo returns for err: the EAI_* code.
func gaiStatus(err error) int {
	var e *tool.GAIError
	if errors.As(err, &e) {
		return e.Code
	}
	return -1
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

// initNode creates the QP and the message buffer. The path's MTU is known
// once the QP exists, so the message size is checked after it (mckey.c
// checks it first).
func initNode(n *node) int {
	cnt := max(messageCount, 1)
	err := n.id.CreateQP(&id.QPInitAttr{Cap: id.QPCap{MaxSendWR: cnt, MaxRecvWR: cnt, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err == nil && !loopback {
		if x, ok := n.id.QP().(interface{ SetMulticastLoopback(bool) error }); ok {
			err = x.SetMulticastLoopback(false)
		} else {
			err = fmt.Errorf("blocking multicast loopback: %w", syscall.EOPNOTSUPP)
		}
	}
	if err != nil {
		perror("mckey: unable to create QP", err)
		return failed
	}
	if x, ok := n.id.QP().(interface{ MaxMessageSize() int }); ok && messageCount > 0 && messageSize > x.MaxMessageSize() {
		fmt.Printf("mckey: message_size %d is larger than active mtu %d\n", messageSize, x.MaxMessageSize())
		return -int(syscall.EINVAL)
	}
	if ret := createMessage(n); ret != 0 {
		fmt.Printf("mckey: failed to create messages: %d\n", ret)
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

func postSends(n *node) int {
	if !n.connected || messageCount == 0 {
		return 0
	}
	for k := 0; k < messageCount; k++ {
		if err := n.id.PostUDSend(uint64(k), n.mem[:messageSize], n.mr, 0, n.ah, n.remoteQPN); err != nil {
			fmt.Printf("failed to post sends: %d\n", postStatus(err))
			return postStatus(err)
		}
	}
	return 0
}

func addrHandler(n *node) int {
	ret := initNode(n)
	if ret == 0 && !isSender {
		ret = postRecvs(n)
	}
	if ret == 0 {
		flags := id.JoinFullMember
		if sendOnly {
			flags = id.JoinSendOnly
		}
		if err := n.id.JoinMulticastContext(context.Background(), dst.Addr(), flags, n); err != nil {
			perror("mckey: failure joining", err)
			ret = failed
		}
	}
	if ret != 0 {
		connectsLeft--
	}
	return ret
}

func joinHandler(n *node, ud *id.UDParam) {
	fmt.Printf("mckey: joined dgid: %s mlid 0x%x sl %d\n", netip.AddrFrom16(ud.AH.DGID), ud.AH.DLID, ud.AH.SL)
	n.remoteQPN, n.remoteQKey = ud.QPNum, ud.QKey
	ah := ud.AH
	n.ah = &ah
	n.connected = true
	connectsLeft--
}

func cmaHandler(ev *id.Event) int {
	switch ev.Type {
	case id.EventAddrResolved:
		return addrHandler(ev.ID.Context().(*node))
	case id.EventMulticastJoin:
		joinHandler(ev.ID.Context().(*node), &ev.UD)
	case id.EventAddrError, id.EventRouteError, id.EventMulticastError:
		fmt.Printf("mckey: event: %s, error: %d\n", ev.Type, ev.Status)
		connectsLeft--
		return ev.Status
	}
	return 0
}

func connectEvents() int {
	ret := 0
	for connectsLeft > 0 && ret == 0 {
		ev, err := ch.GetEvent()
		if err != nil {
			perror("rdma_get_cm_event", err)
			return failed
		}
		ret = cmaHandler(ev)
		_ = ev.Ack()
	}
	return ret
}

// cmaThread reports asynchronous errors while data moves.
func cmaThread(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	for {
		ev, err := ch.GetEventContext(ctx)
		if err != nil {
			if ctx.Err() == nil {
				perror("rdma_get_cm_event", err)
			}
			return
		}
		switch ev.Type {
		case id.EventMulticastError, id.EventAddrChange:
			fmt.Printf("mckey: event: %s, status: %d\n", ev.Type, ev.Status)
		}
		_ = ev.Ack()
	}
}

func pollCQs() int {
	ctx := context.Background()
	if recvTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, recvTimeout)
		defer cancel()
	}
	for k := range nodes {
		n := &nodes[k]
		if !n.connected {
			continue
		}
		cq := n.id.QP().RecvCQ()
		wcs := make([]id.WC, 8)
		for done := 0; done < messageCount; {
			got := cq.Poll(wcs)
			if got == 0 {
				if err := cq.Wait(ctx); err != nil {
					fmt.Printf("mckey: failed polling CQ: %v (%d of %d messages)\n", err, done, messageCount)
					return -int(syscall.ETIMEDOUT)
				}
				continue
			}
			for _, wc := range wcs[:got] {
				if wc.Status != id.WCSuccess {
					fmt.Printf("mckey: completion error: %s\n", wc.Status)
					return -1
				}
			}
			done += got
		}
	}
	return 0
}

func run() int {
	role := "server"
	if isSender {
		role = "client"
	}
	fmt.Printf("mckey: starting %s\n", role)
	if srcAddr != "" {
		a, err := lookup(srcAddr)
		if err != nil {
			fmt.Printf("getaddrinfo failed (%v) - invalid hostname or IP address\n", err)
			return gaiStatus(err)
		}
		src = netip.AddrPortFrom(a, 0)
	}
	a, err := lookup(dstAddr)
	if err != nil {
		fmt.Printf("getaddrinfo failed (%v) - invalid hostname or IP address\n", err)
		return gaiStatus(err)
	}
	dst = netip.AddrPortFrom(a, 0)

	fmt.Println("mckey: joining")
	for k := range nodes {
		n := &nodes[k]
		if src.IsValid() {
			if err := n.id.Bind(src); err != nil {
				perror("mckey: addr bind failure", err)
				connectsLeft--
				return failed
			}
		}
		if err := n.id.ResolveAddr(src, dst, 2000*time.Millisecond); err != nil {
			perror("mckey: resolve addr failure", err)
			connectsLeft--
			return failed
		}
	}
	ret := connectEvents()
	if ret == 0 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go cmaThread(ctx, done)
		defer func() { cancel(); <-done }()

		// Pause to give the fabric a chance to set up the group, as
		// rdma-core does for the subnet manager.
		time.Sleep(3 * time.Second)
		if messageCount > 0 {
			if isSender {
				fmt.Println("initiating data transfers")
				for k := range nodes {
					if ret = postSends(&nodes[k]); ret != 0 {
						break
					}
				}
			} else {
				fmt.Println("receiving data transfers")
				ret = pollCQs()
			}
			if ret == 0 {
				fmt.Println("data transfers complete")
			}
		}
	}
	for k := range nodes {
		if err := nodes[k].id.LeaveMulticast(dst.Addr()); err != nil {
			perror("mckey: failure leaving", err)
			if ret == 0 {
				ret = failed
			}
		}
	}
	return ret
}

// lookup resolves a host name or address (the first address, as
// getaddrinfo gives them).
func lookup(host string) (netip.Addr, error) { return tool.LookupHost(host) }

func usage(name string) {
	fmt.Printf("usage: %s\n", name)
	fmt.Printf("\t-m multicast_address\n")
	fmt.Printf("\t[-M unmapped_multicast_address]\n\t replaces -m and requires -b\n")
	fmt.Printf("\t[-s(ender)]\n")
	fmt.Printf("\t[-b bind_address]\n")
	fmt.Printf("\t[-c connections]\n")
	fmt.Printf("\t[-C message_count]\n")
	fmt.Printf("\t[-S message_size]\n")
	fmt.Printf("\t[-p port_space - %#x for UDP (default), %#x for IPOIB]\n", uint16(id.PSUDP), uint16(id.PSIPoIB))
	fmt.Printf("\t[-o join as a send-only full-member]\n")
	fmt.Printf("\t[-l join without multicast loopback]\n")
	fmt.Printf("\t[-T seconds to wait for the messages (cmrt extension; 0: forever)]\n")
}

// parseArgs parses the command line (program name first) as mckey.c's
// getopt loop, with -T added; it returns false after a usage error.
func parseArgs(argv []string) bool {
	opts, rest, err := tool.Getopt(argv[1:], "m:M:sb:c:C:S:p:olT:")
	if err != nil {
		tool.PrintGetoptError(os.Stderr, argv[0], err)
		usage(argv[0])
		return false
	}
	for _, o := range opts {
		switch o.Name {
		case 'm':
			dstAddr = o.Arg
		case 'M':
			unmapped, dstAddr = true, o.Arg
		case 's':
			isSender = true
		case 'b':
			srcAddr = o.Arg
		case 'c':
			connections = tool.Atoi(o.Arg)
		case 'C':
			messageCount = tool.Atoi(o.Arg)
		case 'S':
			messageSize = tool.Atoi(o.Arg)
		case 'p':
			v, err := strconv.ParseInt(o.Arg, 0, 32)
			if err != nil {
				usage(argv[0])
				return false
			}
			portSpace = id.PortSpace(v)
		case 'o':
			sendOnly = true
		case 'l':
			loopback = false
		case 'T':
			v, err := strconv.ParseFloat(o.Arg, 64)
			if err != nil || v < 0 {
				usage(argv[0])
				return false
			}
			recvTimeout = time.Duration(v * float64(time.Second))
		}
	}
	if len(rest) > 0 || connections < 1 || messageCount < 0 || messageSize < 0 {
		usage(argv[0])
		return false
	}
	if unmapped && srcAddr == "" {
		fmt.Println("unmapped multicast address requires binding to source address")
		return false
	}
	if unmapped {
		fmt.Println("mckey: unmapped (AF_IB) multicast addresses are not supported")
		return false
	}
	if dstAddr == "" {
		usage(argv[0])
		return false
	}
	return true
}

func main() {
	if !parseArgs(tool.Args()) {
		os.Exit(tool.ExitFailure)
	}
	connectsLeft = connections
	var err error
	if ch, err = tool.CreateEventChannel(os.Stderr); err != nil {
		os.Exit(tool.ExitFailure)
	}
	nodes = make([]node, connections)
	for k := range nodes {
		var opts []id.Option
		if portSpace == id.PSIB {
			opts = append(opts, id.WithQPType(id.UD))
		}
		if nodes[k].id, err = id.Create(ch, &nodes[k], portSpace, opts...); err != nil {
			perror("mckey: unable to create id", err)
			destroyNodes()
			_ = ch.Close()
			os.Exit(tool.ExitFailure)
		}
	}
	ret := run()
	fmt.Println("test complete")
	destroyNodes()
	_ = ch.Close()
	fmt.Printf("return status %d\n", ret)
	os.Exit(tool.ExitStatus(ret))
}

func destroyNodes() {
	for k := range nodes {
		if n := &nodes[k]; n.id != nil {
			if n.id.QP() != nil {
				_ = n.id.DestroyQP()
			}
			_ = n.id.Destroy()
		}
	}
}
