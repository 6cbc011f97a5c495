package reliability_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmrt/cmrt/id"
)

// memSampler records the peak resident size while it runs.
type memSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleMemory() *memSampler {
	m := &memSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if r := int64(rssKiB(0)); r > m.peak.Load() {
				m.peak.Store(r)
			}
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

func (m *memSampler) end() int64 {
	close(m.stop)
	<-m.done
	return m.peak.Load()
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(len(d)-1, int(float64(len(d))*p))]
}

// cliConn is a client connection of the traffic test.
type cliConn struct {
	cm    *id.ID
	p     *peer
	token uint64
	estAt time.Duration
}

// TestLoadConcurrentTraffic: CMRT_REL_CONNS (1000) ids from host a connect
// at once to a reactor server with workers on host b and exchange messages
// for CMRT_REL_DURATION (15s): each keeps 4 messages in flight, the server
// echoes each one back. Every message acknowledged by a send completion
// must be received exactly once and in order, in both directions; then
// every connection is disconnected and nothing is left on either side.
func TestLoadConcurrentTraffic(t *testing.T) {
	tp := needTopo(t)
	n := envInt("CMRT_REL_CONNS", 1000)
	dur := envDuration("CMRT_REL_DURATION", 15*time.Second)
	const window, depth = 4, 8
	srv, dst := startServer(t, tp, "b", map[string]string{"qp": "1", "workers": "4", "depth": strconv.Itoa(depth)})
	base := snapshot()
	f, ch := fabric(t, nil)
	mux, err := newCQMux()
	if err != nil {
		t.Fatal(err)
	}
	mem := sampleMemory()

	conns := make(map[uint64]*cliConn, n)
	var mu sync.Mutex
	var established, disconnected, failures, routed atomic.Int64
	var routedAt time.Duration
	var firstFail sync.Once
	fail := func(format string, args ...any) {
		failures.Add(1)
		firstFail.Do(func() { t.Errorf(format, args...) })
	}
	start := time.Now()
	stopLoop := make(chan struct{})
	loopDone := make(chan struct{})
	go func() { // the client's event loop
		defer close(loopDone)
		for {
			select {
			case <-stopLoop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			e, err := ch.GetEventContext(ctx)
			cancel()
			if err != nil {
				continue
			}
			token := e.ID.Context().(uint64)
			mu.Lock()
			c := conns[token]
			mu.Unlock()
			switch e.Type {
			case id.EventAddrResolved:
				if err := e.ID.ResolveRoute(2 * time.Second); err != nil {
					fail("resolve route: %v", err)
				}
			case id.EventRouteResolved:
				if routed.Add(1) == int64(n) {
					routedAt = time.Since(start)
				}
				p, err := newPeer(e.ID, token, depth, false)
				if err == nil {
					err = mux.add(p)
				}
				if err != nil {
					fail("QP: %v", err)
					break
				}
				mu.Lock()
				c.p = p
				mu.Unlock()
				if err := e.ID.Connect(&id.ConnParam{PrivateData: tokenPD(token)}); err != nil {
					fail("connect: %v", err)
				}
			case id.EventEstablished:
				c.estAt = time.Since(start)
				established.Add(1)
				c.p.start(window)
			case id.EventDisconnected:
				disconnected.Add(1)
			default:
				fail("connection %d: %s status %d", token, e.Type, e.Status)
			}
			_ = ch.Ack(e)
		}
	}()
	for k := 1; k <= n; k++ {
		c, err := id.Create(ch, uint64(k), id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		conns[uint64(k)] = &cliConn{cm: c, token: uint64(k)}
		mu.Unlock()
		if err := c.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for established.Load() < int64(n) && failures.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	setup := time.Since(start)
	var est []time.Duration
	mu.Lock()
	for _, c := range conns {
		est = append(est, c.estAt)
	}
	mu.Unlock()
	slices.Sort(est)
	record(t, "set-up", "all routes resolved after %v; ESTABLISHED after p50 %v p90 %v max %v", routedAt.Round(time.Millisecond), percentile(est, .5).Round(time.Millisecond),
		percentile(est, .9).Round(time.Millisecond), percentile(est, 1).Round(time.Millisecond))
	for _, h := range []string{"a", "b"} {
		out, _ := osexecCommand("ip", "netns", "exec", tp.ns[h], "nstat", "-az", "TcpExtListenOverflows", "TcpExtListenDrops",
			"TcpExtSyncookiesSent", "TcpExtTCPReqQFullDrop", "TcpRetransSegs", "TcpExtTCPTimeouts").CombinedOutput()
		t.Logf("host %s TCP counters:\n%s", h, out)
	}
	record(t, "set-up", "%d of %d ids ESTABLISHED in %v (%.0f/s)", established.Load(), n, setup.Round(time.Millisecond), float64(established.Load())/setup.Seconds())
	if established.Load() < int64(n) {
		t.Fatalf("only %d of %d connections established", established.Load(), n)
	}
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	time.Sleep(dur)
	for _, c := range conns {
		c.p.stop()
	}
	drained := time.Now().Add(20 * time.Second)
	for _, c := range conns {
		if !waitEchoes(c.p, time.Until(drained)) {
			t.Errorf("connection %d: %d messages never echoed", c.token, c.p.inFlight())
		}
	}
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	cli := map[uint64]stats{}
	var sent, echoed uint64
	for tok, c := range conns {
		c.p.drain()
		s := c.p.stats()
		cli[tok] = s
		sent += s.acked
		echoed += s.recv
	}
	for _, c := range conns {
		if err := c.cm.Disconnect(); err != nil {
			t.Errorf("disconnect: %v", err)
		}
	}
	// The server reports each connection as it ends.
	srvStats := map[uint64][]string{}
	for len(srvStats) < n {
		fl := srv.expect("closed", 30*time.Second)
		tok, _ := strconv.ParseUint(fieldOf(fl, "token"), 10, 64)
		srvStats[tok] = fl
	}
	waitFor(t, 10*time.Second, func() bool { return disconnected.Load() == int64(n) })
	var lost, bad int
	for tok, s := range cli {
		fl := srvStats[tok]
		srecv, _ := strconv.ParseUint(fieldOf(fl, "recv"), 10, 64)
		sacked, _ := strconv.ParseUint(fieldOf(fl, "acked"), 10, 64)
		sbad := fieldOf(fl, "bad")
		switch {
		case srecv != s.acked:
			lost++
			if lost <= 3 {
				t.Errorf("connection %d: client had %d sends acknowledged, server received %d", tok, s.acked, srecv)
			}
		case sacked != s.recv:
			lost++
			if lost <= 3 {
				t.Errorf("connection %d: server had %d echoes acknowledged, client received %d", tok, sacked, s.recv)
			}
		case sbad != "0" || s.bad != 0 || s.sndErr != 0 || fieldOf(fl, "senderr") != "0" || s.postErr != nil:
			bad++
			if bad <= 3 {
				t.Errorf("connection %d: client %v; server %v", tok, s, fl)
			}
		}
	}
	peak := mem.end()
	msgs := sent + echoed
	record(t, "traffic", "%d connections, %v: %d messages sent and %d echoed, %.0f messages/s, %.1f MB/s of %d-byte messages",
		n, dur, sent, echoed, float64(msgs)/dur.Seconds(), float64(msgs)*msgSize/dur.Seconds()/1e6, msgSize)
	record(t, "exactly once", "%d connections checked: %d with acknowledged messages missing, %d with messages out of order or failed", n, lost, bad)
	record(t, "traffic memory", "client peak RSS %d MiB (%.1f KiB per connection), heap in use %d MiB, %.0f B allocated per message",
		peak>>10, float64(peak)/float64(n), ms1.HeapInuse>>20, float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(max(msgs, 1)))

	close(stopLoop)
	<-loopDone
	for _, c := range conns {
		mux.remove(c.p)
		if err := c.cm.Destroy(); err != nil {
			t.Error(err)
		}
	}
	mux.close()
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	srv.send("quit")
	rss := srv.expect("rss", 30*time.Second)
	record(t, "traffic memory", "server RSS at the end %s KiB", rss[1])
	lk := srv.expect("leaks", 30*time.Second)
	if fmt.Sprint(lk[1:]) != "[goroutines=0 fds=0 ids=0]" {
		t.Errorf("server left %v", lk[1:])
	}
	base.verify(t, f)
}
