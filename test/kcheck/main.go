// Command kcheck drives the kernel fabric against a real rdma_cm (rxe0 or
// siw0 in the test VM): connection, reject, UD and multicast flows between
// two kcheck processes or against rdma-core's ucmatose, udaddy and mckey,
// synchronous ids, and a cmtime-like connect/disconnect timing. Every
// event is printed; the exit status is 0 when the flow went as expected.
//
//	kcheck devices
//	kcheck server  -b IP [-p PORT] [-ps tcp|udp] [-n N] [-reject] [-disc server|client] [-expect accept-einval]
//	kcheck client  -s IP [-p PORT] [-ps tcp|udp] [-expect established|rejected|unreachable|connect-einval] [-status N] [-disc server|client]
//	kcheck join    -b IP -m GROUP [-sendonly] [-hold DURATION]
//	kcheck sync    -b IP [-p PORT]
//	kcheck errors  -b IP
//	kcheck bench-server -b IP [-p PORT] -c N
//	kcheck bench-client -s IP [-p PORT] -c N
//	kcheck nodev
//	kcheck pp-server -b IP [-p PORT] [-size N] [-iters N] [-e]
//	kcheck pp-client -s IP [-p PORT] [-size N] [-iters N] [-e]
//
// -noafib makes any of them use the pre-AF_IB commands (BIND_IP,
// RESOLVE_IP, QUERY_ROUTE, JOIN_IP_MCAST) instead of BIND, RESOLVE_ADDR,
// QUERY and JOIN_MCAST. -cpuprofile FILE writes a CPU profile of the run
// (for the VM figures of BENCHMARKS.md part 7).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel"
	"github.com/cmrt/cmrt/id"
)

// The QP numbers announced are fake (except pp-server and pp-client's,
// which have QPs): the other flows have no QPs (cmtime's
// "no QPs" run does the same). QP numbers must differ between connections of the same pair of nodes:
// the IB CM rejects a REQ or REP naming a remote QPN it already has a
// connection with (REJ reason 10, stale connection).
// Each process numbers from its own base (pid-derived, 24-bit QPNs) and
// never reuses a number.
var nextQPN = uint32(os.Getpid()&0x3fff) << 8

func uniqueQPN() uint32 { nextQPN++; return nextQPN & 0xFFFFFF }

var (
	fs        = flag.NewFlagSet("kcheck", flag.ExitOnError)
	bindAddr  = fs.String("b", "", "local address")
	srvAddr   = fs.String("s", "", "server address")
	port      = fs.Uint("p", 7471, "port")
	psName    = fs.String("ps", "tcp", "port space: tcp or udp")
	count     = fs.Int("n", 1, "connections to serve")
	conns     = fs.Int("c", 100, "connections (bench)")
	reject    = fs.Bool("reject", false, "reject connection requests")
	disc      = fs.String("disc", "server", "which side disconnects first: server or client")
	expect    = fs.String("expect", "established", "expected outcome: established, rejected, unreachable, connect-einval (client), accept-einval (server)")
	group     = fs.String("m", "", "multicast group")
	sendOnly  = fs.Bool("sendonly", false, "join send-only")
	hold      = fs.Duration("hold", 0, "stay joined this long")
	timeout   = fs.Duration("t", 20*time.Second, "overall timeout")
	status    = fs.Int("status", 0, "expected status of REJECTED or UNREACHABLE (0: any)")
	noAFIB    = fs.Bool("noafib", false, "use the pre-AF_IB commands (BIND_IP, RESOLVE_IP, QUERY_ROUTE, JOIN_IP_MCAST)")
	ppSize    = fs.Int("size", 4096, "message size (pp-server, pp-client)")
	ppIters   = fs.Int("iters", 1000, "iterations (pp-server, pp-client)")
	ppEvents  = fs.Bool("e", false, "wait for completion events instead of busy polling (pp-server, pp-client)")
	ppThreads = fs.Bool("threads", false, "print each thread's CPU time and context switches over the timed loop (pp-server, pp-client)")
	cpuProf   = fs.String("cpuprofile", "", "write a CPU profile to this file")
)

