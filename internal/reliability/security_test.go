package reliability_test

import (
	"bytes"
	"errors"
	"net/netip"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestSecurityListenerAddress: a listener bound to one address of host a
// accepts only there. Connections to host a's other addresses (its second
// IPv4 address, its IPv6 address, loopback) on the same port are refused
// and the listener hears nothing; the same holds for an IPv6 listener and
// for a UD listener.
func TestSecurityListenerAddress(t *testing.T) {
	tp := needTopo(t)
	base := snapshot()
	f, ch := fabric(t, nil)
	cf, cch := fabric(t, nil, soft.WithSIDRRetry(100*time.Millisecond, 1))
	remote := func(dst netip.AddrPort) []string {
		t.Helper()
		c := spawn(t, tp.ns["b"], "client", map[string]string{"dst": dst.String(), "n": "1"})
		ev := c.expect("event", 10*time.Second)
		c.quit(10 * time.Second)
		return ev
	}
	refused := func(what string, ev []string) {
		t.Helper()
		if len(ev) < 4 || ev[2] != id.EventRejected.String() || ev[3] != strconv.Itoa(-int(syscall.ECONNREFUSED)) {
			t.Errorf("%s: %v, want REJECTED -ECONNREFUSED", what, ev)
		}
	}
	local := func(dst netip.AddrPort) ev {
		t.Helper()
		c := dialAsync(t, cch, nil, dst, nil, nil)
		e, err := next(cch, 5*time.Second)
		if err != nil {
			t.Fatalf("connect to %s: %v", dst, err)
		}
		_ = c.Destroy()
		return e
	}

	// IPv4 listener on a's first address.
	l4 := listenOn(t, ch, netip.AddrPortFrom(tp.addr["a"], 0), 0)
	p := l4.SrcPort()
	refused("from b to a's second address", remote(netip.AddrPortFrom(tp.addr2["a"], p)))
	refused("from b to a's IPv6 address", remote(netip.AddrPortFrom(tp.addr6["a"], p)))
	if e := local(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), p)); e.Type != id.EventRejected || !statusIs(e.Status, syscall.ECONNREFUSED) {
		t.Errorf("from a to loopback: %s status %d, want REJECTED -ECONNREFUSED", e.Type, e.Status)
	}
	none(t, ch, 200*time.Millisecond)
	// The bound address itself works.
	c := spawn(t, tp.ns["b"], "client", map[string]string{"dst": netip.AddrPortFrom(tp.addr["a"], p).String(), "n": "1"})
	r := want(t, ch, id.EventConnectRequest, 10*time.Second)
	if err := r.ID.Reject(nil); err != nil {
		t.Fatal(err)
	}
	if ev := c.expect("event", 10*time.Second); ev[2] != id.EventRejected.String() {
		t.Errorf("control connection: %v, want the REJECTED we sent", ev)
	}
	c.quit(10 * time.Second)
	_ = r.ID.Destroy()

	// IPv6 listener on a's IPv6 address.
	l6 := listenOn(t, ch, netip.AddrPortFrom(tp.addr6["a"], 0), 0)
	p6 := l6.SrcPort()
	refused("from b to a's IPv4 address, IPv6 listener's port", remote(netip.AddrPortFrom(tp.addr["a"], p6)))
	none(t, ch, 200*time.Millisecond)

	// UD listener on a's first address: a SIDR request to the second one
	// goes unanswered (UNREACHABLE once its retries are spent).
	lu, err := id.Create(ch, nil, id.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := lu.Bind(netip.AddrPortFrom(tp.addr["a"], 0)); err != nil {
		t.Fatal(err)
	}
	if err := lu.Listen(0); err != nil {
		t.Fatal(err)
	}
	uc, err := id.Create(cch, nil, id.PSUDP)
	if err != nil {
		t.Fatal(err)
	}
	if err := uc.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(tp.addr2["a"], lu.SrcPort()), time.Second); err != nil {
		t.Fatal(err)
	}
	want(t, cch, id.EventAddrResolved, 5*time.Second)
	if err := uc.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	want(t, cch, id.EventRouteResolved, 5*time.Second)
	if err := uc.Connect(&id.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	e := want(t, cch, id.EventUnreachable, 5*time.Second)
	record(t, "UD listener", "SIDR request to another address: UNREACHABLE status %d", e.Status)
	none(t, ch, 200*time.Millisecond)

	for _, i := range []*id.ID{uc, lu, l6, l4} {
		_ = i.Destroy()
	}
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	if err := cch.Close(); err != nil {
		t.Error(err)
	}
	base.verify(t, f, cf)
}

