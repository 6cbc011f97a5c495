package bench

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/id"
)

// BenchmarkScale holds -bench.scale ids (-bench.scale/2 connections) open at once, both ends in
// this process over loopback, set up -bench.window at a time, and reports
// per id (a connection has two: one each end) the live heap and the RSS
// they add, the goroutines while they are held (an absolute count: it must
// not grow with the connections), and the time to set them all up and to
// tear them all down. cmrt: asynchronous ids on one channel per side, no
// QP; cmrt-qp: the same with a QP (default capacities) at each end; tcp:
// Go TCP connections with a goroutine blocked in Read at each end, the
// way Go programs hold connections. Run it with -benchtime=1x, one
// implementation per process (bench.sh does), so that the RSS of one does
// not count for the other.
func BenchmarkScale(b *testing.B) {
	for _, impl := range impls([]string{"cmrt", "cmrt-qp"}, []string{"tcp"}) {
		b.Run("impl="+impl, func(b *testing.B) {
			// Descriptors per id: its socket, and with a QP the two
			// completion queues' and the QP waker's eventfds.
			perID := 1
			if impl == "cmrt-qp" {
				perID = 4
			}
			n := fitNoFile(b, *flagScale/2, 2*perID)
			for k := 0; k < b.N; k++ {
				switch impl {
				case "cmrt":
					scaleCM(b, impl, n, nil)
				case "cmrt-qp":
					scaleCM(b, impl, n, &id.QPInitAttr{})
				case "tcp":
					scaleTCP(b, n)
				}
			}
		})
	}
}

// fitNoFile returns how many connections of perConn descriptors fit under
// RLIMIT_NOFILE (with room for the rest of the process), at most n.
func fitNoFile(b *testing.B, n, perConn int) int {
	lim := int(min(noFileLimit(), 1<<30))
	if fit := (lim - 200) / perConn; fit < n {
		b.Logf("RLIMIT_NOFILE is %d: %d connections instead of %d", lim, fit, n)
		return max(1, fit)
	}
	return n
}

// scaleResult is one run's figures. base is the process before the
// server exists (its goroutines are the idle count); ready is after the
// server listens and the client's channel is open, which is where the
// per-id heap and RSS are measured from: what a process pays once (the
// server's fabric loop, the default journal's ring, allocated with the
// first id since 4f4e998, where it used to be allocated at init and so
// fell before the measurement) is not a cost per id.
type scaleResult struct {
	n                 int
	base, ready, held memSnapshot
	setup, teardown   time.Duration
}

func (r *scaleResult) report(b *testing.B) {
	ids := float64(2 * r.n)
	b.ReportMetric(float64(r.n), "conns")
	b.ReportMetric((float64(r.held.heap)-float64(r.ready.heap))/ids, "heap-B/id")
	b.ReportMetric((float64(r.held.rss)-float64(r.ready.rss))/ids, "rss-B/id")
	b.ReportMetric(float64(r.held.goroutines), "goroutines")
	b.ReportMetric(float64(r.base.goroutines), "goroutines-idle")
	b.ReportMetric(r.setup.Seconds(), "setup-s")
	b.ReportMetric(r.teardown.Seconds(), "teardown-s")
	b.ReportMetric(float64(r.n)/r.setup.Seconds(), "setup-conn/s")
}

func scaleCM(b *testing.B, impl string, n int, qp *id.QPInitAttr) {
	b.StopTimer()
	r := scaleResult{n: n, base: snapshot()}
	srv := newCMServer(b, qp)
	defer srv.close(b)
	ch, err := channel.New(channel.WithFabric(cliFab))
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	ids := make([]*id.ID, 0, n)
	r.ready = snapshot()
	b.StartTimer()
	t0 := time.Now()
	c := &asyncClient{ch: ch, dst: srv.addr, qp: qp}
	if _, err := c.run(n, *flagWindow, func(cm *id.ID) { ids = append(ids, cm) }); err != nil {
		b.Fatal(err)
	}
	if !srv.established.wait(int64(n), 60*time.Second) {
		b.Fatalf("server: %d of %d established", srv.established.Load(), n)
	}
	r.setup = time.Since(t0)
	b.StopTimer()
	r.held = snapshot()
	writeHeapProfile(b, impl)
	b.StartTimer()

	t1 := time.Now()
	for _, cm := range ids {
		if err := cm.Disconnect(); err != nil {
			b.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for k := 0; k < n; k++ {
		ev, err := ch.GetEventContext(ctx)
		if err != nil {
			b.Fatalf("teardown: %d of %d: %v", k, n, err)
		}
		typ, cm := ev.Type, ev.ID
		_ = ev.Ack()
		if typ != id.EventDisconnected {
			b.Fatalf("teardown: %s", typ)
		}
		if err := cm.Destroy(); err != nil {
			b.Fatal(err)
		}
	}
	srv.waitDestroyed(b, int64(n))
	r.teardown = time.Since(t1)
	b.StopTimer()
	r.report(b)
}

func scaleTCP(b *testing.B, n int) {
	b.StopTimer()
	r := scaleResult{n: n, base: snapshot()}
	srv := newTCPServer(b, 0, false)
	defer srv.close()
	conns := make([]net.Conn, n)
	var readers sync.WaitGroup
	var next atomic.Int64
	var firstErr atomic.Value
	r.ready = snapshot()
	b.StartTimer()
	t0 := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < min(n, *flagWindow); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := int(next.Add(1)) - 1
				if k >= n {
					return
				}
				c, err := net.Dial("tcp", srv.addr)
				if err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				conns[k] = c
				readers.Add(1)
				go func() { // the client's reader
					defer readers.Done()
					var buf [64]byte
					for {
						if _, err := c.Read(buf[:]); err != nil {
							return
						}
					}
				}()
			}
		}()
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		b.Fatal(fmt.Errorf("dial: %v", err))
	}
	if !srv.accepted.wait(int64(n), 60*time.Second) {
		b.Fatalf("server: %d of %d accepted", srv.accepted.Load(), n)
	}
	r.setup = time.Since(t0)
	b.StopTimer()
	r.held = snapshot()
	writeHeapProfile(b, "tcp")
	b.StartTimer()

	t1 := time.Now()
	for _, c := range conns {
		_ = c.Close()
	}
	readers.Wait()
	srv.waitClosed(b, int64(n))
	r.teardown = time.Since(t1)
	b.StopTimer()
	r.report(b)
}
