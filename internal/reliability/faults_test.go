package reliability_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// localAddr is the address in-process tests listen on: host a's address
// in the namespaces, else loopback.
func localAddr() netip.Addr {
	if a, err := netip.ParseAddr(os.Getenv("CMRT_REL_ADDR_A")); err == nil {
		return a
	}
	return netip.MustParseAddr("127.0.0.1")
}

func portOf(t testing.TB, f []string) uint16 {
	t.Helper()
	if len(f) < 2 {
		t.Fatalf("no port in %v", f)
	}
	n, err := strconv.Atoi(f[1])
	if err != nil {
		t.Fatalf("bad port in %v", f)
	}
	return uint16(n)
}

// startServer runs the server helper on host h and returns its address.
func startServer(t *testing.T, tp *topo, h string, args map[string]string) (*proc, netip.AddrPort) {
	t.Helper()
	if args == nil {
		args = map[string]string{}
	}
	if args["listen"] == "" {
		args["listen"] = netip.AddrPortFrom(tp.addr[h], 0).String()
	}
	p := spawn(t, tp.ns[h], "server", args)
	port := portOf(t, p.expect("port", 20*time.Second))
	return p, netip.AddrPortFrom(netip.MustParseAddrPort(args["listen"]).Addr(), port)
}

// connectOnce makes one healthy connection and tears it down.
func connectOnce(t *testing.T, ch *channel.Channel, dst netip.AddrPort) {
	t.Helper()
	c := dialAsync(t, ch, nil, dst, nil, nil)
	want(t, ch, id.EventEstablished, 10*time.Second)
	if err := c.Disconnect(); err != nil {
		t.Fatal(err)
	}
	want(t, ch, id.EventDisconnected, 5*time.Second)
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// within checks a measured duration against [lo, hi].
func within(t *testing.T, what string, d, lo, hi time.Duration) {
	t.Helper()
	if d < lo || d > hi {
		t.Errorf("%s took %v, want between %v and %v", what, d, lo, hi)
	}
}

// TestFaultLinkCutDuringConnect: the server's link is cut before connect,
// so nothing answers: UNREACHABLE with -ETIMEDOUT once the fabric's connect
// timeout, or the id's ACK_TIMEOUT (4.096µs·2^n·(retry_count+1)), expires.
// A server that accepts TCP but never sends its MPA Reply gives the same.
func TestFaultLinkCutDuringConnect(t *testing.T) {
	tp := needTopo(t)
	srv, dst := startServer(t, tp, "b", map[string]string{"qp": "0"})
	base := snapshot()
	const connectTimeout = 1500 * time.Millisecond
	f, ch := fabric(t, nil, soft.WithConnectTimeout(connectTimeout))
	connectOnce(t, ch, dst) // also fills the neighbour cache: the SYNs go out and are lost

	restore := tp.cut(t, "b")
	attempt := func(name string, dst netip.AddrPort, param *id.ConnParam, prep func(*id.ID), bound time.Duration) {
		var start time.Time
		c := dialAsync(t, ch, nil, dst, param, func(c *id.ID) {
			if prep != nil {
				prep(c)
			}
			start = time.Now()
		})
		e := want(t, ch, id.EventUnreachable, bound+5*time.Second)
		took := e.At.Sub(start)
		record(t, name, "UNREACHABLE status %d after %v (bound %v)", e.Status, took.Round(time.Millisecond), bound)
		if !statusIs(e.Status, syscall.ETIMEDOUT) {
			t.Errorf("%s: status %d, want -ETIMEDOUT", name, e.Status)
		}
		within(t, name, took, bound-50*time.Millisecond, bound+time.Second)
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	}
	attempt("connect timeout", dst, nil, nil, connectTimeout)
	// ACK_TIMEOUT 17 with retry_count 2: 536.9ms·3 = 1.61s.
	attempt("ack timeout", dst, &id.ConnParam{RetryCount: 2}, func(c *id.ID) {
		if err := c.SetAckTimeout(17); err != nil {
			t.Fatal(err)
		}
	}, 1610612736*time.Nanosecond)
	restore()
	connectOnce(t, ch, dst) // the link is back

	// A peer that completes TCP but never answers the MPA Request.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(localAddr(), 0).String())
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	var hmu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			hmu.Lock()
			held = append(held, c)
			hmu.Unlock()
		}
	}()
	attempt("no MPA reply", netip.MustParseAddrPort(ln.Addr().String()), nil, nil, connectTimeout)
	_ = ln.Close()
	hmu.Lock()
	for _, c := range held {
		_ = c.Close()
	}
	hmu.Unlock()

	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	srv.quit(30 * time.Second)
	base.verify(t, f)
}