var netip0 netip.AddrPort

// fab is the fabric under test: the registered one, or (-noafib) one
// forced to the *_IP commands.
var fab = kernel.Default()

func main() { os.Exit(kcheck()) }

// kcheck is main: it returns the exit status once its deferred calls (the
// profile's end) have run.
func kcheck() int {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: kcheck devices|server|client|join|sync|errors|bench-server|bench-client|nodev|pp-server|pp-client|qps [flags]")
		return 2
	}
	cmd := os.Args[1]
	_ = fs.Parse(os.Args[2:])
	if *noAFIB {
		fab = kernel.New(kernel.WithAFIB(false), kernel.WithName("kernel-ip"))
	}
	if *cpuProf != "" {
		stop, err := startProfile(*cpuProf)
		if err != nil {
			fmt.Printf("kcheck %s: FAIL: %v\n", cmd, err)
			return 1
		}
		defer stop()
	}
	if err := run(cmd); err != nil {
		fmt.Printf("kcheck %s: FAIL: %v\n", cmd, err)
		return 1
	}
	fmt.Printf("kcheck %s: ok\n", cmd)
	return 0
}

func run(cmd string) error {
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var err error
	switch cmd {
	case "devices":
		err = devices()
	case "server":
		err = server(ctx)
	case "client":
		err = client(ctx)
	case "join":
		err = join(ctx)
	case "sync":
		err = syncFlow(ctx)
	case "errors":
		err = errorCases(ctx)
	case "bench-server":
		err = benchServer(ctx)
	case "bench-client":
		err = benchClient(ctx)
	case "nodev":
		err = nodev()
	case "pp-server":
		err = pingpong(ctx, true)
	case "pp-client":
		err = pingpong(ctx, false)
	case "qps":
		err = qps()
	default:
		err = fmt.Errorf("unknown command %q", cmd)
	}
	return err
}

// startProfile starts a CPU profile written to path; stop ends it.
func startProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

func ps() id.PortSpace {
	if *psName == "udp" {
		return id.PSUDP
	}
	return id.PSTCP
}

func addrPort(ip string) netip.AddrPort {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		fmt.Printf("bad address %q: %v\n", ip, err)
		os.Exit(2)
	}
	return netip.AddrPortFrom(a, uint16(*port))
}

// kch is a minimal event channel over a kernel event source. kcheck does
// not use package channel, so that it builds whatever state the other
// fabrics are in; the channel package is tested on its own.
type kch struct{ src fabric.EventSource }

func (c *kch) Source() fabric.EventSource { return c.src }

func (c *kch) GetEventContext(ctx context.Context) (*id.Event, error) {
	return id.NextEvent(ctx, c.src, true)
}

func (c *kch) Close() error { return c.src.Close() }

func newChannel() (*kch, error) {
	src, err := fab.Open()
	if err != nil {
		return nil, err
	}
	return &kch{src: src}, nil
}

func devices() error {
	devs, err := fab.Devices()
	if err != nil {
		return err
	}
	if src, err := fab.Open(); err == nil {
		fmt.Printf("kernel fabric: AF_IB commands: %v\n", fab.UsesAFIB())
		_ = src.Close()
	}
	for _, d := range devs {
		fmt.Printf("device %s index %d transport %s netdev %s guid %016x addrs %v rd_atom %d/%d\n",
			d.Name, d.Index, d.Transport, d.Netdev, d.NodeGUID, d.Addrs, d.MaxQPRdAtom, d.MaxQPInitRdAtom)
	}
	return nil
}

