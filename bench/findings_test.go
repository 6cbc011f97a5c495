package bench

// Benchmarks that isolate the costs found while profiling the comparisons
// (BENCHMARKS.md, "What is slow and why"). Each pairs what cmrt does now
// with what a fix would do, in the same run.

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/netlink"
)

// BenchmarkTimeWait measures an active id's ResolveAddr, which binds its
// TCP socket to an ephemeral port (fabric/soft/ports.go bindSocket), with
// no TIME_WAIT sockets on the address and then with more (-bench.tw: what
// that many closed connections leave for 60 s; a client closing 235
// connections/s holds 14 000, at 470/s the whole default range). The raw
// binds isolate the kernel's share:
//
//   - bind0-reuse: bind(port 0) with SO_REUSEADDR set first, what the fabric
//     did before 266bd92: Linux then searches one half of the range and
//     walks every TIME_WAIT socket in it;
//   - bind0: bind(port 0), SO_REUSEADDR set afterwards, what it does now:
//     the whole range, but a port is only taken if nothing, TIME_WAIT
//     included, holds it, so the search still grows with TIME_WAIT and
//     fails (EADDRNOTAVAIL) once every port has one;
//   - bind-random: SO_REUSEADDR and an explicit port drawn at random from
//     ip_local_port_range, as the kernel's rdma_cm allocates ports
//     (cma_alloc_any_port); the kernel checks only that port.
//
// connect(2) without a bind (Go's net.Dial) is not affected: it may reuse
// a port in TIME_WAIT towards another peer. Run it in a fresh network
// namespace (bench.sh does): TIME_WAIT sockets are per namespace and live
// a minute. The tw metric is the count found in /proc/net/tcp.
func BenchmarkTimeWait(b *testing.B) {
	for _, tw := range ints(b, *flagTW) {
		b.Run(fmt.Sprintf("tw=%d", tw), func(b *testing.B) {
			if tw > 0 {
				makeTimeWait(b, tw)
			}
			for _, impl := range []string{"cmrt-resolve", "bind0-reuse", "bind0", "bind-random"} {
				b.Run("impl="+impl, func(b *testing.B) {
					dst := netip.AddrPortFrom(loopback, 9) // never connected
					b.ReportAllocs()
					b.ResetTimer()
					for k := 0; k < b.N; k++ {
						switch impl {
						case "cmrt-resolve":
							cm, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(cliFab))
							if err != nil {
								b.Fatal(err)
							}
							if err := cm.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
								b.Fatal(err)
							}
							_ = cm.Destroy()
						default:
							rawBind(b, impl)
						}
					}
					b.StopTimer()
					b.ReportMetric(float64(countTimeWait()), "tw")
				})
			}
		})
	}
}

// twState is what makeTimeWait has made so far in this process.
var twState struct {
	ln    *net.TCPListener
	ports []int // where to make them, in order
	next  int
}

// makeTimeWait tops the TIME_WAIT sockets made by this process up to n, on
// 127.0.0.1, from sockets with SO_REUSEADDR as the software fabric's.
// bind(2) to port 0 without SO_REUSEADDR takes the odd ports of the range
// first, then the even ones (inet_csk_find_open_port), so that is where the
// fabric's closed connections leave their TIME_WAIT sockets: ports are
// filled in that order.
func makeTimeWait(b *testing.B, n int) {
	st := &twState
	if st.ln == nil {
		ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(loopback, 0)))
		if err != nil {
			b.Fatal(err)
		}
		st.ln = ln
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					var buf [1]byte
					_, _ = c.Read(buf[:]) // EOF: the client closed first
					_ = c.Close()
				}()
			}
		}()
		lo, hi := portRange()
		for _, first := range []int{lo + 1, lo} {
			for p := first; p <= hi; p += 2 {
				st.ports = append(st.ports, p)
			}
		}
	}
	dst := &unix.SockaddrInet4{Addr: loopback.As4(), Port: st.ln.Addr().(*net.TCPAddr).Port}
	target := countTimeWait() + n - st.next
	for ; st.next < n && st.next < len(st.ports); st.next++ {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if unix.Bind(fd, &unix.SockaddrInet4{Addr: loopback.As4(), Port: st.ports[st.next]}) == nil {
			_ = unix.Connect(fd, dst)
		}
		_ = unix.Close(fd)
	}
	// The server side closes on EOF; wait for the FIN exchanges.
	deadline := time.Now().Add(5 * time.Second)
	for countTimeWait() < target*95/100 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// rawBind binds a TCP socket on 127.0.0.1 as mode says (see
// BenchmarkTimeWait) and closes it.
func rawBind(b *testing.B, mode string) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	reuse := func() { _ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) }
	sa := &unix.SockaddrInet4{Addr: loopback.As4()}
	switch mode {
	case "bind0-reuse":
		reuse()
		err = unix.Bind(fd, sa)
	case "bind0":
		if err = unix.Bind(fd, sa); err == nil {
			reuse()
		}
	case "bind-random":
		reuse()
		lo, hi := portRange()
		for try := 0; try < 64; try++ {
			sa.Port = lo + rand.IntN(hi-lo+1)
			if err = unix.Bind(fd, sa); err == nil {
				break
			}
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	_ = unix.Close(fd)
}

// portRange returns net.ipv4.ip_local_port_range.
var portRange = sync.OnceValues(func() (lo, hi int) {
	lo, hi = 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		_, _ = fmt.Sscan(string(b), &lo, &hi)
	}
	return lo, hi
})