// clientPeer dials dst with a QP of depth receives and returns the id and
// its traffic state once ESTABLISHED.
func clientPeer(t *testing.T, ch *channel.Channel, mux *cqMux, dst netip.AddrPort, token uint64, param *id.ConnParam, prep func(*id.ID)) (*id.ID, *peer) {
	t.Helper()
	var p *peer
	if param == nil {
		param = &id.ConnParam{}
	}
	param.PrivateData = tokenPD(token)
	c := dialAsync(t, ch, token, dst, param, func(c *id.ID) {
		if prep != nil {
			prep(c)
		}
		var err error
		if p, err = newPeer(c, token, 16, false); err != nil {
			t.Fatal(err)
		}
		if mux != nil {
			if err := mux.add(p); err != nil {
				t.Fatal(err)
			}
		}
	})
	want(t, ch, id.EventEstablished, 10*time.Second)
	return c, p
}

// waitEchoes waits until p has its messages echoed, or d passes.
func waitEchoes(p *peer, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for p.inFlight() > 0 {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}

// closedLine waits for the server's report of the connection with token.
func closedLine(t *testing.T, srv *proc, token uint64, d time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		f := srv.expect("closed", time.Until(deadline))
		if f[1] == "token="+strconv.FormatUint(token, 10) {
			return f
		}
	}
}

func fieldOf(f []string, key string) string {
	for _, s := range f {
		if v, ok := strings.CutPrefix(s, key+"="); ok {
			return v
		}
	}
	return ""
}

// TestFaultLinkCutEstablished: the link of an established connection is
// cut. With ACK_TIMEOUT set (SetAckTimeout: TCP_USER_TIMEOUT plus
// keep-alive), both sides get DISCONNECTED with -ETIMEDOUT: an idle
// connection after the keep-alive probes go unanswered for the timeout, a
// busy one after its retransmissions do. Messages completed before the cut
// were all delivered; what is posted after it completes with an error.
func TestFaultLinkCutEstablished(t *testing.T) {
	tp := needTopo(t)
	// Accepted connections inherit the listener's ACK_TIMEOUT 16 with the
	// passive side's 7 retries: 268ms·8 = 2.15s.
	srv, dst := startServer(t, tp, "b", map[string]string{"ack": "16"})
	base := snapshot()
	f, ch := fabric(t, nil)
	mux, err := newCQMux()
	if err != nil {
		t.Fatal(err)
	}
	// ACK_TIMEOUT 17, retry_count 2: TCP_USER_TIMEOUT 1.61s, keep-alive
	// idle and interval 1s (at least a second).
	const userTimeout = 1610612736 * time.Nanosecond
	const keepIdle = time.Second
	const srvTimeout = 268435456 * 8 * time.Nanosecond
	ack := func(c *id.ID) {
		if err := c.SetAckTimeout(17); err != nil {
			t.Fatal(err)
		}
	}
	for _, busy := range []bool{false, true} {
		name := "idle"
		if busy {
			name = "busy"
		}
		token := uint64(1)
		if busy {
			token = 2
		}
		c, p := clientPeer(t, ch, mux, dst, token, &id.ConnParam{RetryCount: 2}, ack)
		p.start(8)
		time.Sleep(200 * time.Millisecond)
		p.stop()
		if !waitEchoes(p, 5*time.Second) {
			t.Fatalf("%s: echoes missing before the cut", name)
		}
		before := p.stats()
		restore := tp.cut(t, "b")
		cut := time.Now()
		if busy {
			p.start(4) // in flight across the cut: retransmitted until the timeout
		}
		e := want(t, ch, id.EventDisconnected, 15*time.Second)
		took := e.At.Sub(cut)
		bound := userTimeout + 2*keepIdle + 500*time.Millisecond
		if busy {
			bound = userTimeout + time.Second
		}
		record(t, name+" client", "DISCONNECTED status %d after %v (bound %v)", e.Status, took.Round(time.Millisecond), bound)
		if !statusIs(e.Status, syscall.ETIMEDOUT) {
			t.Errorf("%s: DISCONNECTED status %d, want -ETIMEDOUT", name, e.Status)
		}
		within(t, name+" client DISCONNECTED", took, userTimeout-100*time.Millisecond, bound)
		sf := closedLine(t, srv, token, 15*time.Second)
		stook := time.Since(cut)
		record(t, name+" server", "DISCONNECTED %s after %v (bound %v)", fieldOf(sf, "status"), stook.Round(time.Millisecond), srvTimeout+2*keepIdle+time.Second)
		if fieldOf(sf, "status") != strconv.Itoa(-int(syscall.ETIMEDOUT)) {
			t.Errorf("%s: server's DISCONNECTED status %s, want -ETIMEDOUT", name, fieldOf(sf, "status"))
		}
		if stook > srvTimeout+2*keepIdle+time.Second {
			t.Errorf("%s: server's DISCONNECTED after %v", name, stook)
		}
		// Every message the server received was in order; what the client
		// saw completed before the cut got there.
		if fieldOf(sf, "bad") != "0" {
			t.Errorf("%s: server saw out-of-order or foreign messages: %v", name, sf)
		}
		srecv, _ := strconv.ParseUint(fieldOf(sf, "recv"), 10, 64)
		if srecv < before.acked {
			t.Errorf("%s: server received %d messages, the client had %d acknowledged before the cut", name, srecv, before.acked)
		}
		p.drain()
		after := p.stats()
		// A send completes when TCP has taken its bytes (iWARP has no
		// end-to-end acknowledgement, siw neither): those in flight across
		// the cut complete with success and are lost with the connection.
		record(t, name+" QP", "after the cut: %d sends completed with success (%d of them never received), %d failed, %d receives flushed",
			after.acked-before.acked, after.acked-min(after.acked, srecv), after.sndErr, after.flushed)
		if after.flushed == 0 {
			t.Errorf("%s: no receive was flushed when the connection failed", name)
		}
		// A send posted now fails at once (QP in error).
		p.mu.Lock()
		p.sendLocked(99)
		p.mu.Unlock()
		mux.remove(p)
		restore()
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	}
	mux.close()
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	srv.quit(30 * time.Second)
	base.verify(t, f)
}