// printEvent prints an event as the tests grep for it.
func printEvent(who string, ev *id.Event) {
	fmt.Printf("%s: event %s status %d", who, ev.Type, ev.Status)
	switch {
	case ev.Type == id.EventMulticastJoin || ev.Type == id.EventMulticastError:
		fmt.Printf(" group %s qpn 0x%x qkey 0x%x dgid %s", ev.Group, ev.UD.QPNum, ev.UD.QKey, netip.AddrFrom16(ev.UD.AH.DGID))
	case ev.ID != nil && ev.ID.QPType() == id.UD:
		fmt.Printf(" qpn 0x%x qkey 0x%x", ev.UD.QPNum, ev.UD.QKey)
		if len(ev.UD.PrivateData) > 0 {
			fmt.Printf(" pd_len %d", len(ev.UD.PrivateData))
		}
	default:
		if ev.Type == id.EventConnectRequest || ev.Type == id.EventConnectResponse || ev.Type == id.EventEstablished {
			fmt.Printf(" qpn 0x%x ird %d ord %d", ev.Conn.QPNum, ev.Conn.ResponderResources, ev.Conn.InitiatorDepth)
		}
		if pd := ev.Conn.PrivateData; len(pd) > 0 {
			fmt.Printf(" pd_len %d pd %q", len(pd), strings.TrimRight(string(pd), "\x00"))
		}
	}
	fmt.Println()
}

func printRoute(who string, i *id.ID) {
	r := i.Route()
	fmt.Printf("%s: route src %s dst %s device %s port %d paths %d mtu %d\n",
		who, r.Src, r.Dst, r.Device, r.PortNum, r.NumPaths, r.MTU)
}

// next waits for the next event and checks its type.
func next(ctx context.Context, ch *kch, who string, want ...id.EventType) (*id.Event, error) {
	ev, err := ch.GetEventContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("waiting for %v: %w", want, err)
	}
	printEvent(who, ev)
	if len(want) == 0 {
		return ev, nil
	}
	for _, w := range want {
		if ev.Type == w {
			return ev, nil
		}
	}
	t, st := ev.Type, ev.Status
	_ = ev.Ack()
	return nil, fmt.Errorf("got %s (status %d), want %v", t, st, want)
}

func server(ctx context.Context) error {
	ch, err := newChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	lis, err := id.Create(ch, nil, ps())
	if err != nil {
		return err
	}
	defer lis.Destroy()
	if err := lis.Bind(addrPort(*bindAddr)); err != nil {
		return err
	}
	if err := lis.Listen(0); err != nil {
		return err
	}
	printRoute("server listen", lis)
	fmt.Println("server: listening")
	done, live := 0, map[*id.ID]bool{}
	for done < *count {
		ev, err := next(ctx, ch, "server")
		if err != nil {
			return err
		}
		t, status, child := ev.Type, ev.Status, ev.ID
		_ = ev.Ack()
		switch t {
		case id.EventConnectRequest:
			printRoute("server request", child)
			if *reject {
				if err := child.Reject([]byte("kcheck-reject")); err != nil {
					return err
				}
				_ = child.Destroy()
				done++
				continue
			}
			err := child.Accept(&id.ConnParam{QPNum: uniqueQPN(), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7})
			if *expect == "accept-einval" {
				// iWARP: the iw_cm looks the QP up by number; without
				// one the kernel refuses the accept, and has then
				// already refused the connection: a reject is EINVAL.
				fmt.Printf("server: accept: %v\n", err)
				if !errors.Is(err, syscall.EINVAL) {
					return fmt.Errorf("accept: %v, want EINVAL", err)
				}
				fmt.Printf("server: reject after the failed accept: %v\n", child.Reject(nil))
				_ = child.Destroy()
				done++
				continue
			}
			if err != nil {
				return err
			}
			fmt.Println("server: accepted")
			if ps() == id.PSUDP {
				_ = child.Destroy()
				done++
				continue
			}
			live[child] = true
		case id.EventEstablished:
			if status != 0 {
				return fmt.Errorf("ESTABLISHED with status %d", status)
			}
			if *disc == "server" {
				if err := child.Disconnect(); err != nil {
					return err
				}
				fmt.Println("server: disconnect sent")
			}
		case id.EventDisconnected:
			if *disc != "server" {
				if err := child.Disconnect(); err != nil {
					return err
				}
			}
			if live[child] {
				delete(live, child)
				_ = child.Destroy()
				done++
			}
		case id.EventTimewaitExit:
		default:
			return fmt.Errorf("unexpected %s status %d", t, status)
		}
	}
	return nil
}

