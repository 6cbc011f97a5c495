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
// 0x13f) gets UD ids. The exit status is 0 on success and 1 on failure; the
// last line says "return status N" with the status rdma-core would return.
package main

import (
	"context"
	"flag"
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

// errStatus is the status rdma-core returns for an error: -errno.
func errStatus(err error) int { return tool.Status(err) }

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

func initNode(n *node) error {
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
		return err
	}
	if x, ok := n.id.QP().(interface{ MaxMessageSize() int }); ok && messageCount > 0 && messageSize > x.MaxMessageSize() {
		fmt.Printf("mckey: message_size %d is larger than active mtu %d\n", messageSize, x.MaxMessageSize())
		return syscall.EINVAL
	}
	if err := createMessage(n); err != nil {
		fmt.Printf("mckey: failed to create messages: %d\n", errStatus(err))
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

func postSends(n *node) error {
	if !n.connected || messageCount == 0 {
		return nil
	}
	for k := 0; k < messageCount; k++ {
		if err := n.id.PostUDSend(uint64(k), n.mem[:messageSize], n.mr, 0, n.ah, n.remoteQPN); err != nil {
			fmt.Printf("failed to post sends: %d\n", errStatus(err))
			return err
		}
	}
	return nil
}

func addrHandler(n *node) error {
	err := initNode(n)
	if err == nil && !isSender {
		err = postRecvs(n)
	}
	if err == nil {
		flags := id.JoinFullMember
		if sendOnly {
			flags = id.JoinSendOnly
		}
		if err = n.id.JoinMulticastContext(context.Background(), dst.Addr(), flags, n); err != nil {
			perror("mckey: failure joining", err)
		}
	}
	if err != nil {
		connectsLeft--
	}
	return err
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
		if err := addrHandler(ev.ID.Context().(*node)); err != nil {
			return errStatus(err)
		}
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
			return errStatus(err)
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
			return -1
		}
		src = netip.AddrPortFrom(a, 0)
	}
	a, err := lookup(dstAddr)
	if err != nil {
		fmt.Printf("getaddrinfo failed (%v) - invalid hostname or IP address\n", err)
		return -1
	}
	dst = netip.AddrPortFrom(a, 0)

	fmt.Println("mckey: joining")
	for k := range nodes {
		n := &nodes[k]
		if src.IsValid() {
			if err := n.id.Bind(src); err != nil {
				perror("mckey: addr bind failure", err)
				connectsLeft--
				return errStatus(err)
			}
		}
		if err := n.id.ResolveAddr(src, dst, 2000*time.Millisecond); err != nil {
			perror("mckey: resolve addr failure", err)
			connectsLeft--
			return errStatus(err)
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
					if err := postSends(&nodes[k]); err != nil {
						ret = errStatus(err)
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
				ret = errStatus(err)
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

func parseArgs(args []string) bool {
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(os.Stdout)
	fs.Usage = func() { usage(args[0]) }
	var m, mUnmapped, ps string
	var noLoop bool
	var timeout float64
	fs.StringVar(&m, "m", "", "")
	fs.StringVar(&mUnmapped, "M", "", "")
	fs.BoolVar(&isSender, "s", false, "")
	fs.StringVar(&srcAddr, "b", "", "")
	fs.IntVar(&connections, "c", 1, "")
	fs.IntVar(&messageCount, "C", 10, "")
	fs.IntVar(&messageSize, "S", 100, "")
	fs.StringVar(&ps, "p", "", "")
	fs.BoolVar(&sendOnly, "o", false, "")
	fs.BoolVar(&noLoop, "l", false, "")
	fs.Float64Var(&timeout, "T", 0, "")
	if err := fs.Parse(args[1:]); err != nil {
		return false
	}
	if fs.NArg() > 0 || connections < 1 || messageCount < 0 || messageSize < 0 || timeout < 0 {
		usage(args[0])
		return false
	}
	loopback = !noLoop
	recvTimeout = time.Duration(timeout * float64(time.Second))
	dstAddr = m
	if mUnmapped != "" {
		unmapped, dstAddr = true, mUnmapped
	}
	if ps != "" {
		v, err := strconv.ParseInt(ps, 0, 32)
		if err != nil {
			usage(args[0])
			return false
		}
		portSpace = id.PortSpace(v)
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
		usage(args[0])
		return false
	}
	return true
}

func main() {
	if !parseArgs(os.Args) {
		os.Exit(1)
	}
	connectsLeft = connections
	var err error
	if ch, err = channel.New(); err != nil {
		perror("mckey: unable to create event channel", err)
		os.Exit(1)
	}
	nodes = make([]node, connections)
	for k := range nodes {
		var opts []id.Option
		if portSpace == id.PSIB {
			opts = append(opts, id.WithQPType(id.UD))
		}
		if nodes[k].id, err = id.Create(ch, &nodes[k], portSpace, opts...); err != nil {
			perror("mckey: unable to create id", err)
			os.Exit(1)
		}
	}
	ret := run()
	fmt.Println("test complete")
	for k := range nodes {
		if n := &nodes[k]; n.id != nil {
			if n.id.QP() != nil {
				_ = n.id.DestroyQP()
			}
			_ = n.id.Destroy()
		}
	}
	_ = ch.Close()
	fmt.Printf("return status %d\n", ret)
	if ret != 0 {
		os.Exit(1)
	}
}
