package soft

import (
	"net/netip"
	"testing"

	"github.com/cmrt/cmrt/fabric"
)

// BenchmarkRoute measures the fabric's route lookup (twice per connection:
// ResolveAddr and ResolveRoute) with no id watched, where each lookup opens
// its own netlink socket, and with a bound endpoint, where lookups share the
// fabric's socket.
func BenchmarkRoute(b *testing.B) {
	dst := netip.MustParseAddr("127.0.0.1")
	f := New()
	lookup := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.route(dst, netip.Addr{}, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("socket=own", lookup)
	b.Run("socket=shared", func(b *testing.B) {
		src, err := f.Open()
		if err != nil {
			b.Fatal(err)
		}
		defer src.Close()
		ep, err := src.Create(1, fabric.PSTCP, fabric.RC)
		if err != nil {
			b.Fatal(err)
		}
		defer ep.Destroy()
		if err := ep.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
			b.Fatal(err)
		}
		if !f.mon.sharesRouteSocket() {
			b.Fatal("a bound id, but no shared route socket")
		}
		lookup(b)
	})
}