// TestSecurityChannels: an event can be acknowledged only through the
// channel it came from (another channel of the same fabric, or of another
// fabric, gets EINVAL and the event stays unacknowledged, so Destroy still
// waits for it), and an id cannot be migrated to a channel of another
// fabric or to a closed channel.
func TestSecurityChannels(t *testing.T) {
	need(t)
	base := snapshot()
	f, ch1 := fabric(t, nil)
	ch2, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	f2, ch3 := fabric(t, nil)
	cm, err := id.Create(ch1, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(localAddr(), 7471), time.Second); err != nil {
		t.Fatal(err)
	}
	e, err := ch1.GetEvent()
	if err != nil {
		t.Fatal(err)
	}
	for name, other := range map[string]*channel.Channel{"same fabric": ch2, "other fabric": ch3} {
		if err := other.Ack(e); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("ack through a channel of the %s: %v, want EINVAL", name, err)
		}
	}
	destroyed := make(chan error, 1)
	go func() { destroyed <- cm.Destroy() }()
	select {
	case err := <-destroyed:
		t.Fatalf("Destroy returned (%v) with its event unacknowledged: another channel acknowledged it", err)
	case <-time.After(200 * time.Millisecond):
	}
	if err := ch1.Ack(e); err != nil {
		t.Fatalf("ack through its own channel: %v", err)
	}
	if err := <-destroyed; err != nil {
		t.Fatal(err)
	}

	// Migration.
	cm, err = id.Create(ch1, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := cm.Migrate(ch3); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("migrate to a channel of another fabric: %v, want EINVAL", err)
	}
	closed, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	_ = closed.Close()
	if err := cm.Migrate(closed); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("migrate to a closed channel: %v, want EINVAL", err)
	}
	if err := cm.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(localAddr(), 7471), time.Second); err != nil {
		t.Fatal(err)
	}
	want(t, ch1, id.EventAddrResolved, 5*time.Second) // still on its channel
	none(t, ch3, 100*time.Millisecond)
	if err := cm.Migrate(ch2); err != nil {
		t.Fatalf("migrate within the fabric: %v", err)
	}
	if err := cm.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	want(t, ch2, id.EventRouteResolved, 5*time.Second)
	_ = cm.Destroy()
	for _, c := range []*channel.Channel{ch1, ch2, ch3} {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
	}
	base.verify(t, f, f2)
}

