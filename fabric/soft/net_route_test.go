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