func client(ctx context.Context) error {
	ch, err := newChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	c, err := id.Create(ch, nil, ps())
	if err != nil {
		return err
	}
	defer c.Destroy()
	var src netip.AddrPort
	if *bindAddr != "" {
		src = netip.AddrPortFrom(netip.MustParseAddr(*bindAddr), 0)
	}
	if err := c.ResolveAddr(src, addrPort(*srvAddr), 2*time.Second); err != nil {
		return err
	}
	if ev, err := next(ctx, ch, "client", id.EventAddrResolved); err != nil {
		return err
	} else {
		_ = ev.Ack()
	}
	printRoute("client addr", c)
	if err := c.ResolveRoute(2 * time.Second); err != nil {
		return err
	}
	if ev, err := next(ctx, ch, "client", id.EventRouteResolved); err != nil {
		return err
	} else {
		_ = ev.Ack()
	}
	printRoute("client route", c)
	err = c.Connect(&id.ConnParam{QPNum: uniqueQPN(), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5, RNRRetryCount: 7,
		PrivateData: []byte("kcheck-hello")})
	if *expect == "connect-einval" {
		// iWARP: the iw_cm looks the QP up by number; without one the
		// kernel refuses the connect.
		fmt.Printf("client: connect: %v\n", err)
		if !errors.Is(err, syscall.EINVAL) {
			return fmt.Errorf("connect: %v, want EINVAL", err)
		}
		return nil
	}
	if err != nil {
		return err
	}
	ev, err := next(ctx, ch, "client")
	if err != nil {
		return err
	}
	t, status := ev.Type, ev.Status
	pd := string(ev.PrivateData())
	qkey := ev.UD.QKey
	_ = ev.Ack()
	switch *expect {
	case "rejected":
		if t != id.EventRejected {
			return fmt.Errorf("got %s, want REJECTED", t)
		}
		fmt.Printf("client: rejected, status %d, private data from kcheck: %v\n", status, strings.HasPrefix(pd, "kcheck-reject"))
		return checkStatus(status)
	case "unreachable":
		if t != id.EventUnreachable {
			return fmt.Errorf("got %s, want UNREACHABLE", t)
		}
		fmt.Printf("client: unreachable, status %d\n", status)
		return checkStatus(status)
	}
	if ps() == id.PSUDP {
		if t != id.EventEstablished || qkey != id.UDPQKey {
			return fmt.Errorf("got %s qkey %#x, want ESTABLISHED with qkey %#x", t, qkey, id.UDPQKey)
		}
		return nil
	}
	if t != id.EventConnectResponse {
		return fmt.Errorf("got %s status %d, want CONNECT_RESPONSE", t, status)
	}
	if err := c.Establish(); err != nil {
		return err
	}
	fmt.Println("client: established (RTU sent)")
	printRoute("client connected", c)
	if *disc == "client" {
		if err := c.Disconnect(); err != nil {
			return err
		}
		fmt.Println("client: disconnect sent")
		ev, err := next(ctx, ch, "client", id.EventDisconnected)
		if err != nil {
			return err
		}
		_ = ev.Ack()
		return nil
	}
	ev, err = next(ctx, ch, "client", id.EventDisconnected)
	if err != nil {
		return err
	}
	_ = ev.Ack()
	return c.Disconnect()
}