// TestSecurityPrivateData: private data never aliases between ids. The
// caller's buffers given to Connect, Accept and Reject may be reused as
// soon as the call returns; the private data of two live events are
// distinct; and writing through the private data of an event after it was
// acknowledged (a use after free in C) must not change another id's event.
func TestSecurityPrivateData(t *testing.T) {
	need(t)
	base := snapshot()
	f, ch := fabric(t, nil)
	cf, cch := fabric(t, nil)
	l := listenOn(t, ch, netip.AddrPortFrom(localAddr(), 0), 0)
	addr := netip.AddrPortFrom(localAddr(), l.SrcPort())
	fill := func(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n) }
	var clients []*id.ID
	connect := func(c byte) {
		pd := fill(c, id.MaxPrivateDataREQ)
		clients = append(clients, dialAsync(t, cch, nil, addr, &id.ConnParam{PrivateData: pd}, nil))
		copy(pd, fill('x', len(pd))) // the caller reuses its buffer at once
	}
	connect('A')
	connect('B')
	established := 0
	take := func() *id.Event {
		t.Helper()
		for {
			e, err := ch.GetEventContext(ctxFor(t, 5*time.Second))
			if err != nil {
				t.Fatalf("want CONNECT_REQUEST: %v", err)
			}
			if e.Type == id.EventConnectRequest {
				return e
			}
			if e.Type == id.EventEstablished {
				established++
			} else {
				t.Errorf("server event %s", e.Type)
			}
			_ = ch.Ack(e)
		}
	}
	e1, e2 := take(), take()
	if e1.PrivateData()[0] == 'B' {
		e1, e2 = e2, e1
	}
	if !bytes.Equal(e1.PrivateData(), fill('A', id.MaxPrivateDataREQ)) || !bytes.Equal(e2.PrivateData(), fill('B', id.MaxPrivateDataREQ)) {
		t.Fatalf("requests carry %q and %q: the connect buffer was not copied", e1.PrivateData()[:8], e2.PrivateData()[:8])
	}
	// Two live events: writing one leaves the other.
	copy(e1.PrivateData(), fill('a', 8))
	if !bytes.Equal(e2.PrivateData(), fill('B', id.MaxPrivateDataREQ)) {
		t.Errorf("writing one event's private data changed another's")
	}
	// Accept and Reject copy their private data too.
	acc := fill('P', 64)
	if err := e1.ID.Accept(&id.ConnParam{PrivateData: acc}); err != nil {
		t.Fatal(err)
	}
	copy(acc, fill('x', len(acc)))
	rej := fill('R', 64)
	if err := e2.ID.Reject(rej); err != nil {
		t.Fatal(err)
	}
	copy(rej, fill('x', len(rej)))
	stale := [][]byte{e1.PrivateData(), e2.PrivateData()}
	srv := []*id.ID{e1.ID, e2.ID}
	_ = ch.Ack(e1)
	_ = ch.Ack(e2)
	for k := 0; k < 2; k++ {
		e, err := next(cch, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch e.Type {
		case id.EventEstablished:
			if !bytes.HasPrefix(e.PD, fill('P', 64)) {
				t.Errorf("ESTABLISHED carries %q, want the accept's private data", e.PD[:8])
			}
		case id.EventRejected:
			if !bytes.HasPrefix(e.PD, fill('R', 64)) {
				t.Errorf("REJECTED carries %q, want the reject's private data", e.PD[:8])
			}
		default:
			t.Errorf("client event %s", e.Type)
		}
	}
	// Writing through the acknowledged events' private data must not reach
	// the events that follow, of other ids. Each round acknowledges its
	// event and keeps its private data, as a careless user would.
	const rounds = 16
	corrupted := 0
	for k := 0; k < rounds; k++ {
		c := byte('C' + k)
		connect(c)
		e := take()
		for _, s := range stale {
			copy(s, fill('Z', len(s)))
		}
		if !bytes.Equal(e.PrivateData(), fill(c, id.MaxPrivateDataREQ)) {
			corrupted++
			if corrupted == 1 {
				t.Errorf("request %d: private data %q after writing through an acknowledged event's: the buffers alias (events are recycled)", k, e.PrivateData()[:8])
			}
		}
		srv = append(srv, e.ID)
		_ = e.ID.Reject(nil)
		stale = append(stale, e.PrivateData())
		_ = ch.Ack(e)
		want(t, cch, id.EventRejected, 5*time.Second)
	}
	record(t, "private data", "%d of %d later requests changed by writes through acknowledged events' private data", corrupted, rounds)
	if established == 0 {
		want(t, ch, id.EventEstablished, 5*time.Second)
	}
	for _, i := range append(append(srv, clients...), l) {
		_ = i.Destroy()
	}
	if err := ch.Close(); err != nil {
		t.Error(err)
	}
	if err := cch.Close(); err != nil {
		t.Error(err)
	}
	base.verify(t, f, cf)
}
