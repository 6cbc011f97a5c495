package evloop

import (
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/poll"
)

// The finding behind parking in the netpoller, as a benchmark: a
// ping-pong of n bytes over loopback TCP where each end's socket is polled
// by a loop goroutine that hands the message to the application over a Go
// channel (the shape of a message through the software fabric: socket ->
// fabric loop -> completion queue -> the goroutine in CQ.Wait), against
// plain Go TCP (Write and io.ReadFull). impl=park is the Loop as it is;
// impl=block is the same loop blocking in epoll_wait(-1), as the loops did
// before (the fallback for a descriptor the netpoller refuses). Reports the
// p50 and p99 round trip.
//
//	go test ./internal/evloop -run '^$' -bench 'HandoffPingPong$' -benchtime 20000x -count 5
func BenchmarkHandoffPingPong(b *testing.B) {
	for _, size := range []int{64, 4096} {
		b.Run("size="+map[int]string{64: "64B", 4096: "4KiB"}[size], func(b *testing.B) {
			b.Run("impl=tcp", func(b *testing.B) { pingPongTCP(b, size) })
			b.Run("impl=block", func(b *testing.B) { pingPongLoop(b, size, true) })
			b.Run("impl=park", func(b *testing.B) { pingPongLoop(b, size, false) })
		})
	}
}

func reportRTT(b *testing.B, rtt []time.Duration) {
	slices.Sort(rtt)
	q := func(p float64) float64 { return float64(rtt[int(p*float64(len(rtt)-1))]) / 1e3 }
	b.ReportMetric(q(0.50), "p50-µs")
	b.ReportMetric(q(0.99), "p99-µs")
}

func pingPongTCP(b *testing.B, size int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	cli, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	srv, err := ln.Accept()
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(srv, buf); err != nil {
				return
			}
			if _, err := srv.Write(buf); err != nil {
				return
			}
		}
	}()
	buf := make([]byte, size)
	rtt := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for k := range b.N {
		t0 := time.Now()
		if _, err := cli.Write(buf); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(cli, buf); err != nil {
			b.Fatal(err)
		}
		rtt[k] = time.Since(t0)
	}
	b.StopTimer()
	_ = cli.Close()
	<-done
	reportRTT(b, rtt)
}

// end is one socket polled by a loop: a complete message read goes to the
// application over msgs.
type end struct {
	fd   int
	buf  []byte
	got  int
	msgs chan struct{}
}

func (e *end) onEvents(uint32) {
	for {
		n, err := unix.Read(e.fd, e.buf[e.got:])
		if n <= 0 || err != nil {
			return
		}
		if e.got += n; e.got == len(e.buf) {
			e.got = 0
			e.msgs <- struct{}{}
		}
	}
}

// send writes buf whole to a non-blocking socket.
func send(fd int, buf []byte) error {
	for len(buf) > 0 {
		n, err := unix.Write(fd, buf)
		if err == unix.EAGAIN {
			continue
		}
		if err != nil {
			return err
		}
		buf = buf[n:]
	}
	return nil
}

// tcpFds makes a loopback TCP connection and returns its two non-blocking
// descriptors.
func tcpFds(tb testing.TB) (cli, srv int) {
	ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Listen(ln, 1); err != nil {
		tb.Fatal(err)
	}
	sa, err := unix.Getsockname(ln)
	if err != nil {
		tb.Fatal(err)
	}
	if cli, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
		tb.Fatal(err)
	}
	if err := unix.Connect(cli, sa); err != nil {
		tb.Fatal(err)
	}
	if srv, _, err = unix.Accept4(ln, unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK); err != nil {
		tb.Fatal(err)
	}
	_ = unix.SetNonblock(cli, true)
	for _, fd := range []int{cli, srv} {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	return cli, srv
}

func pingPongLoop(b *testing.B, size int, blocking bool) {
	cfd, sfd := tcpFds(b)
	defer unix.Close(cfd)
	defer unix.Close(sfd)
	dispatch := func(e *end, ev uint32) { e.onEvents(ev) }
	var loops [2]*Loop[*end]
	ends := [2]*end{
		{fd: cfd, buf: make([]byte, size), msgs: make(chan struct{}, 1)},
		{fd: sfd, buf: make([]byte, size), msgs: make(chan struct{}, 1)},
	}
	for k := range loops {
		l, err := New(dispatch)
		if err != nil {
			b.Fatal(err)
		}
		if blocking {
			l.rc = nil
		}
		go l.Run()
		defer l.Close()
		e := ends[k]
		l.Call(func() {
			if _, err := l.Register(e.fd, poll.In, e); err != nil {
				b.Error(err)
			}
		})
		loops[k] = l
	}
	stop := make(chan struct{})
	echoed := make(chan struct{})
	go func() { // the server application: echoes what its loop hands it
		defer close(echoed)
		out := make([]byte, size)
		for {
			select {
			case <-ends[1].msgs:
				if err := send(sfd, out); err != nil {
					return
				}
			case <-stop:
				return
			}
		}
	}()
	out := make([]byte, size)
	rtt := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for k := range b.N {
		t0 := time.Now()
		if err := send(cfd, out); err != nil {
			b.Fatal(err)
		}
		<-ends[0].msgs
		rtt[k] = time.Since(t0)
	}
	b.StopTimer()
	close(stop)
	<-echoed
	for k, l := range loops {
		l.Call(func() { _ = l.Unregister(ends[k].fd) })
	}
	reportRTT(b, rtt)
}

// BenchmarkHandoffPingPongBusy is BenchmarkHandoffPingPong at 64 B while
// the process is saturated: four goroutines that compute and yield keep
// every P busy, so the scheduler polls the network only when sysmon does,
// every 10 ms. Whatever waits in the netpoller then waits that long: a Go
// TCP round trip and a round trip through parked loops alike take about
// 20 ms, where loops blocked in epoll_wait take about 60 µs (the kernel
// wakes their thread, which queues the goroutine). The price of parking,
// measured; BENCHMARKS.md weighs it.
func BenchmarkHandoffPingPongBusy(b *testing.B) {
	for _, impl := range []string{"tcp", "block", "park"} {
		b.Run("impl="+impl, func(b *testing.B) {
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					x := 1
					for {
						select {
						case <-stop:
							return
						default:
						}
						for k := range 20000 {
							x = x*31 + k
						}
						sink.Store(int64(x))
						runtime.Gosched()
					}
				}()
			}
			defer func() { close(stop); wg.Wait() }()
			switch impl {
			case "tcp":
				pingPongTCP(b, 64)
			default:
				pingPongLoop(b, 64, impl == "block")
			}
		})
	}
}

var sink atomic.Int64