func checkStatus(got int) error {
	if *status != 0 && got != *status {
		return fmt.Errorf("status %d, want %d", got, *status)
	}
	return nil
}

func join(ctx context.Context) error {
	ch, err := newChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	j, err := id.Create(ch, nil, id.PSUDP)
	if err != nil {
		return err
	}
	defer j.Destroy()
	if err := j.Bind(netip.AddrPortFrom(netip.MustParseAddr(*bindAddr), 0)); err != nil {
		return err
	}
	g := netip.MustParseAddr(*group)
	flags := id.JoinFullMember
	if *sendOnly {
		flags = id.JoinSendOnly
	}
	if err := j.JoinMulticastContext(ctx, g, flags, "kcheck-join"); err != nil {
		return err
	}
	ev, err := next(ctx, ch, "join", id.EventMulticastJoin)
	if err != nil {
		return err
	}
	if ev.Group != g || ev.UD.QPNum != 0xFFFFFF || ev.JoinContext != "kcheck-join" {
		return fmt.Errorf("join event: group %s qpn %#x context %v", ev.Group, ev.UD.QPNum, ev.JoinContext)
	}
	_ = ev.Ack()
	if *hold > 0 {
		fmt.Printf("join: holding %s\n", *hold)
		time.Sleep(*hold)
	}
	if err := j.LeaveMulticast(g); err != nil {
		return err
	}
	fmt.Println("join: left")
	if err := j.LeaveMulticast(g); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return fmt.Errorf("second leave: %v, want EADDRNOTAVAIL", err)
	}
	return nil
}

// syncFlow runs a connection between two synchronous ids of this process:
// GetRequest, Accept (waits for ESTABLISHED), Connect (returns at
// CONNECT_RESPONSE), Establish, Disconnect on both.
func syncFlow(ctx context.Context) error {
	kf := id.WithFabric(fab)
	lis, err := id.Create(nil, nil, id.PSTCP, kf)
	if err != nil {
		return err
	}
	defer lis.Destroy()
	if err := lis.Bind(addrPort(*bindAddr)); err != nil {
		return err
	}
	if err := lis.Listen(0); err != nil {
		return err
	}
	type result struct {
		child *id.ID
		err   error
	}
	res := make(chan result, 1)
	go func() {
		child, err := lis.GetRequestContext(ctx)
		if err != nil {
			res <- result{nil, err}
			return
		}
		fmt.Printf("sync server: request, event %s\n", child.Event().Type)
		err = child.AcceptContext(ctx, &id.ConnParam{QPNum: uniqueQPN(), ResponderResources: 1, InitiatorDepth: 1})
		if err == nil {
			fmt.Printf("sync server: accept returned with %s\n", child.Event().Type)
		}
		res <- result{child, err}
	}()
	c, err := id.Create(nil, nil, id.PSTCP, kf)
	if err != nil {
		return err
	}
	defer c.Destroy()
	if err := c.ResolveAddrContext(ctx, netip.AddrPort{}, addrPort(*bindAddr), 2*time.Second); err != nil {
		return err
	}
	fmt.Printf("sync client: resolve_addr returned with %s\n", c.Event().Type)
	if err := c.ResolveRouteContext(ctx, 2*time.Second); err != nil {
		return err
	}
	fmt.Printf("sync client: resolve_route returned with %s\n", c.Event().Type)
	if err := c.ConnectContext(ctx, &id.ConnParam{QPNum: uniqueQPN(), ResponderResources: 1, InitiatorDepth: 1}); err != nil {
		return err
	}
	fmt.Printf("sync client: connect returned with %s\n", c.Event().Type)
	if c.Event().Type != id.EventConnectResponse {
		return fmt.Errorf("connect: %s, want CONNECT_RESPONSE", c.Event().Type)
	}
	if err := c.Establish(); err != nil {
		return err
	}
	r := <-res
	if r.err != nil {
		return fmt.Errorf("server: %w", r.err)
	}
	defer r.child.Destroy()
	if r.child.Event().Type != id.EventEstablished {
		return fmt.Errorf("accept: %s, want ESTABLISHED", r.child.Event().Type)
	}
	// The initiator's DISCONNECTED comes with the peer's DREP, which the
	// peer sends when it disconnects too: both sides disconnect at once.
	serr := make(chan error, 1)
	go func() { serr <- r.child.DisconnectContext(ctx) }()
	if err := c.DisconnectContext(ctx); err != nil {
		return err
	}
	fmt.Printf("sync client: disconnect returned with %s\n", c.Event().Type)
	if err := <-serr; err != nil {
		return fmt.Errorf("server disconnect: %w", err)
	}
	fmt.Printf("sync server: disconnect returned with %s\n", r.child.Event().Type)

	// A synchronous connect to a port nobody listens on: ECONNREFUSED.
	n, err := id.Create(nil, nil, id.PSTCP, kf)
	if err != nil {
		return err
	}
	defer n.Destroy()
	nobody := netip.AddrPortFrom(addrPort(*bindAddr).Addr(), uint16(*port)+1)
	if err := n.ResolveAddrContext(ctx, netip.AddrPort{}, nobody, 2*time.Second); err != nil {
		return err
	}
	if err := n.ResolveRouteContext(ctx, 2*time.Second); err != nil {
		return err
	}
	err = n.ConnectContext(ctx, &id.ConnParam{QPNum: uniqueQPN()})
	fmt.Printf("sync client: connect to %s: %v (status %d)\n", nobody, err, n.Event().Status)
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("connect to a closed port: %v, want ECONNREFUSED", err)
	}
	return nil
}

