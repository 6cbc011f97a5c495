package netlink

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// hostState returns the links and addresses of the test's namespace.
func hostState(t *testing.T) ([]Link, []Addr) {
	t.Helper()
	links, err := Links()
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := Addrs()
	if err != nil {
		t.Fatal(err)
	}
	return links, addrs
}

func TestRouteGetLoopback(t *testing.T) {
	links, addrs := hostState(t)
	var lo Link
	for _, l := range links {
		if l.Flags.Loopback() {
			lo = l
			break
		}
	}
	for _, dst := range []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()} {
		t.Run(dst.String(), func(t *testing.T) {
			configured := false
			for _, a := range addrs {
				configured = configured || a.Index == lo.Index && a.Prefix.Addr() == dst
			}
			if lo.Index == 0 || !lo.Flags.Up() || !configured {
				t.Skipf("%v is not configured on an up loopback interface in this namespace", dst)
			}
			r, err := RouteGet(dst, netip.Addr{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Type != RouteLocal || r.OIF != lo.Index || r.IfName != lo.Name || r.Src != dst || r.Dst != dst ||
				r.Gateway.IsValid() || r.LocalIndex != lo.Index || r.LocalName != lo.Name || r.MTU != lo.MTU {
				t.Errorf("RouteGet(%v) = %+v; want local via %s (index %d), src %v, no gateway, MTU %d",
					dst, r, lo.Name, lo.Index, dst, lo.MTU)
			}
			compareRouteWithIP(t, r, err, dst, netip.Addr{}, "")
		})
	}
}

// TestRouteGetInterfaceAddress resolves, for the first global IPv4 and IPv6
// address of a non-loopback interface, the address itself (local, carried by
// that interface) and a neighbour in its prefix (on-link via that interface).
func TestRouteGetInterfaceAddress(t *testing.T) {
	links, addrs := hostState(t)
	linkByIndex := map[int]Link{}
	for _, l := range links {
		linkByIndex[l.Index] = l
	}
	for _, v6 := range []bool{false, true} {
		name := map[bool]string{false: "IPv4", true: "IPv6"}[v6]
		t.Run(name, func(t *testing.T) {
			var a Addr
			for _, c := range addrs {
				l := linkByIndex[c.Index]
				if c.Prefix.Addr().Is6() == v6 && c.Scope == 0 && !l.Flags.Loopback() && l.Flags.Up() &&
					!c.Flags.Tentative() && !c.Flags.DADFailed() {
					a = c
					break
				}
			}
			if a.Index == 0 {
				t.Skipf("no usable global %s address on a non-loopback interface here", name)
			}
			l := linkByIndex[a.Index]
			ip := a.Prefix.Addr()
			r, err := RouteGet(ip, netip.Addr{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Type != RouteLocal || r.LocalIndex != a.Index || r.LocalName != a.IfName || r.Src != ip || r.OIF == 0 {
				t.Errorf("RouteGet(%v) = %+v; want local, carried by %s (index %d), src %v", ip, r, a.IfName, a.Index, ip)
			}
			compareRouteWithIP(t, r, err, ip, netip.Addr{}, "")

			// A neighbour in the same prefix.
			nb := ip.Next()
			if !a.Prefix.Contains(nb) || nb == a.Prefix.Masked().Addr() {
				nb = ip.Prev()
			}
			if a.Prefix.Bits() >= ip.BitLen()-1 || !a.Prefix.Contains(nb) || a.Flags&unix.IFA_F_NOPREFIXROUTE != 0 {
				t.Skipf("prefix %v has no on-link neighbour to resolve", a.Prefix)
			}
			r, err = RouteGet(nb, netip.Addr{}, 0)
			if err != nil {
				t.Fatal(err)
			}
			if r.Type != RouteUnicast || r.OIF != a.Index || r.IfName != l.Name || r.Gateway.IsValid() ||
				!r.Src.IsValid() || r.MTU <= 0 || r.LocalIndex != 0 {
				t.Errorf("RouteGet(%v) = %+v; want unicast on-link via %s, a source, MTU > 0", nb, r, l.Name)
			}
			if r.MTU > l.MTU {
				t.Errorf("RouteGet(%v).MTU = %d exceeds the interface MTU %d", nb, r.MTU, l.MTU)
			}
			compareRouteWithIP(t, r, err, nb, netip.Addr{}, "")
		})
	}
}

// TestRouteGetDefault resolves TEST-NET destinations, which only a default
// route reaches.
func TestRouteGetDefault(t *testing.T) {
	for _, s := range []string{"198.51.100.7", "2001:db8:ffff::7"} {
		dst := netip.MustParseAddr(s)
		t.Run(s, func(t *testing.T) {
			r, err := RouteGet(dst, netip.Addr{}, 0)
			if errors.Is(err, syscall.ENETUNREACH) {
				compareRouteWithIP(t, r, err, dst, netip.Addr{}, "")
				t.Skipf("no default route for %v here (ENETUNREACH, as ip agrees)", dst)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !r.Gateway.IsValid() {
				t.Skipf("the default route is device-only: %+v", r)
			}
			if r.Type != RouteUnicast || r.OIF <= 0 || r.IfName == "" || !r.Src.IsValid() || r.MTU <= 0 || r.Dst != dst {
				t.Errorf("RouteGet(%v) = %+v; want unicast via a gateway, with oif, source and MTU", dst, r)
			}
			compareRouteWithIP(t, r, err, dst, netip.Addr{}, "")
		})
	}
}

func TestRouteGetArguments(t *testing.T) {
	c, err := Dial()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		name     string
		dst, src netip.Addr
		oif      int
		want     error
	}{
		{"invalid dst", netip.Addr{}, netip.Addr{}, 0, syscall.EINVAL},
		{"family mismatch", netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback(), 0, syscall.EINVAL},
		{"negative oif", netip.MustParseAddr("127.0.0.1"), netip.Addr{}, -1, syscall.EINVAL},
		{"unknown zone", netip.MustParseAddr("fe80::1%nonexistent0"), netip.Addr{}, 0, syscall.ENODEV},
		{"zero zone", netip.MustParseAddr("fe80::1%0"), netip.Addr{}, 0, syscall.EINVAL},
	} {
		if _, err := c.RouteGet(x.dst, x.src, x.oif); !errors.Is(err, x.want) {
			t.Errorf("%s: RouteGet(%v, %v, %d) error = %v, want %v", x.name, x.dst, x.src, x.oif, err, x.want)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := c.RouteGet(netip.MustParseAddr("127.0.0.1"), netip.Addr{}, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("RouteGet after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Links(); !errors.Is(err, ErrClosed) {
		t.Errorf("Links after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Addrs(); !errors.Is(err, ErrClosed) {
		t.Errorf("Addrs after Close: %v, want ErrClosed", err)
	}
}

func TestLinksMatchIP(t *testing.T) {
	links, err := Links()
	if err != nil {
		t.Fatal(err)
	}
	if len(links) == 0 {
		t.Fatal("Links() returned nothing; every namespace has lo")
	}
	if !hasIP() {
		t.Skip("ip(8) not installed; nothing to compare with")
	}
	compareLinksWithIP(t, links)
}

func TestAddrsMatchIP(t *testing.T) {
	addrs, err := Addrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.Index <= 0 || !a.Prefix.IsValid() || a.IfName == "" {
			t.Errorf("incomplete address %+v", a)
		}
	}
	if !hasIP() {
		t.Skip("ip(8) not installed; nothing to compare with")
	}
	compareAddrsWithIP(t, addrs)
}

// TestRouteGetNetlinkFallback checks that the RTM_GETLINK path used when the
// SIOCGIFNAME/SIOCGIFMTU ioctls are unavailable gives the same answers.
func TestRouteGetNetlinkFallback(t *testing.T) {
	_, addrs := hostState(t)
	dsts := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("198.51.100.7")}
	for _, a := range addrs {
		dsts = append(dsts, a.Prefix.Addr())
	}
	fast, err := Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer fast.Close()
	slow, err := Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	slow.noIoctl = true
	for _, dst := range dsts {
		r1, err1 := fast.RouteGet(dst, netip.Addr{}, 0)
		r2, err2 := slow.RouteGet(dst, netip.Addr{}, 0)
		if r1 != r2 || (err1 == nil) != (err2 == nil) {
			t.Errorf("RouteGet(%v): ioctl path %+v, %v; netlink path %+v, %v", dst, r1, err1, r2, err2)
		}
	}
	if _, _, err := slow.linkInfo(1 << 30); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("netlink linkInfo(missing) = %v, want ENODEV", err)
	}
	if _, _, err := fast.linkInfo(1 << 30); !errors.Is(err, syscall.ENODEV) {
		t.Errorf("ioctl linkInfo(missing) = %v, want ENODEV", err)
	}
}
