package soft

import (
	"net/netip"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

// BenchmarkRoute measures the fabric's route lookup (twice per connection:
// ResolveAddr and ResolveRoute) with no id watched, where each lookup opens
// its own netlink socket, and with a bound id, where lookups share the
// fabric's socket.
func BenchmarkRoute(b *testing.B) {
	dst := netip.MustParseAddr("127.0.0.1")
	f := New()
	lookup := func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := f.route(dst, netip.Addr{}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("socket=own", lookup)
	b.Run("socket=shared", func(b *testing.B) {
		ch := newRCChan(b, f)
		defer ch.src.Close()
		cm, err := id.Create(ch, nil, fabric.PSTCP)
		if err != nil {
			b.Fatal(err)
		}
		defer cm.Destroy()
		if err := cm.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
			b.Fatal(err)
		}
		if !f.mon.sharesRouteSocket() {
			b.Fatal("a bound id, but no shared route socket")
		}
		lookup(b)
	})
}