// errorCases checks the errnos the kernel gives for misuse.
func errorCases(ctx context.Context) error {
	ch, err := newChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	check := func(what string, err error, want syscall.Errno) error {
		fmt.Printf("errors: %s: %v\n", what, err)
		if !errors.Is(err, want) {
			return fmt.Errorf("%s: %v, want %v", what, err, want)
		}
		return nil
	}
	a, _ := id.Create(ch, nil, id.PSTCP)
	defer a.Destroy()
	if err := a.Bind(netip.MustParseAddrPort("192.0.2.7:7471")); check("bind non-local", err, syscall.EADDRNOTAVAIL) != nil {
		return check("bind non-local", err, syscall.EADDRNOTAVAIL)
	}
	b, _ := id.Create(ch, nil, id.PSTCP)
	defer b.Destroy()
	if err := b.Bind(addrPort(*bindAddr)); err != nil {
		return err
	}
	if err := b.Listen(0); err != nil {
		return err
	}
	c, _ := id.Create(ch, nil, id.PSTCP)
	defer c.Destroy()
	if err := check("bind in use", c.Bind(addrPort(*bindAddr)), syscall.EADDRINUSE); err != nil {
		return err
	}
	d, _ := id.Create(ch, nil, id.PSTCP)
	defer d.Destroy()
	err = d.Bind(netip.MustParseAddrPort("127.0.0.1:0"))
	fmt.Printf("errors: bind 127.0.0.1 (no RDMA device on lo): %v\n", err)
	// The kernel itself rejects a connect before route resolution when
	// the library's state check is bypassed: talk to the endpoint.
	e, _ := id.Create(ch, nil, id.PSTCP)
	defer e.Destroy()
	err = e.Endpoint().Connect(&id.ConnParam{QPNum: 1})
	if err := check("kernel connect before route", err, syscall.EINVAL); err != nil {
		return err
	}
	err = e.Endpoint().SetOption(id.OptionLevelID, 99, []byte{1})
	if err := check("kernel unknown option", err, syscall.ENOSYS); err != nil {
		return err
	}
	ke := e.Endpoint().(kernel.Endpoint)
	_, err = ke.InitQPAttr(kernel.QPStateInit)
	fmt.Printf("errors: init_qp_attr on an unbound id: %v\n", err)
	// Address resolution of an address without a route.
	f, _ := id.Create(ch, nil, id.PSTCP)
	defer f.Destroy()
	err = f.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("192.0.2.1:7471"), time.Second)
	fmt.Printf("errors: resolve_addr 192.0.2.1: %v\n", err)
	if err == nil {
		ev, err := next(ctx, ch, "errors")
		if err != nil {
			return err
		}
		_ = ev.Ack()
	}
	// INIT_QP_ATTR on a resolved id works (RoCE: pkey index, port, access).
	g, _ := id.Create(ch, nil, id.PSTCP)
	defer g.Destroy()
	if err := g.ResolveAddr(netip.AddrPort{}, addrPort(*bindAddr), time.Second); err != nil {
		return err
	}
	ev, err := next(ctx, ch, "errors", id.EventAddrResolved)
	if err != nil {
		return err
	}
	_ = ev.Ack()
	qa, err := g.Endpoint().(kernel.Endpoint).InitQPAttr(kernel.QPStateInit)
	fmt.Printf("errors: init_qp_attr INIT: mask %#x port %d pkey_index %d access %#x err %v\n",
		qa.AttrMask, qa.PortNum, qa.PKeyIndex, qa.QPAccessFlags, err)
	return err
}

