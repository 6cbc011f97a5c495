package soft_test

import (
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestResolveOnBoundDevice, in a private network namespace with one link
// and no default route: an id bound to the link's address (by bind, or by
// resolve_addr's source) looks routes up on that link, as the kernel's
// rdma_cm does (bound_dev_if), so a destination without a route is on its
// link and resolves (here at once: the link has no ARP); an unbound id, or
// one bound to the wildcard, has no route to it: the call fails with
// ENETUNREACH. The VM's siw0 and rxe0 showed it (internal/diffkernel's
// resolve-bound-device-on-link).
func TestResolveOnBoundDevice(t *testing.T) {
	if os.Getenv(netmonChildEnv) == "" {
		runInNetns(t, "TestResolveOnBoundDevice")
		return
	}
	ip := func(args ...string) { t.Helper(); runIP(t, args...) }
	ip("link", "set", "lo", "up")
	ip("link", "add", "rb0", "type", "veth", "peer", "name", "rb1")
	ip("link", "set", "rb0", "arp", "off")
	ip("link", "set", "rb0", "up")
	ip("link", "set", "rb1", "up")
	ip("addr", "add", "10.67.0.1/24", "dev", "rb0")

	f := soft.New(soft.WithIdleGrace(0))
	ch := newRCChan(t, f)
	defer ch.src.Close()
	local := netip.MustParseAddrPort("10.67.0.1:0")
	noRoute := netip.MustParseAddrPort("192.0.2.1:7471")
	for _, c := range []struct {
		name      string
		bind, src netip.AddrPort
		want      syscall.Errno // 0: ADDR_RESOLVED, and ROUTE_RESOLVED after it
	}{
		{name: "bound", bind: local},
		{name: "source given", src: local},
		{name: "unbound", want: syscall.ENETUNREACH},
		{name: "bound to the wildcard", bind: netip.MustParseAddrPort("0.0.0.0:0"), want: syscall.ENETUNREACH},
	} {
		cm, err := id.Create(ch, nil, fabric.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		if c.bind.IsValid() {
			if err := cm.Bind(c.bind); err != nil {
				t.Fatalf("%s: bind: %v", c.name, err)
			}
		}
		err = cm.ResolveAddr(c.src, noRoute, time.Second)
		if c.want != 0 {
			if !errors.Is(err, c.want) {
				t.Errorf("%s: resolve_addr = %v, want %v", c.name, err, c.want)
			}
			ch.none(t, 100*time.Millisecond)
			_ = cm.Destroy()
			continue
		}
		if err != nil {
			t.Fatalf("%s: resolve_addr: %v", c.name, err)
		}
		if ev, ok := ch.nextEv(5 * time.Second); !ok || ev.Type != fabric.EventAddrResolved {
			t.Fatalf("%s: %v %+v, want ADDR_RESOLVED", c.name, ok, ev)
		}
		if got := cm.LocalAddr().Addr(); got != local.Addr() {
			t.Errorf("%s: local address %s, want %s", c.name, got, local.Addr())
		}
		if err := cm.ResolveRoute(time.Second); err != nil {
			t.Fatalf("%s: resolve_route: %v", c.name, err)
		}
		if ev, ok := ch.nextEv(5 * time.Second); !ok || ev.Type != fabric.EventRouteResolved {
			t.Fatalf("%s: %v %+v, want ROUTE_RESOLVED", c.name, ok, ev)
		}
		_ = cm.Destroy()
	}
	f.Quiesce()
}
