package soft_test

import (
	"net/netip"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// TestNetmonLifetime checks that, with no grace period, the address monitor
// and the shared route socket exist exactly while an id is bound: an idle
// fabric holds no subscription, no socket and no goroutine.
func TestNetmonLifetime(t *testing.T) {
	f := soft.New(soft.WithIdleGrace(0))
	ch := newRCChan(t, f)
	defer ch.src.Close()
	if n, on := soft.MonitorWatching(f); n != 0 || on {
		t.Fatalf("idle fabric watches %d ids, monitor running %v", n, on)
	}
	before := countFDs(t)
	a, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if n, on := soft.MonitorWatching(f); n != 0 || on {
		t.Fatalf("unbound id watched (%d, %v)", n, on)
	}
	if err := a.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	b, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if n, on := soft.MonitorWatching(f); n != 2 || !on || !soft.MonitorSharesRouteSocket(f) {
		t.Fatalf("two bound ids: watching %d, monitor running %v, route socket %v", n, on, soft.MonitorSharesRouteSocket(f))
	}
	// Resolution uses the shared socket: no descriptor more or less.
	during := countFDs(t)
	if err := a.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.1:7471"), time.Second); err != nil {
		t.Fatal(err)
	}
	ch.want(t, id.EventAddrResolved)
	if n := countFDs(t); n != during {
		t.Errorf("descriptors: %d while bound, %d after a resolution", during, n)
	}
	if err := a.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n, on := soft.MonitorWatching(f); n != 1 || !on {
		t.Fatalf("one bound id left: watching %d, monitor running %v", n, on)
	}
	if err := b.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n, on := soft.MonitorWatching(f); n != 0 || on || soft.MonitorSharesRouteSocket(f) {
		t.Fatalf("after the last destroy: watching %d, monitor running %v, route socket %v", n, on, soft.MonitorSharesRouteSocket(f))
	}
	f.Quiesce()
	if after := countFDs(t); after != before {
		t.Errorf("descriptors: %d before, %d after", before, after)
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

// TestNetmonEvents removes addresses and a link in a private network
// namespace and checks the events: ADDR_CHANGE for ids on a removed address
// of an interface that keeps others, DEVICE_REMOVAL once the interface is
// no device (no address left, or deleted), nothing after DEVICE_REMOVAL,
// and the connection of a removed id closed.
func TestNetmonEvents(t *testing.T) {
	if os.Getenv(netmonChildEnv) == "" {
		runInNetns(t, "TestNetmonEvents")
		return
	}
	ip := func(args ...string) { t.Helper(); runIP(t, args...) }
	ip("link", "set", "lo", "up")
	ip("link", "add", "nm0", "type", "veth", "peer", "name", "nm1")
	ip("link", "set", "nm0", "addrgenmode", "none") // no IPv6 link-local address
	ip("link", "set", "nm0", "up")
	ip("addr", "add", "10.99.0.1/24", "dev", "nm0")
	ip("addr", "add", "10.99.0.2/24", "dev", "nm0")
	ip("link", "add", "nm2", "type", "veth", "peer", "name", "nm3")
	ip("link", "set", "nm2", "addrgenmode", "none")
	ip("link", "set", "nm2", "up")
	ip("addr", "add", "10.98.0.1/24", "dev", "nm2")

	f := soft.New()
	ch := newRCChan(t, f)
	bind := func(a string) *id.ID {
		t.Helper()
		i, err := id.Create(ch, nil, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		if err := i.Bind(netip.MustParseAddrPort(a)); err != nil {
			t.Fatal(err)
		}
		return i
	}
	idA := bind("10.99.0.1:0")
	idB := bind("10.99.0.2:0")
	idX := bind("10.98.0.1:0")
	// A connection on 10.99.0.2: listener, client, and the passive id.
	lis := bind("10.99.0.2:0")
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	cli := bind("10.99.0.2:0")
	if err := cli.ResolveAddr(netip.AddrPort{}, lis.LocalAddr(), time.Second); err != nil {
		t.Fatal(err)
	}
	ch.want(t, id.EventAddrResolved)
	if err := cli.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	ch.want(t, id.EventRouteResolved)
	if err := cli.Connect(&id.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	srv := ch.want(t, id.EventConnectRequest).ID
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	ch.want(t, id.EventEstablished)
	ch.want(t, id.EventEstablished)

	// got collects the next n events by id.
	got := func(n int) map[*id.ID][]id.EventType {
		t.Helper()
		m := map[*id.ID][]id.EventType{}
		for k := 0; k < n; k++ {
			ev, ok := ch.nextEv(5 * time.Second)
			if !ok {
				t.Fatalf("%d of %d events arrived: %v", k, n, m)
			}
			m[ev.ID] = append(m[ev.ID], ev.Type)
		}
		return m
	}
	one := func(m map[*id.ID][]id.EventType, i *id.ID, name string, want id.EventType) {
		t.Helper()
		if evs := m[i]; len(evs) != 1 || evs[0] != want {
			t.Errorf("%s: events %v, want [%s]", name, evs, want)
		}
	}

	// 10.99.0.2 goes; nm0 keeps 10.99.0.1: ADDR_CHANGE for the four ids on
	// 10.99.0.2, nothing for idA.
	start := time.Now()
	ip("addr", "del", "10.99.0.2/24", "dev", "nm0")
	m := got(4)
	t.Logf("ADDR_CHANGE for 4 ids within %v", time.Since(start))
	for _, c := range []struct {
		i    *id.ID
		name string
	}{{idB, "bound id"}, {lis, "listener"}, {cli, "client"}, {srv, "passive id"}} {
		one(m, c.i, c.name, id.EventAddrChange)
	}
	ch.none(t, 200*time.Millisecond)

	// 10.99.0.1 goes too: nm0 has no address, its device is gone.
	start = time.Now()
	ip("addr", "del", "10.99.0.1/24", "dev", "nm0")
	m = got(5)
	t.Logf("DEVICE_REMOVAL for 5 ids within %v", time.Since(start))
	for _, c := range []struct {
		i    *id.ID
		name string
	}{{idA, "bound id"}, {idB, "bound id on the earlier address"}, {lis, "listener"}, {cli, "client"}, {srv, "passive id"}} {
		one(m, c.i, c.name, id.EventDeviceRemoval)
	}
	// The connection was closed, but neither side reports DISCONNECTED
	// after DEVICE_REMOVAL.
	ch.none(t, 300*time.Millisecond)
	for _, i := range []*id.ID{cli, srv} {
		if s := i.State(); s != journal.StateDeviceRemoval {
			t.Errorf("id %d in state %s, want DEVICE_REMOVAL", i.Handle(), s)
		}
	}

	// Deleting a link removes its device.
	ip("link", "del", "nm2")
	one(got(1), idX, "id on a deleted link", id.EventDeviceRemoval)

	for _, i := range []*id.ID{idA, idB, idX, cli, srv, lis} {
		if err := i.Destroy(); err != nil {
			t.Error(err)
		}
	}
	_ = ch.src.Close()
	f.Quiesce()
	if n, on := soft.MonitorWatching(f); n != 0 || on {
		t.Errorf("after destroy and Quiesce: watching %d, monitor running %v", n, on)
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}