// countTimeWait counts IPv4 TCP sockets in TIME_WAIT (state 06).
func countTimeWait() int {
	f, err := os.Open("/proc/net/tcp")
	if err != nil {
		return -1
	}
	defer f.Close()
	n := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if fs := strings.Fields(sc.Text()); len(fs) > 3 && fs[3] == "06" {
			n++
		}
	}
	return n
}

// BenchmarkIdleFabric measures one synchronous connection at a time (the
// conc=1 case of BenchmarkConnSetup) on a client fabric with nothing else
// on it: with no idle grace (cold: its epoll loop and its address monitor
// start and stop with every connection, fabric/soft/loop.go engine.release
// and fabric/soft/netmon.go untrack), with the default grace period
// (grace: both stay up between connections), and with no grace but a
// listening id that keeps both up (warm, the bound).
func BenchmarkIdleFabric(b *testing.B) {
	for _, impl := range []string{"cold", "warm", "grace"} {
		b.Run("impl="+impl, func(b *testing.B) {
			opts := []soft.Option{soft.WithName("bench-idle-" + impl)}
			if impl != "grace" {
				opts = append(opts, soft.WithIdleGrace(0))
			}
			f := soft.New(opts...)
			if impl == "warm" {
				keep, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
				if err != nil {
					b.Fatal(err)
				}
				defer keep.Destroy()
				if err := keep.Bind(netip.AddrPortFrom(loopback, 0)); err != nil {
					b.Fatal(err)
				}
				if err := keep.Listen(1); err != nil {
					b.Fatal(err)
				}
			}
			srv := newCMServer(b, nil)
			defer srv.close(b)
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				cm, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
				if err != nil {
					b.Fatal(err)
				}
				err = cm.ResolveAddr(netip.AddrPort{}, srv.addr, 2*time.Second)
				if err == nil {
					err = cm.ResolveRoute(2 * time.Second)
				}
				if err == nil {
					err = cm.Connect(nil)
				}
				if err == nil {
					err = cm.Disconnect()
				}
				_ = cm.Destroy()
				if err != nil {
					b.Fatal(err)
				}
			}
			srv.waitDestroyed(b, int64(b.N))
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conn/s")
		})
	}
}