// Timing, cmtime-like.

type step int

const (
	stepCreate step = iota
	stepResolveAddr
	stepResolveRoute
	stepConnect
	stepDisconnect
	stepDestroy
	numSteps
)

var stepNames = [numSteps]string{"create id", "resolve addr", "resolve route", "connect", "disconnect", "destroy"}

type timing struct {
	start, end [numSteps]time.Time
	per        [numSteps][]time.Duration
}

func (t *timing) print(n int) {
	fmt.Printf("kcheck bench: %d connections (QP-less; RTU via establish)\n", n)
	// The columns of rdma-core 44's cmtime (us / conn = total / n), and
	// the mean per-connection latency.
	fmt.Printf("step              total ms     max ms     min us  us / conn   mean us\n")
	for s := step(0); s < numSteps; s++ {
		d := t.per[s]
		if len(d) == 0 {
			continue
		}
		sort.Slice(d, func(a, b int) bool { return d[a] < d[b] })
		var sum time.Duration
		for _, x := range d {
			sum += x
		}
		total := t.end[s].Sub(t.start[s])
		fmt.Printf("%-13s: %11.2f%11.2f%11.2f%11.2f%11.2f\n", stepNames[s],
			float64(total.Microseconds())/1000, float64(d[len(d)-1].Microseconds())/1000,
			float64(d[0].Nanoseconds())/1000, float64(total.Microseconds())/float64(n),
			float64(sum.Microseconds())/float64(len(d)))
	}
}

func benchServer(ctx context.Context) error {
	ch, err := newChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	lis, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		return err
	}
	defer lis.Destroy()
	if err := lis.Bind(addrPort(*bindAddr)); err != nil {
		return err
	}
	if err := lis.Listen(0); err != nil {
		return err
	}
	fmt.Println("bench server: listening")
	established, done := 0, 0
	for done < *conns {
		ev, err := ch.GetEventContext(ctx)
		if err != nil {
			return fmt.Errorf("after %d established, %d disconnected: %w", established, done, err)
		}
		t, st, child := ev.Type, ev.Status, ev.ID
		_ = ev.Ack()
		switch t {
		case id.EventConnectRequest:
			if err := child.Accept(&id.ConnParam{QPNum: uniqueQPN(), ResponderResources: 1, InitiatorDepth: 1}); err != nil {
				return err
			}
		case id.EventEstablished:
			established++
		case id.EventDisconnected:
			_ = child.Disconnect()
			_ = child.Destroy()
			done++
		case id.EventTimewaitExit:
		default:
			return fmt.Errorf("unexpected %s status %d", t, st)
		}
	}
	fmt.Printf("bench server: %d established, %d disconnected\n", established, done)
	return nil
}

