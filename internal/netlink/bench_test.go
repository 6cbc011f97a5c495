package netlink

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
)

// BenchmarkRouteGet measures lookups over a reused Conn (unicast destination
// via the default route or on-link, and a local destination) and through the
// package-level function, which opens a socket per call.
func BenchmarkRouteGet(b *testing.B) {
	unicast := netip.MustParseAddr("198.51.100.7")
	if _, err := RouteGet(unicast, netip.Addr{}, 0); errors.Is(err, syscall.ENETUNREACH) {
		unicast = netip.MustParseAddr("127.0.0.1") // no default route here
	}
	local := netip.MustParseAddr("127.0.0.1")
	c, err := Dial()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for _, x := range []struct {
		name string
		fn   func() (Route, error)
	}{
		{"Conn/unicast", func() (Route, error) { return c.RouteGet(unicast, netip.Addr{}, 0) }},
		{"Conn/local", func() (Route, error) { return c.RouteGet(local, netip.Addr{}, 0) }},
		{"Func/unicast", func() (Route, error) { return RouteGet(unicast, netip.Addr{}, 0) }},
	} {
		b.Run(x.name, func(b *testing.B) {
			if _, err := x.fn(); err != nil {
				b.Skipf("lookup fails here: %v", err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := x.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRouteGetAllocs pins the allocation budget of a unicast lookup over a
// reused Conn: request/receive buffers and the interface name are reused, so
// steady state allocates nothing.
func TestRouteGetAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	dst := netip.MustParseAddr("198.51.100.7")
	c, err := Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if r, err := c.RouteGet(dst, netip.Addr{}, 0); err != nil || r.Type != RouteUnicast {
		t.Skipf("no unicast route to %v here: %+v, %v", dst, r, err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := c.RouteGet(dst, netip.Addr{}, 0); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("Conn.RouteGet allocates %v times per call, want 0", allocs)
	}
}
