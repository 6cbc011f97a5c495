package reliability_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/portrange"
)

// This file sorts last on purpose: the cycles leave some ten thousand
// TIME_WAIT sockets in host a's namespace for a minute, which the tests
// before it should not run into.

// TestLoadConnectCycles: CMRT_REL_CYCLES (10 000) connect/disconnect
// cycles from host a to a reactor server on host b, CMRT_REL_PARALLEL (16)
// at a time, each a full synchronous rdma_cm flow: create, resolve_addr,
// resolve_route, connect (ESTABLISHED), disconnect, destroy. Every cycle
// must succeed, the server must see every connection end, and nothing may
// be left on either side.
func TestLoadConnectCycles(t *testing.T) {
	tp := needTopo(t)
	cycles := envInt("CMRT_REL_CYCLES", 10000)
	par := envInt("CMRT_REL_PARALLEL", 16)
	srv, dst := startServer(t, tp, "b", map[string]string{"qp": "0", "workers": "4"})
	base := snapshot()
	f := soft.New()
	rss0 := rssKiB(0)
	mem := sampleMemory()
	var ms0 runtime.MemStats
	runtime.ReadMemStats(&ms0)

	// Each cycle's phases, in the order the cycles started.
	type sample struct {
		seq                         int64
		resolve, route, conn, total time.Duration
	}
	var issued atomic.Int64
	var failed atomic.Int64
	var firstErr sync.Once
	lat := make([][]sample, par)
	cycle := func(s *sample) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		c, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
		if err != nil {
			return err
		}
		defer c.Destroy()
		t0 := time.Now()
		if err := c.ResolveAddrContext(ctx, netip.AddrPort{}, dst, 2*time.Second); err != nil {
			return err
		}
		t1 := time.Now()
		if err := c.ResolveRouteContext(ctx, 2*time.Second); err != nil {
			return err
		}
		t2 := time.Now()
		if err := c.ConnectContext(ctx, &id.ConnParam{}); err != nil {
			return err
		}
		s.resolve, s.route, s.conn = t1.Sub(t0), t2.Sub(t1), time.Since(t2)
		return c.DisconnectContext(ctx)
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < par; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seq := issued.Add(1)
				if seq > int64(cycles) {
					return
				}
				s := sample{seq: seq}
				t0 := time.Now()
				if err := cycle(&s); err != nil {
					failed.Add(1)
					firstErr.Do(func() { t.Errorf("cycle failed: %v", err) })
					continue
				}
				s.total = time.Since(t0)
				lat[w] = append(lat[w], s)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var ms1 runtime.MemStats
	runtime.ReadMemStats(&ms1)
	peak := mem.end()
	samples := slices.Concat(lat...)
	slices.SortFunc(samples, func(a, b sample) int { return int(a.seq - b.seq) })
	pick := func(from, to int, get func(sample) time.Duration) []time.Duration {
		var d []time.Duration
		for _, s := range samples[min(from, len(samples)):min(to, len(samples))] {
			d = append(d, get(s))
		}
		slices.Sort(d)
		return d
	}
	all := pick(0, len(samples), func(s sample) time.Duration { return s.total })
	record(t, "cycles", "%d of %d ok, %d failed, %d in parallel, in %v: %.0f cycles/s",
		len(all), cycles, failed.Load(), par, elapsed.Round(time.Millisecond), float64(len(all))/elapsed.Seconds())
	record(t, "cycle latency", "p50 %v p99 %v max %v",
		percentile(all, .5).Round(time.Microsecond), percentile(all, .99).Round(time.Microsecond), percentile(all, 1).Round(time.Microsecond))
	tenth := len(samples) / 10
	phase := func(name string, get func(sample) time.Duration) (first, last time.Duration) {
		a, b := pick(0, tenth, get), pick(len(samples)-tenth, len(samples), get)
		first, last = percentile(a, .5), percentile(b, .5)
		record(t, "phase "+name, "p50 %v in the first tenth of the cycles, %v in the last (p99 %v, %v)",
			first.Round(time.Microsecond), last.Round(time.Microsecond), percentile(a, .99).Round(time.Microsecond), percentile(b, .99).Round(time.Microsecond))
		return first, last
	}
	rf, rl := phase("resolve_addr", func(s sample) time.Duration { return s.resolve })
	phase("resolve_route", func(s sample) time.Duration { return s.route })
	phase("connect", func(s sample) time.Duration { return s.conn })
	record(t, "cycles memory", "client RSS %d MiB at the start, %d MiB at the peak, %.1f KiB allocated per cycle, heap in use %d MiB after",
		rss0>>10, peak>>10, float64(ms1.TotalAlloc-ms0.TotalAlloc)/1024/float64(max(len(all), 1)), ms1.HeapInuse>>20)
	// resolve_addr binds the id's socket to a port (bind(2) with port 0):
	// it must not slow down as the cycles leave TIME_WAIT sockets behind.
	if rl > 10*rf && rl > 2*time.Millisecond {
		t.Errorf("resolve_addr slowed from p50 %v to %v over %d cycles (bind(2) of port 0 scans the TIME_WAIT sockets the cycles left)", rf, rl, len(samples))
	}
	if failed.Load() > 0 {
		t.Errorf("%d cycles failed", failed.Load())
	}
	// The server saw every connection end and destroyed its ids.
	deadline := time.Now().Add(20 * time.Second)
	for {
		srv.send("stats")
		s := srv.expect("stats", 10*time.Second)
		closed, _ := strconv.Atoi(fieldOf(s, "closed"))
		conns := fieldOf(s, "conns")
		if closed >= len(all) && conns == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("server: %v, want %d closed and no connection left", s, len(all))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	srv.send("quit")
	rss := srv.expect("rss", 30*time.Second)
	record(t, "cycles memory", "server RSS at the end %s KiB", rss[1])
	f2 := srv.expect("leaks", 30*time.Second)
	if fmt.Sprint(f2[1:]) != "[goroutines=0 fds=0 ids=0]" {
		t.Errorf("server left %v", f2[1:])
	}

	base.verify(t, f)
}

// TestPortsAfterTimeWait reproduces, in host c, what the cycles above lead
// to once TIME_WAIT sockets fill the lower half of the ephemeral port range
// (where bind(2) of port 0 with SO_REUSEADDR looks first, and so where the
// fabric's own binds put them): a few ports there are left free, ids take
// them, their connections are refused and they are kept (not yet
// destroyed, so the fabric keeps their ports reserved while their sockets
// are closed). New ids must still be able to bind.
func TestPortsAfterTimeWait(t *testing.T) {
	tp := needTopo(t)
	if tp.ns["c"] == "" || !tp.addr["c"].IsValid() {
		t.Skip("needs host c")
	}
	p := spawn(t, tp.ns["c"], "ports", map[string]string{"addr": tp.addr["c"].String(), "free": "4"})
	f := p.expect("filled", 60*time.Second)
	record(t, "TIME_WAIT", "%s", strings.Join(f[1:], " "))
	r := p.expect("ports", 60*time.Second)
	record(t, "ports", "%s", strings.Join(r[1:], " "))
	if fieldOf(r, "fails") != "0" {
		t.Errorf("resolve_addr failed while free ports remain: %s", strings.Join(r[1:], " "))
	}
	p.quit(30 * time.Second)
}

// helperPorts fills the lower half of the ephemeral port range of addr
// with TIME_WAIT sockets, leaving free ports, then binds fabric ids there
// (see TestPortsAfterTimeWait). Arguments: addr, free.
func helperPorts() int {
	base := helperStart()
	addr := netip.MustParseAddr(arg("addr", ""))
	free := argInt("free", 4)
	lo, hi, err := portrange.Read()
	if err != nil {
		say("fail port range: %v", err)
		return 1
	}
	half := lo + ((hi+1-lo)>>2)<<1 // inet_csk_find_open_port's first half
	ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(addr, 0)))
	if err != nil {
		say("fail listen: %v", err)
		return 1
	}
	lport := ln.Addr().(*net.TCPAddr).Port
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(io.Discard, c) // the client closes first: TIME_WAIT is on its side
				_ = c.Close()
			}()
		}
	}()
	dst := &unix.SockaddrInet4{Port: lport, Addr: addr.As4()}
	keepFree := map[int]bool{}
	for k := 1; k <= free; k++ {
		keepFree[lo+k*(half-lo)/(free+1)] = true
	}
	start := time.Now()
	filled := 0
	for port := lo; port < half; port++ {
		if port == lport || keepFree[port] {
			continue
		}
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			say("fail socket: %v", err)
			return 1
		}
		// As the fabric binds (SO_REUSEADDR), so these TIME_WAIT sockets
		// are what its own connections leave behind.
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
		if unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: addr.As4()}) == nil && unix.Connect(fd, dst) == nil {
			filled++
		}
		_ = unix.Close(fd)
	}
	say("filled %d ports of %d-%d with TIME_WAIT sockets in %v, %d left free", filled, lo, half-1, time.Since(start).Round(time.Millisecond), free)
	_ = ln.Close()

	f := soft.New(soft.WithLogger(helperLogger()))
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		say("fail channel: %v", err)
		return 1
	}
	refused := netip.AddrPortFrom(addr, 1)
	var ids []*id.ID
	fails, firstErr := 0, ""
	await := func(want id.EventType) bool {
		e, err := next(ch, 5*time.Second)
		if err != nil || e.Type != want {
			say("fail event %v %v, want %s", e.Type, err, want)
			return false
		}
		return true
	}
	for k := 0; k < 5*free; k++ {
		c, err := id.Create(ch, nil, id.PSTCP)
		if err != nil {
			say("fail create: %v", err)
			return 1
		}
		ids = append(ids, c)
		if err := c.ResolveAddr(netip.AddrPort{}, refused, time.Second); err != nil {
			if fails++; fails == 1 {
				firstErr = fmt.Sprintf("id %d of %d (%d refused ids kept): %v", k+1, 5*free, len(ids)-1, err)
			}
			continue
		}
		if !await(id.EventAddrResolved) || c.ResolveRoute(time.Second) != nil || !await(id.EventRouteResolved) ||
			c.Connect(&id.ConnParam{}) != nil || !await(id.EventRejected) {
			return 1
		}
	}
	say("ports fails=%d of=%d first=%q", fails, 5*free, firstErr)
	commands(func(string) {})
	for _, c := range ids {
		_ = c.Destroy()
	}
	_ = ch.Close()
	base.report(f)
	return 0
}