// BenchmarkRouteLookup measures the software fabric's route lookup, done
// twice per connection (ResolveAddr and ResolveRoute). socket-per-call is
// what fabric/soft/route.go did before finding 3 was fixed: netlink.RouteGet
// opens, binds and closes a NETLINK_ROUTE socket per call, and for a local
// destination (loopback, or siw0's address in the VM) makes three requests:
// RTM_GETROUTE, then RTM_GETLINK for the interface name and MTU and an
// RTM_GETADDR dump for the owner of the local address, which the fabric
// does not use. reused-socket keeps the socket; one-request is the floor of
// a lean lookup: a single RTM_GETROUTE on a kept socket (raw syscalls
// here), which is what the fabric now does (BenchmarkRoute in fabric/soft
// measures it there).
func BenchmarkRouteLookup(b *testing.B) {
	dst := loopback
	b.Run("impl=socket-per-call", func(b *testing.B) {
		b.ReportAllocs()
		for k := 0; k < b.N; k++ {
			if _, err := netlink.RouteGet(dst, netip.Addr{}, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("impl=one-request", func(b *testing.B) {
		fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
		if err != nil {
			b.Fatal(err)
		}
		defer unix.Close(fd)
		if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			b.Fatal(err)
		}
		// nlmsghdr (16) + rtmsg (12) + RTA_DST (4 + 4).
		var req [36]byte
		put32 := func(off int, v uint32) {
			req[off], req[off+1], req[off+2], req[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
		}
		put32(0, uint32(len(req)))
		req[4], req[5] = unix.RTM_GETROUTE, 0
		req[6] = unix.NLM_F_REQUEST
		req[16] = unix.AF_INET
		req[17] = 32 // rtm_dst_len
		req[28], req[29] = 8, 0
		req[30], req[31] = unix.RTA_DST, 0
		a := dst.As4()
		copy(req[32:], a[:])
		resp := make([]byte, 4096)
		kernel := &unix.SockaddrNetlink{Family: unix.AF_NETLINK}
		b.ReportAllocs()
		b.ResetTimer()
		for k := 0; k < b.N; k++ {
			put32(8, uint32(k+1)) // sequence
			if err := unix.Sendto(fd, req[:], 0, kernel); err != nil {
				b.Fatal(err)
			}
			n, _, err := unix.Recvfrom(fd, resp, 0)
			if err != nil {
				b.Fatal(err)
			}
			if n < 16 || resp[4] != unix.RTM_NEWROUTE {
				b.Fatalf("reply type %d", resp[4])
			}
		}
	})
	b.Run("impl=reused-socket", func(b *testing.B) {
		c, err := netlink.Dial()
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		b.ReportAllocs()
		b.ResetTimer()
		for k := 0; k < b.N; k++ {
			if _, err := c.RouteGet(dst, netip.Addr{}, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkDestroyQueued measures creating and destroying an id on a
// channel that holds -queued events of other ids. The software fabric's
// Destroy (fabric/soft/endpoint.go) extracts the id's own queued events
// with evq.Queue.Extract, which scans and compacts the whole queue (each
// RawEvent is 376 bytes, with its private data), even when the id has
// none queued: tearing down n connections whose events sit on one channel
// costs O(n^2). BenchmarkScale's tear-down spends about a fifth of its CPU
// there.
func BenchmarkDestroyQueued(b *testing.B) {
	for _, queued := range []int{0, 1000, 8000} {
		b.Run(fmt.Sprintf("queued=%d", queued), func(b *testing.B) {
			ch, err := channel.New(channel.WithFabric(cliFab), channel.WithNonblocking())
			if err != nil {
				b.Fatal(err)
			}
			defer ch.Close()
			others := make([]*id.ID, queued)
			dst := netip.AddrPortFrom(loopback, 9)
			for k := range others {
				if others[k], err = id.Create(ch, nil, id.PSTCP); err != nil {
					b.Fatal(err)
				}
				// ADDR_RESOLVED stays queued: nobody reads the channel.
				if err := others[k].ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				cm, err := id.Create(ch, nil, id.PSTCP)
				if err != nil {
					b.Fatal(err)
				}
				if err := cm.Destroy(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			for {
				ev, err := ch.GetEvent()
				if err != nil {
					break
				}
				_ = ev.Ack()
			}
			for _, cm := range others {
				_ = cm.Destroy()
			}
		})
	}
}

// BenchmarkResolve measures rdma_resolve_addr and rdma_resolve_route on
// the software fabric as examples/cmtime takes them (BENCHMARKS.md finding
// 21): bulk=1, one synchronous id at a time (create, resolve addr, resolve
// route, destroy); bulk=N, N asynchronous ids on one channel, every
// ResolveAddr issued from one goroutine while another reads the events,
// then every ResolveRoute the same way (cmtime's work queue with one
// thread and its event thread). An op is one id; addr-us and route-us are
// each step's wall time per id, from its first call to its last event.
func BenchmarkResolve(b *testing.B) {
	for _, bulk := range []int{1, 1000} {
		b.Run(fmt.Sprintf("bulk=%d", bulk), func(b *testing.B) {
			dst := netip.AddrPortFrom(loopback, 9) // never connected
			var addr, route time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			if bulk == 1 {
				for k := 0; k < b.N; k++ {
					cm, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(cliFab))
					if err != nil {
						b.Fatal(err)
					}
					t0 := time.Now()
					if err := cm.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					if err := cm.ResolveRoute(time.Second); err != nil {
						b.Fatal(err)
					}
					addr, route = addr+t1.Sub(t0), route+time.Since(t1)
					_ = cm.Destroy()
				}
			} else {
				for done := 0; done < b.N; done += bulk {
					a, r := resolveBulk(b, dst, min(bulk, b.N-done))
					addr, route = addr+a, route+r
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(addr.Microseconds())/float64(b.N), "addr-us")
			b.ReportMetric(float64(route.Microseconds())/float64(b.N), "route-us")
		})
	}
}

// resolveBulk resolves the address, then the route, of n ids on one
// channel (see BenchmarkResolve) and returns each step's wall time.
func resolveBulk(b *testing.B, dst netip.AddrPort, n int) (addr, route time.Duration) {
	ch, err := channel.New(channel.WithFabric(cliFab))
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	ids := make([]*id.ID, n)
	for k := range ids {
		if ids[k], err = id.Create(ch, nil, id.PSTCP); err != nil {
			b.Fatal(err)
		}
	}
	defer func() {
		for _, cm := range ids {
			_ = cm.Destroy()
		}
	}()
	step := func(want id.EventType, call func(cm *id.ID) error) time.Duration {
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for k := 0; k < n; k++ {
				ev, err := ch.GetEventContext(ctx)
				if err != nil {
					got <- err
					return
				}
				typ := ev.Type
				_ = ev.Ack()
				if typ != want {
					got <- fmt.Errorf("event %s, want %s", typ, want)
					return
				}
			}
			got <- nil
		}()
		t0 := time.Now()
		for _, cm := range ids {
			if err := call(cm); err != nil {
				b.Fatal(err)
			}
		}
		if err := <-got; err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	addr = step(id.EventAddrResolved, func(cm *id.ID) error { return cm.ResolveAddr(netip.AddrPort{}, dst, time.Second) })
	route = step(id.EventRouteResolved, func(cm *id.ID) error { return cm.ResolveRoute(time.Second) })
	return addr, route
}