// TestFaultPeerKilled: a peer process is killed (SIGKILL). Its kernel
// closes its sockets, so the surviving side gets DISCONNECTED at once, in
// both directions (server killed, client killed).
func TestFaultPeerKilled(t *testing.T) {
	tp := needTopo(t)
	base := snapshot()
	f, ch := fabric(t, nil)

	t.Run("server", func(t *testing.T) {
		srv, dst := startServer(t, tp, "b", nil)
		mux, err := newCQMux()
		if err != nil {
			t.Fatal(err)
		}
		defer mux.close()
		c, p := clientPeer(t, ch, mux, dst, 7, nil, nil)
		p.start(8)
		time.Sleep(300 * time.Millisecond) // traffic flowing
		killed := time.Now()
		srv.kill()
		e := want(t, ch, id.EventDisconnected, 5*time.Second)
		took := e.At.Sub(killed)
		record(t, "server killed", "client DISCONNECTED status %d after %v", e.Status, took.Round(time.Microsecond))
		if took > time.Second {
			t.Errorf("DISCONNECTED %v after the kill, want under 1s", took)
		}
		p.stop()
		p.drain()
		s := p.stats()
		if s.bad != 0 {
			t.Errorf("echoes out of order: %v", s)
		}
		record(t, "server killed", "client: %d echoes in order before the kill, %d receives flushed", s.recv, s.flushed)
		mux.remove(p)
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	})

	t.Run("client", func(t *testing.T) {
		l := listenOn(t, ch, netip.AddrPortFrom(tp.addr["a"], 0), 0)
		cli := spawn(t, tp.ns["b"], "client", map[string]string{"dst": netip.AddrPortFrom(tp.addr["a"], l.SrcPort()).String(), "n": "1"})
		req := want(t, ch, id.EventConnectRequest, 10*time.Second)
		if err := req.ID.Accept(nil); err != nil {
			t.Fatal(err)
		}
		want(t, ch, id.EventEstablished, 5*time.Second)
		cli.expect("event", 5*time.Second) // its ESTABLISHED
		killed := time.Now()
		cli.kill()
		e := want(t, ch, id.EventDisconnected, 5*time.Second)
		took := e.At.Sub(killed)
		record(t, "client killed", "server DISCONNECTED status %d after %v", e.Status, took.Round(time.Microsecond))
		if took > time.Second {
			t.Errorf("DISCONNECTED %v after the kill, want under 1s", took)
		}
		for _, i := range []*id.ID{req.ID, l} {
			if err := i.Destroy(); err != nil {
				t.Error(err)
			}
		}
	})
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	base.verify(t, f)
}

