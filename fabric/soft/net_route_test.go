package soft_test

import (
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestRouteCacheSeesChanges, in a private network namespace: resolving a
// local address twice fills the fabric's route cache (net_monitor.go
// lookupRoute), then a change of the routing policy, of the local route or
// of the address, made just before the next resolution (ip(8) has returned:
// the kernel has made the change and queued its notification, which the
// address monitor may not have read yet), is what that resolution sees;
// undone, it resolves again.
func TestRouteCacheSeesChanges(t *testing.T) {
	if os.Getenv(netmonChildEnv) == "" {
		runInNetns(t, "TestRouteCacheSeesChanges")
		return
	}
	ip := func(args ...string) { t.Helper(); runIP(t, args...) }
	// No IPv6 on the new links: their addresses and routes would come and
	// go during the test, and each notification empties the cache, which
	// could hide a change the cache misses.
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0)
	ip("link", "set", "lo", "up")
	ip("link", "add", "rc0", "type", "veth", "peer", "name", "rc1")
	ip("link", "set", "rc0", "up")
	ip("link", "set", "rc1", "up")
	ip("addr", "add", "10.68.0.1/24", "dev", "rc0")
	// The local table is looked up at preference 100, so that a rule can
	// come before it.
	ip("rule", "add", "pref", "100", "lookup", "local")
	ip("rule", "del", "pref", "0")

	f := soft.New(soft.WithIdleGrace(time.Minute))
	defer f.Quiesce()
	ch := newChannel(t, f)
	// An id bound for the whole test keeps the address monitor, and with
	// it the cache, running.
	keeper := mkID(t, ch, nil, id.PSTCP)
	defer destroy(keeper)
	if err := keeper.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	dst := netip.MustParseAddrPort("10.68.0.1:7471")
	// resolve returns the errno of resolving dst: of the call, or of the
	// ADDR_ERROR or ROUTE_ERROR event; 0 when both steps resolved.
	resolve := func() syscall.Errno {
		t.Helper()
		cm := mkID(t, ch, nil, id.PSTCP)
		defer destroy(cm)
		steps := []struct {
			call     func() error
			ok, fail id.EventType
		}{
			{func() error { return cm.ResolveAddr(netip.AddrPort{}, dst, time.Second) }, id.EventAddrResolved, id.EventAddrError},
			{func() error { return cm.ResolveRoute(time.Second) }, id.EventRouteResolved, id.EventRouteError},
		}
		for _, s := range steps {
			if err := s.call(); err != nil {
				var e syscall.Errno
				if !errors.As(err, &e) {
					t.Fatalf("no errno in %v", err)
				}
				return e
			}
			ev, err := nextWithin(ch, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			typ, status := ev.Type, ev.Status
			ack(t, ev)
			switch typ {
			case s.ok:
			case s.fail:
				return syscall.Errno(-status)
			default:
				t.Fatalf("unexpected %s", typ)
			}
		}
		return 0
	}
	for _, c := range []struct {
		name   string
		change [][]string
		want   syscall.Errno
		undo   [][]string
	}{
		{
			name:   "prohibit rule",
			change: [][]string{{"rule", "add", "to", "10.68.0.1", "prohibit", "pref", "10"}},
			want:   syscall.EACCES,
			undo:   [][]string{{"rule", "del", "pref", "10"}},
		},
		{
			name: "local route replaced by an unreachable one",
			change: [][]string{
				{"route", "add", "unreachable", "10.68.0.1/32"},
				{"route", "del", "local", "10.68.0.1", "dev", "rc0", "table", "local"},
			},
			want: syscall.EHOSTUNREACH,
			undo: [][]string{
				{"route", "add", "local", "10.68.0.1", "dev", "rc0", "table", "local", "proto", "kernel", "scope", "host", "src", "10.68.0.1"},
				{"route", "del", "unreachable", "10.68.0.1/32"},
			},
		},
		{
			name:   "address removed",
			change: [][]string{{"addr", "del", "10.68.0.1/24", "dev", "rc0"}},
			want:   syscall.ENETUNREACH,
			undo:   [][]string{{"addr", "add", "10.68.0.1/24", "dev", "rc0"}},
		},
	} {
		for k := range 2 { // the second resolution answers from the cache
			if got := resolve(); got != 0 {
				t.Fatalf("%s: before the change, resolution %d: %v", c.name, k, got)
			}
		}
		for _, args := range c.change {
			ip(args...)
		}
		if got := resolve(); got != c.want {
			t.Fatalf("%s: resolved at once after the change: errno %d (%v), want %d (%v)", c.name, got, got, c.want, c.want)
		}
		for _, args := range c.undo {
			ip(args...)
		}
		if got := resolve(); got != 0 {
			t.Fatalf("%s: after undoing the change: %v", c.name, got)
		}
	}
}

// TestRouteCacheEmptiesWithMonitor, in a private network namespace: a
// fabric with no idle grace stops its address monitor when its last id
// goes, and with it the route cache. A change made while no monitor runs
// is seen by no monitor, so an answer kept from before must not outlive
// the monitor that vouched for it (a new monitor's epochs start over).
func TestRouteCacheEmptiesWithMonitor(t *testing.T) {
	if os.Getenv(netmonChildEnv) == "" {
		runInNetns(t, "TestRouteCacheEmptiesWithMonitor")
		return
	}
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/default/disable_ipv6", []byte("1"), 0)
	ip := func(args ...string) { t.Helper(); runIP(t, args...) }
	ip("link", "set", "lo", "up")
	ip("link", "add", "rc0", "type", "veth", "peer", "name", "rc1")
	ip("link", "set", "rc0", "up")
	ip("link", "set", "rc1", "up")
	ip("addr", "add", "10.69.0.1/24", "dev", "rc0")
	ip("rule", "add", "pref", "100", "lookup", "local")
	ip("rule", "del", "pref", "0")

	f := soft.New(soft.WithIdleGrace(0))
	defer f.Quiesce()
	ch := newChannel(t, f)
	local := netip.MustParseAddrPort("10.69.0.1:0")
	dst := netip.MustParseAddrPort("10.69.0.1:7471")
	// resolve resolves dst on an id bound first (so that the monitor runs
	// and the lookups are cached), destroyed before it returns (the
	// fabric's last: the monitor stops), and returns the errno of the call
	// or of ADDR_ERROR, 0 when ADDR_RESOLVED and ROUTE_RESOLVED followed.
	resolve := func() syscall.Errno {
		t.Helper()
		cm := mkID(t, ch, nil, id.PSTCP)
		defer destroy(cm)
		if err := cm.Bind(local); err != nil {
			t.Fatal(err)
		}
		if err := cm.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
			var e syscall.Errno
			if !errors.As(err, &e) {
				t.Fatalf("no errno in %v", err)
			}
			return e
		}
		ev, err := nextWithin(ch, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		typ, status := ev.Type, ev.Status
		ack(t, ev)
		if typ == id.EventAddrError {
			return syscall.Errno(-status)
		}
		if typ != id.EventAddrResolved {
			t.Fatalf("unexpected %s", typ)
		}
		if err := cm.ResolveRoute(time.Second); err != nil {
			t.Fatal(err)
		}
		ack(t, next(t, ch, id.EventRouteResolved))
		return 0
	}
	for k := range 2 {
		if got := resolve(); got != 0 {
			t.Fatalf("before the rule, resolution %d: %v", k, got)
		}
	}
	waitFor(t, func() bool { _, running := soft.MonitorWatching(f); return !running })
	// The lookup is prohibited; an id bound to rc0's address then takes
	// the destination to be on rc0's link (as the kernel's rdma_cm does,
	// see route), where nothing answers its ARP: ADDR_ERROR -ETIMEDOUT
	// after the resolution's timeout. A cached answer would resolve.
	ip("rule", "add", "to", "10.69.0.1", "prohibit", "pref", "10")
	if got := resolve(); got != syscall.ETIMEDOUT {
		t.Fatalf("after a rule made while no monitor ran: errno %d (%v), want ETIMEDOUT", got, got)
	}
}

// TestResolveRouteNoSecondLookup: route resolution is the kernel's for an
// iWARP device (cma_resolve_iw_route only queues ROUTE_RESOLVED): the route
// ResolveAddr looked up is the route, so ResolveRoute makes no routing
// lookup of its own and leaves the resolved route as it was, for each
// kind of id. It made a second lookup (a poll of the address monitor or
// an RTM_GETROUTE) per connection before.
func TestResolveRouteNoSecondLookup(t *testing.T) {
	for _, c := range []struct {
		name string
		ps   id.PortSpace
		dst  string
	}{
		{"tcp v4", id.PSTCP, "127.0.0.1:7471"},
		{"tcp v6", id.PSTCP, "[::1]:7471"},
		{"udp v4", id.PSUDP, "127.0.0.1:7471"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := soft.New()
			defer f.Quiesce()
			lookups := soft.CountRouteLookups(f)
			ch := newChannel(t, f)
			cm := mkID(t, ch, nil, c.ps)
			defer destroy(cm)
			dst := netip.MustParseAddrPort(c.dst)
			if err := cm.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
				if dst.Addr().Is6() && errors.Is(err, syscall.ENETUNREACH) {
					t.Skip("no IPv6 loopback")
				}
				t.Fatal(err)
			}
			ack(t, next(t, ch, id.EventAddrResolved))
			if n := lookups.Load(); n != 1 {
				t.Fatalf("resolve_addr made %d routing lookups, want 1", n)
			}
			before := cm.Route()
			if err := cm.ResolveRoute(time.Second); err != nil {
				t.Fatal(err)
			}
			ack(t, next(t, ch, id.EventRouteResolved))
			if n := lookups.Load(); n != 1 {
				t.Errorf("resolve_route made %d routing lookups, want none", n-1)
			}
			// The same route, now with its path.
			want := before
			want.NumPaths = 1
			if after := cm.Route(); after != want {
				t.Errorf("route %+v after resolve_route, %+v after resolve_addr", after, before)
			}
			if before.Src.Addr() != dst.Addr() || before.Dst != dst || before.MTU <= 0 {
				t.Errorf("resolved route %+v, want %v to itself with an MTU", before, dst)
			}
		})
	}
}