func benchClient(ctx context.Context) error {
	ch, err := newChannel()
	if err != nil {
		return err
	}
	defer ch.Close()
	n := *conns
	ids := make([]*id.ID, n)
	index := make(map[*id.ID]int, n)
	var tm timing
	t0 := make([]atomic.Int64, n) // start of id k's step, written by the issuing goroutine
	start := func(k int) { t0[k].Store(time.Now().UnixNano()) }
	mark := func(s step, k int) {
		now := time.Now()
		tm.per[s] = append(tm.per[s], time.Duration(now.UnixNano()-t0[k].Load()))
		tm.end[s] = now
	}
	dst := addrPort(*srvAddr)

	tm.start[stepCreate] = time.Now()
	for k := range ids {
		start(k)
		if ids[k], err = id.Create(ch, nil, id.PSTCP); err != nil {
			return err
		}
		index[ids[k]] = k
		mark(stepCreate, k)
	}
	// wait runs a step on every id, issuing from one goroutine while this
	// one takes the events, as cmtime's event thread does, and waits for
	// the n outcomes.
	wait := func(s step, issue func(k int) error, want id.EventType, onEvent func(k int) error) error {
		tm.start[s] = time.Now()
		ierr := make(chan error, 1)
		go func() {
			for k := range ids {
				start(k)
				if err := issue(k); err != nil {
					ierr <- fmt.Errorf("%s %d: %w", stepNames[s], k, err)
					return
				}
			}
			ierr <- nil
		}()
		for got := 0; got < n; {
			ev, err := ch.GetEventContext(ctx)
			if err != nil {
				return fmt.Errorf("%s: %d/%d events: %w", stepNames[s], got, n, err)
			}
			t, st, k := ev.Type, ev.Status, index[ev.ID]
			_ = ev.Ack()
			if t != want || st != 0 {
				return fmt.Errorf("%s: id %d got %s status %d, want %s", stepNames[s], k, t, st, want)
			}
			if onEvent != nil {
				if err := onEvent(k); err != nil {
					return err
				}
			}
			mark(s, k)
			got++
		}
		return <-ierr
	}
	if err := wait(stepResolveAddr, func(k int) error {
		return ids[k].ResolveAddr(netip.AddrPort{}, dst, 2*time.Second)
	}, id.EventAddrResolved, nil); err != nil {
		return err
	}
	if err := wait(stepResolveRoute, func(k int) error { return ids[k].ResolveRoute(2 * time.Second) },
		id.EventRouteResolved, nil); err != nil {
		return err
	}
	if err := wait(stepConnect, func(k int) error {
		return ids[k].Connect(&id.ConnParam{QPNum: uniqueQPN(), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 5, RNRRetryCount: 7})
	}, id.EventConnectResponse, func(k int) error { return ids[k].Establish() }); err != nil {
		return err
	}
	if err := wait(stepDisconnect, func(k int) error { return ids[k].Disconnect() }, id.EventDisconnected, nil); err != nil {
		return err
	}
	tm.start[stepDestroy] = time.Now()
	for k := range ids {
		start(k)
		if err := ids[k].Destroy(); err != nil {
			return err
		}
		mark(stepDestroy, k)
	}
	tm.print(n)
	return nil
}

// nodev checks the message and errno without the device file.
func nodev() error {
	f := kernel.New(kernel.WithDevicePath("/nonexistent/rdma_cm"))
	_, err := f.Open()
	fmt.Printf("nodev: %v\n", err)
	if !errors.Is(err, syscall.ENODEV) {
		return fmt.Errorf("want ENODEV, got %v", err)
	}
	return nil
}