// TestFaultListenerDestroyedPending: a listener is destroyed while requests
// are pending: reported but unanswered (their ids live on, and rejecting or
// destroying them sends REJECTED), queued in the channel (rejected by the
// destroy), and TCP connections that never sent their MPA Request (closed
// with the listener, long before their request timeout). Nothing is left
// behind, and the port refuses new connections.
func TestFaultListenerDestroyedPending(t *testing.T) {
	tp := needTopo(t)
	base := snapshot()
	log := &logBuf{}
	// Far longer than the test: a half-open connection closed by its
	// request timeout would race with the destroy (the badinput tests cover
	// that timeout).
	const reqTimeout = 30 * time.Second
	f, ch := fabric(t, log, soft.WithRequestTimeout(reqTimeout))
	l := listenOn(t, ch, netip.AddrPortFrom(tp.addr["a"], 0), 0)
	lport := netip.AddrPortFrom(tp.addr["a"], l.SrcPort())
	cli := spawn(t, tp.ns["b"], "client", map[string]string{"dst": lport.String(), "n": "6"})
	var reported []*id.ID
	for k := 0; k < 2; k++ {
		reported = append(reported, want(t, ch, id.EventConnectRequest, 10*time.Second).ID)
	}
	var raw []net.Conn
	for k := 0; k < 3; k++ {
		c, err := net.Dial("tcp", lport.String())
		if err != nil {
			t.Fatal(err)
		}
		raw = append(raw, c)
	}
	time.Sleep(time.Second) // the other four requests reach the channel
	// Readers of the half-open connections note when each is closed.
	type closed struct {
		at  time.Time
		n   int
		err error
	}
	closes := make(chan closed, len(raw))
	for _, c := range raw {
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			var b [64]byte
			n, err := c.Read(b[:])
			closes <- closed{time.Now(), n, err}
		}()
	}
	destroyed := time.Now()
	if err := l.Destroy(); err != nil {
		t.Fatal(err)
	}
	rejected := func(n int) {
		t.Helper()
		for k := 0; k < n; k++ {
			f := cli.expect("event", 5*time.Second)
			if len(f) < 4 || f[2] != id.EventRejected.String() {
				t.Fatalf("client event %v, want REJECTED", f)
			}
		}
	}
	rejected(4)
	record(t, "queued requests", "4 REJECTED within %v of the destroy", time.Since(destroyed).Round(time.Millisecond))
	none(t, ch, 200*time.Millisecond)
	// The reported requests outlive their listener, as in the kernel.
	if err := reported[0].Reject([]byte("bye")); err != nil {
		t.Error(err)
	}
	if err := reported[1].Destroy(); err != nil { // rejects it too
		t.Error(err)
	}
	rejected(2)
	if err := reported[0].Destroy(); err != nil {
		t.Error(err)
	}
	// The half-open connections were closed with the listener.
	var last time.Duration
	for k := range raw {
		r := <-closes
		if r.err == nil || errors.Is(r.err, os.ErrDeadlineExceeded) {
			t.Errorf("half-open connection %d: read %d bytes, %v; want it closed", k, r.n, r.err)
		}
		last = max(last, r.at.Sub(destroyed))
	}
	for _, c := range raw {
		_ = c.Close()
	}
	record(t, "half-open connections", "3 closed within %v of the destroy (request timeout %v)", last.Round(time.Microsecond), reqTimeout)
	if n := countLog(log.entries(), "soft: connection timed out, closing", "fd"); n != 0 {
		t.Errorf("%d connections closed by their request timeout, want none: the listener closes them", n)
	}
	// The port is closed.
	other, och := fabric(t, nil)
	c := dialAsync(t, och, nil, lport, nil, nil)
	e := want(t, och, id.EventRejected, 5*time.Second)
	if !statusIs(e.Status, syscall.ECONNREFUSED) {
		t.Errorf("connect to the destroyed listener's port: REJECTED status %d, want -ECONNREFUSED", e.Status)
	}
	_ = c.Destroy()
	_ = och.Close()
	cli.quit(10 * time.Second)
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	base.verify(t, f, other)
}

// TestFaultAddrRemoved: addresses go away under bound and connected ids:
// ADDR_CHANGE when the interface keeps other addresses, DEVICE_REMOVAL when
// it has none left or is deleted (the soft device is gone). The events come
// from fabric/soft's netlink monitor, which holds its descriptors only while
// ids are bound.
func TestFaultAddrRemoved(t *testing.T) {
	tp := needTopo(t)
	srv, dst := startServer(t, tp, "b", map[string]string{"qp": "0"})
	extra := netip.MustParseAddr("10.77.0.101")
	run(t, "ip", "addr", "add", extra.String()+"/24", "dev", "eth0")
	t.Cleanup(func() { _ = tryRun("ip", "addr", "del", extra.String()+"/24", "dev", "eth0") })
	base := snapshot()
	log := &logBuf{}
	f, ch := fabric(t, log)
	bind := func(a netip.Addr) *id.ID {
		t.Helper()
		i, err := id.Create(ch, nil, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		if err := i.Bind(netip.AddrPortFrom(a, 0)); err != nil {
			t.Fatal(err)
		}
		return i
	}
	x := bind(extra)
	l := bind(extra)
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	c := bind(extra) // connects from the extra address to host b
	if err := c.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	want(t, ch, id.EventAddrResolved, 5*time.Second)
	if err := c.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	want(t, ch, id.EventRouteResolved, 5*time.Second)
	if err := c.Connect(&id.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	want(t, ch, id.EventEstablished, 10*time.Second)
	if got := c.LocalAddr().Addr(); got != extra {
		t.Fatalf("client bound to %s, want %s", got, extra)
	}

	collect := func(n int, start time.Time) (map[*id.ID]id.EventType, time.Duration) {
		t.Helper()
		m := map[*id.ID]id.EventType{}
		var last time.Duration
		for k := 0; k < n; k++ {
			e, err := next(ch, 5*time.Second)
			if err != nil {
				t.Fatalf("%d of %d events: %v (log:\n%s)", k, n, err, log.tail(10))
			}
			if _, dup := m[e.ID]; dup {
				t.Errorf("second event %s for id %d", e.Type, e.ID.Handle())
			}
			m[e.ID] = e.Type
			last = e.At.Sub(start)
		}
		return m, last
	}

	start := time.Now()
	run(t, "ip", "addr", "del", extra.String()+"/24", "dev", "eth0")
	m, took := collect(3, start)
	for name, i := range map[string]*id.ID{"bound": x, "listener": l, "connected": c} {
		if m[i] != id.EventAddrChange {
			t.Errorf("%s id: %s, want ADDR_CHANGE", name, m[i])
		}
	}
	record(t, "address removed", "ADDR_CHANGE on 3 ids within %v", took.Round(time.Microsecond))
	none(t, ch, 300*time.Millisecond)
	if n := countLog(log.entries(), "soft: address removed", "addr="+extra.String(), "uid"); n != 3 {
		t.Errorf("log: %d 'address removed' entries with addr and uid, want 3", n)
	}

	// A device of its own: its last address goes, then the link.
	run(t, "ip", "link", "add", "relx0", "type", "veth", "peer", "name", "relx1")
	t.Cleanup(func() { _ = tryRun("ip", "link", "del", "relx0") })
	run(t, "ip", "link", "set", "relx0", "addrgenmode", "none")
	run(t, "ip", "link", "set", "relx0", "up")
	run(t, "ip", "addr", "add", "10.78.0.1/24", "dev", "relx0")
	dev := netip.MustParseAddr("10.78.0.1")
	y := bind(dev)
	z := bind(dev)
	if err := z.Listen(0); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	run(t, "ip", "addr", "del", "10.78.0.1/24", "dev", "relx0")
	m, took = collect(2, start)
	if m[y] != id.EventDeviceRemoval || m[z] != id.EventDeviceRemoval {
		t.Errorf("last address removed: %v, want DEVICE_REMOVAL for both", m)
	}
	record(t, "last address removed", "DEVICE_REMOVAL on 2 ids within %v", took.Round(time.Microsecond))
	run(t, "ip", "addr", "add", "10.78.0.1/24", "dev", "relx0")
	w := bind(dev)
	start = time.Now()
	run(t, "ip", "link", "del", "relx0")
	m, took = collect(1, start)
	if m[w] != id.EventDeviceRemoval {
		t.Errorf("link deleted: %v, want DEVICE_REMOVAL", m)
	}
	record(t, "link deleted", "DEVICE_REMOVAL within %v", took.Round(time.Microsecond))
	none(t, ch, 300*time.Millisecond) // nothing more for y and z
	if n := countLog(log.entries(), "soft: device removed", "addr="+dev.String()); n != 3 {
		t.Errorf("log: %d 'device removed' entries, want 3", n)
	}
	for _, i := range []*id.ID{x, l, c, y, z, w} {
		if err := i.Destroy(); err != nil {
			t.Error(err)
		}
	}
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	srv.quit(30 * time.Second)
	base.verify(t, f) // the monitor's descriptors and goroutine are gone too
}

// TestFaultDestroyInHandler: handlers destroy their own id (ESTABLISHED)
// and the listener (CONNECT_REQUEST, with more requests queued behind it),
// on an inline reactor and on one with a worker. Destroy returns at once
// from a handler (it cannot wait for the event it is handling), the peers
// see DISCONNECTED or REJECTED, and nothing leaks.
func TestFaultDestroyInHandler(t *testing.T) {
	need(t)
	for _, workers := range []int{0, 1} {
		t.Run("workers="+strconv.Itoa(workers), func(t *testing.T) {
			base := snapshot()
			f, sch := fabric(t, nil)
			_, cch := fabric(t, nil) // same fabric would do; a second one is a second host
			cf := cch.Fabric().(*soft.Fabric)
			r, err := reactor.New(reactor.WithWorkers(workers))
			if err != nil {
				t.Fatal(err)
			}
			var slowest atomic.Int64
			timed := func(fn func() error) error {
				start := time.Now()
				err := fn()
				if d := int64(time.Since(start)); d > slowest.Load() {
					slowest.Store(d)
				}
				return err
			}
			proceed := make(chan struct{})
			reached := make(chan struct{}, 1)
			var herr sync.Map
			h := handlers.New().
				OnConnectRequest(func(ev *id.Event) error {
					if tokenOf(ev.PrivateData()) == 3 {
						reached <- struct{}{}
						<-proceed // requests 4 and 5 queue up meanwhile
						if err := timed(ev.ListenID.Destroy); err != nil {
							herr.Store("listener destroy", err)
						}
					}
					return ev.ID.Accept(nil)
				}).
				OnEstablished(func(ev *id.Event) error {
					if err := timed(ev.ID.Destroy); err != nil {
						herr.Store("destroy", err)
					}
					return nil
				})
			if err := r.Register(sch, h); err != nil {
				t.Fatal(err)
			}
			l, err := id.Create(sch, nil, id.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Bind(netip.AddrPortFrom(localAddr(), 0)); err != nil {
				t.Fatal(err)
			}
			if err := l.Listen(0); err != nil {
				t.Fatal(err)
			}
			dst := netip.AddrPortFrom(localAddr(), l.SrcPort())
			// Client 1: accepted, then destroyed by the server's handler.
			c1 := dialAsync(t, cch, nil, dst, &id.ConnParam{PrivateData: tokenPD(1)}, nil)
			want(t, cch, id.EventEstablished, 5*time.Second)
			want(t, cch, id.EventDisconnected, 5*time.Second)
			// Client 3 blocks its handler; 4 and 5 queue; then the handler
			// destroys the listener and accepts 3.
			c3 := dialAsync(t, cch, nil, dst, &id.ConnParam{PrivateData: tokenPD(3)}, nil)
			select {
			case <-reached:
			case <-time.After(5 * time.Second):
				t.Fatal("request 3 not handled")
			}
			c4 := dialAsync(t, cch, nil, dst, &id.ConnParam{PrivateData: tokenPD(4)}, nil)
			c5 := dialAsync(t, cch, nil, dst, &id.ConnParam{PrivateData: tokenPD(5)}, nil)
			time.Sleep(300 * time.Millisecond)
			close(proceed)
			got := map[*id.ID][]id.EventType{}
			for k := 0; k < 4; k++ { // 3: ESTABLISHED, DISCONNECTED; 4, 5: REJECTED
				e, err := next(cch, 5*time.Second)
				if err != nil {
					t.Fatalf("client events: %v (so far %v)", err, got)
				}
				got[e.ID] = append(got[e.ID], e.Type)
			}
			if g := got[c3]; len(g) != 2 || g[0] != id.EventEstablished || g[1] != id.EventDisconnected {
				t.Errorf("client 3: %v, want ESTABLISHED, DISCONNECTED", g)
			}
			for _, c := range []*id.ID{c4, c5} {
				if g := got[c]; len(g) != 1 || g[0] != id.EventRejected {
					t.Errorf("client queued behind the listener's destroy: %v, want REJECTED", g)
				}
			}
			herr.Range(func(k, v any) bool { t.Errorf("%v from a handler: %v", k, v); return true })
			record(t, "destroy in handler", "slowest Destroy from a handler returned in %v", time.Duration(slowest.Load()).Round(time.Microsecond))
			if time.Duration(slowest.Load()) > 100*time.Millisecond {
				t.Errorf("Destroy from a handler took %v", time.Duration(slowest.Load()))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := r.Close(ctx); err != nil {
				t.Error(err)
			}
			for _, c := range []*id.ID{c1, c3, c4, c5} {
				if err := c.Destroy(); err != nil {
					t.Error(err)
				}
			}
			if err := sch.Close(); err != nil {
				t.Error(err)
			}
			if err := cch.Close(); err != nil {
				t.Error(err)
			}
			base.verify(t, f, cf)
		})
	}
}

// TestFaultReactorClosedQueued: a reactor is closed while events are queued
// in its mailboxes and in the channel. Close waits for the events it took
// to be handled; events it did not take stay in the channel for whoever
// reads it next; when Close gives up (its context ends) the events it
// abandons must not leave ids nobody was told about.
func TestFaultReactorClosedQueued(t *testing.T) {
	need(t)
	const n = 20
	setup := func(t *testing.T, opts ...reactor.Option) (*reactor.Reactor, *channel.Channel, *channel.Channel, *id.ID, chan struct{}, *atomic.Int32, []*soft.Fabric) {
		f, sch := fabric(t, nil)
		cf, cch := fabric(t, nil, soft.WithConnectTimeout(3*time.Second))
		r, err := reactor.New(opts...)
		if err != nil {
			t.Fatal(err)
		}
		gate := make(chan struct{})
		var handled atomic.Int32
		h := handlers.New().OnConnectRequest(func(ev *id.Event) error {
			<-gate
			handled.Add(1)
			return ev.ID.Accept(nil)
		})
		if err := r.Register(sch, h); err != nil {
			t.Fatal(err)
		}
		l := listenOn(t, sch, netip.AddrPortFrom(localAddr(), 0), 0)
		dst := netip.AddrPortFrom(localAddr(), l.SrcPort())
		for k := 0; k < n; k++ {
			dialAsync(t, cch, nil, dst, &id.ConnParam{PrivateData: tokenPD(uint64(k))}, nil)
		}
		return r, sch, cch, l, gate, &handled, []*soft.Fabric{f, cf}
	}
	// finish reads what is left in the server channel (accepting requests,
	// destroying the others' ids), then counts client outcomes and
	// destroys everything.
	finish := func(t *testing.T, sch, cch *channel.Channel, l *id.ID, fabs []*soft.Fabric) (left int, established int) {
		var srvIDs []*id.ID
		for {
			e, err := next(sch, 300*time.Millisecond)
			if err != nil {
				break
			}
			switch e.Type {
			case id.EventConnectRequest:
				left++
				_ = e.ID.Accept(nil)
				srvIDs = append(srvIDs, e.ID)
			case id.EventEstablished:
				srvIDs = append(srvIDs, e.ID)
			}
		}
		var cliIDs []*id.ID
		for {
			e, err := next(cch, 4*time.Second)
			if err != nil {
				break
			}
			if e.Type == id.EventEstablished {
				established++
			}
			cliIDs = append(cliIDs, e.ID)
		}
		seen := map[*id.ID]bool{}
		for _, i := range append(append(srvIDs, cliIDs...), l) {
			if !seen[i] {
				seen[i] = true
				_ = i.Destroy()
			}
		}
		if err := sch.Close(); err != nil {
			t.Errorf("server channel: %v", err)
		}
		if err := cch.Close(); err != nil {
			t.Errorf("client channel: %v", err)
		}
		return left, established
	}

	t.Run("drain", func(t *testing.T) {
		base := snapshot()
		r, sch, cch, l, gate, handled, fabs := setup(t, reactor.WithWorkers(2))
		waitFor(t, 5*time.Second, func() bool { return r.Stats().Events == n })
		closed := make(chan error, 1)
		go func() { closed <- r.Close(context.Background()) }()
		select {
		case err := <-closed:
			t.Fatalf("Close returned (%v) while handlers were blocked", err)
		case <-time.After(200 * time.Millisecond):
		}
		close(gate)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		if h := handled.Load(); h != n {
			t.Errorf("handled %d of %d taken events", h, n)
		}
		left, est := finish(t, sch, cch, l, fabs)
		record(t, "drain", "Close waited for %d handlers; %d requests left in the channel; %d clients ESTABLISHED", handled.Load(), left, est)
		if est != n {
			t.Errorf("%d of %d clients established", est, n)
		}
		base.verify(t, fabs...)
	})

	t.Run("bounded", func(t *testing.T) {
		base := snapshot()
		r, sch, cch, l, gate, handled, fabs := setup(t, reactor.WithWorkers(1), reactor.WithMaxPending(4))
		waitFor(t, 5*time.Second, func() bool { return r.Stats().Overloads > 0 })
		closed := make(chan error, 1)
		go func() { closed <- r.Close(context.Background()) }()
		time.Sleep(100 * time.Millisecond)
		close(gate)
		if err := <-closed; err != nil {
			t.Fatal(err)
		}
		left, est := finish(t, sch, cch, l, fabs)
		record(t, "bounded", "reactor handled %d, %d were still in the channel, %d clients ESTABLISHED", handled.Load(), left, est)
		if int(handled.Load())+left != n || est != n {
			t.Errorf("handled %d + left %d != %d requests, or %d clients established", handled.Load(), left, n, est)
		}
		base.verify(t, fabs...)
	})

	t.Run("abandon", func(t *testing.T) {
		base := snapshot()
		r, sch, cch, l, gate, handled, fabs := setup(t, reactor.WithWorkers(2))
		waitFor(t, 5*time.Second, func() bool { return r.Stats().Events == n })
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		err := r.Close(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Close with blocked handlers: %v, want the context's deadline", err)
		}
		close(gate) // the two running handlers finish
		waitFor(t, 5*time.Second, func() bool { return handled.Load() == 2 })
		left, est := finish(t, sch, cch, l, fabs)
		record(t, "abandon", "handled %d, abandoned %d, %d clients ESTABLISHED, %d ids left", handled.Load(), n-int(handled.Load())-left, est, id.Live()-base.live)
		base.verify(t, fabs...)
	})
}

// waitFor polls cond until it holds or d passes.
func waitFor(t *testing.T, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestFaultNeighbour: address resolution waits for the next hop's
// link-layer address, as the kernel's rdma_resolve_addr does. With host a's
// neighbour table flushed, resolving host c waits for ARP and succeeds;
// an address of the subnet that nobody holds, and host c with its link
// cut, give ADDR_ERROR -ETIMEDOUT at the resolution's timeout.
func TestFaultNeighbour(t *testing.T) {
	tp := needTopo(t)
	base := snapshot()
	f, ch := fabric(t, nil)
	resolve := func(name string, dst netip.Addr, timeout time.Duration, wantType id.EventType) time.Duration {
		t.Helper()
		c, err := id.Create(ch, nil, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Destroy()
		start := time.Now()
		if err := c.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(dst, 7471), timeout); err != nil {
			t.Fatal(err)
		}
		e := want(t, ch, wantType, timeout+5*time.Second)
		took := e.At.Sub(start)
		if wantType == id.EventAddrError && !statusIs(e.Status, syscall.ETIMEDOUT) {
			t.Errorf("%s: ADDR_ERROR status %d, want -ETIMEDOUT", name, e.Status)
		}
		record(t, name, "%s status %d after %v (timeout %v)", e.Type, e.Status, took.Round(10*time.Microsecond), timeout)
		return took
	}

	run(t, "ip", "neigh", "flush", "dev", "eth0")
	if took := resolve("next hop by ARP", tp.addr["c"], 2*time.Second, id.EventAddrResolved); took > time.Second {
		t.Errorf("ARP on the bridge took %v", took)
	}
	const timeout = 500 * time.Millisecond
	nobody := netip.MustParseAddr("10.77.0.250")
	within(t, "nobody on the subnet", resolve("nobody on the subnet", nobody, timeout, id.EventAddrError),
		timeout, timeout+time.Second)

	restore := tp.cut(t, "c")
	run(t, "ip", "neigh", "flush", "dev", "eth0")
	within(t, "next hop cut off", resolve("next hop cut off", tp.addr["c"], timeout, id.EventAddrError),
		timeout, timeout+time.Second)
	restore()

	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	base.verify(t, f)
}
