package netlink

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestNamespace builds a controlled network in a private namespace (a veth
// pair with IPv4 and IPv6 addresses, gateway/MTU/reject routes, no default
// route at first) and checks Links, Addrs, RouteGet and the Monitor against
// it and against ip(8).
func TestNamespace(t *testing.T) {
	ns := newNetns(t)
	if ns == nil {
		return // ran in a child process
	}
	var c *Conn
	var m *Monitor
	var err error
	ns.do(func() { c, err = Dial() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ns.do(func() {
		m, err = Subscribe(context.Background(), GroupLink, GroupIPv4Addr, GroupIPv6Addr, GroupIPv4Route)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.setLinkUp(1, true))
	// No duplicate address detection: link-local addresses come up final
	// instead of flipping from tentative while ip(8) and we take snapshots.
	ns.do(func() {
		for _, conf := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/accept_dad", []byte("0"), 0); err != nil {
				t.Logf("disabling DAD: %v", err)
			}
		}
	})
	must(c.addVeth("cmrt0", "cmrt1", 1300))
	l0, err := c.LinkByName("cmrt0")
	must(err)
	l1, err := c.LinkByName("cmrt1")
	must(err)
	must(c.setLinkUp(l0.Index, true))
	must(c.setLinkUp(l1.Index, true))
	v4 := netip.MustParsePrefix("10.77.0.1/24")
	v6 := netip.MustParsePrefix("2001:db8:77::1/64")
	must(c.changeAddr(true, l0.Index, v4, 0))
	must(c.changeAddr(true, l0.Index, v6, unix.IFA_F_NODAD))
	settle(t, c, l0.Index, l1.Index)

	t.Run("Links", func(t *testing.T) {
		var links []Link
		var err error
		ns.do(func() { links, err = Links() })
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]Link{}
		for _, l := range links {
			byName[l.Name] = l
		}
		got, ok := byName["cmrt0"]
		if !ok {
			t.Fatalf("Links() = %+v, lacks cmrt0", links)
		}
		if got.Index != l0.Index || got.MTU != 1300 || !got.Flags.Up() || got.Flags.Loopback() ||
			got.Type != unix.ARPHRD_ETHER || len(got.HardwareAddr) != 6 {
			t.Errorf("cmrt0 = %+v, want index %d, MTU 1300, UP, Ethernet with a 6-byte address", got, l0.Index)
		}
		if lo := byName["lo"]; lo.Index != 1 || !lo.Flags.Loopback() || !lo.Flags.Up() {
			t.Errorf("lo = %+v, want index 1, LOOPBACK|UP", lo)
		}
		if byIdx, err := c.LinkByIndex(l0.Index); err != nil || byIdx.Name != "cmrt0" || byIdx.MTU != 1300 {
			t.Errorf("LinkByIndex(%d) = %+v, %v", l0.Index, byIdx, err)
		}
		if _, err := c.LinkByName("nonexistent0"); !errors.Is(err, syscall.ENODEV) {
			t.Errorf("LinkByName(nonexistent0) error = %v, want ENODEV", err)
		}
		ns.do(func() { compareLinksWithIP(t, links) })
	})

	t.Run("Addrs", func(t *testing.T) {
		addrs, err := c.Addrs()
		if err != nil {
			t.Fatal(err)
		}
		find := func(p netip.Prefix) (Addr, bool) {
			for _, a := range addrs {
				if a.Prefix == p {
					return a, true
				}
			}
			return Addr{}, false
		}
		if a, ok := find(v4); !ok || a.Index != l0.Index || a.IfName != "cmrt0" || a.Scope != unix.RT_SCOPE_UNIVERSE ||
			!a.Flags.Permanent() || a.Label != "cmrt0" {
			t.Errorf("IPv4 address %v: %+v (found %v), want on cmrt0, global, permanent, label cmrt0", v4, a, ok)
		}
		if a, ok := find(v6); !ok || a.Index != l0.Index || a.IfName != "cmrt0" ||
			a.Flags&(unix.IFA_F_NODAD|unix.IFA_F_PERMANENT) != unix.IFA_F_NODAD|unix.IFA_F_PERMANENT || a.Flags.Tentative() {
			t.Errorf("IPv6 address %v: %+v (found %v), want on cmrt0, nodad|permanent, not tentative", v6, a, ok)
		}
		if a, ok := find(netip.MustParsePrefix("127.0.0.1/8")); !ok || a.Index != 1 || a.Scope != unix.RT_SCOPE_HOST {
			t.Errorf("127.0.0.1/8: %+v (found %v), want on lo, scope host", a, ok)
		}
		ns.do(func() { compareAddrsWithIP(t, addrs) })
	})

	t.Run("RouteGet", func(t *testing.T) {
		type tc struct {
			dst, src string
			oif      int
			wantErr  error // errors.Is target; nil = success
			anyErr   bool  // some error, errno not asserted (compared with ip instead)
			typ      RouteType
			ifname   string
			local    string // LocalName for local routes
			srcWant  string
			gw       string
			mtu      int
			table    int
			ipOif    string // oif name for the ip(8) cross-check
		}
		check := func(t *testing.T, x tc) {
			t.Helper()
			dst := netip.MustParseAddr(x.dst)
			var src netip.Addr
			if x.src != "" {
				src = netip.MustParseAddr(x.src)
			}
			r, err := c.RouteGet(dst, src, x.oif)
			switch {
			case x.anyErr:
				if err == nil {
					t.Errorf("RouteGet(%v from %v) = %+v, want an error", dst, src, r)
				}
			case x.wantErr != nil:
				if !errors.Is(err, x.wantErr) {
					t.Errorf("RouteGet(%v) error = %v, want %v", dst, err, x.wantErr)
				}
			case err != nil:
				t.Errorf("RouteGet(%v): %v", dst, err)
			default:
				if r.Type != x.typ || r.IfName != x.ifname || (x.srcWant != "*" && addrString(r.Src) != x.srcWant) ||
					addrString(r.Gateway) != x.gw || r.MTU != x.mtu || r.LocalName != x.local ||
					(x.table != 0 && r.Table != x.table) || r.DstLen != dst.Unmap().BitLen() {
					t.Errorf("RouteGet(%v from %v oif %d) = %+v\nwant type %v dev %q local %q src %q gw %q mtu %d table %d",
						dst, src, x.oif, r, x.typ, x.ifname, x.local, x.srcWant, x.gw, x.mtu, x.table)
				}
				if want := dst.Unmap(); addrString(r.Dst) != addrString(want) || (want.Zone() == "" && r.Dst.Zone() != "") {
					t.Errorf("RouteGet(%v).Dst = %v", dst, r.Dst)
				}
			}
			if x.oif == 0 {
				checkLookup(t, c, dst, src, r, err)
			}
			if (x.oif == 0 && dst.Zone() == "" || x.ipOif != "") && !errors.Is(x.wantErr, syscall.EINVAL) {
				ns.do(func() { compareRouteWithIP(t, r, err, dst, src, x.ipOif) })
			}
		}
		// No default route yet: off-link destinations are unreachable.
		for _, x := range []tc{
			{dst: "192.0.2.99", wantErr: syscall.ENETUNREACH},
			{dst: "2001:db8:99::1", wantErr: syscall.ENETUNREACH},
			{dst: "8.8.8.8", wantErr: syscall.ENETUNREACH},
		} {
			check(t, x)
		}
		// The package-level function uses the calling thread's namespace.
		var r Route
		ns.do(func() { r, err = RouteGet(netip.MustParseAddr("10.77.0.5"), netip.Addr{}, 0) })
		if err != nil || r.OIF != l0.Index || r.IfName != "cmrt0" {
			t.Errorf("RouteGet(10.77.0.5) in the namespace = %+v, %v; want dev cmrt0", r, err)
		}

		// No route yet: unbound, none; bound to cmrt0, on its link.
		if _, err := c.RouteLookup(netip.MustParseAddr("198.51.100.7"), netip.Addr{}); !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("RouteLookup(198.51.100.7) with no route: %v, want ENETUNREACH", err)
		}
		if r, err := c.RouteLookupOIF(netip.MustParseAddr("198.51.100.7"), netip.Addr{}, l0.Index); err != nil ||
			r.OIF != l0.Index || r.Gateway.IsValid() || r.Src != netip.MustParseAddr("10.77.0.1") {
			t.Errorf("RouteLookupOIF(198.51.100.7, cmrt0) with no route = %+v, %v; want on cmrt0's link from 10.77.0.1", r, err)
		}
		must(c.addRoute(RouteUnicast, netip.MustParsePrefix("198.51.100.0/24"), netip.MustParseAddr("10.77.0.254"), l0.Index, 1200))
		must(c.addRoute(RouteUnicast, netip.MustParsePrefix("0.0.0.0/0"), netip.MustParseAddr("10.77.0.254"), l0.Index, 0))
		must(c.addRoute(RouteUnicast, netip.MustParsePrefix("2001:db8:100::/48"), netip.MustParseAddr("2001:db8:77::fe"), l0.Index, 1280))
		for _, rt := range []struct {
			typ RouteType
			dst string
		}{
			{RouteUnreachable, "203.0.113.0/26"}, {RouteProhibit, "203.0.113.64/26"}, {RouteBlackhole, "203.0.113.128/26"},
			{RouteUnreachable, "2001:db8:dead::/48"}, {RouteProhibit, "2001:db8:beef::/48"}, {RouteBlackhole, "2001:db8:cafe::/48"},
		} {
			must(c.addRoute(rt.typ, netip.MustParsePrefix(rt.dst), netip.Addr{}, 0, 0))
		}
		// The lean lookup keeps a route's own MTU metric.
		if r, err := c.RouteLookup(netip.MustParseAddr("198.51.100.7"), netip.Addr{}); err != nil || r.MTU != 1200 {
			t.Errorf("RouteLookup(198.51.100.7) = %+v, %v; want the route's MTU 1200", r, err)
		}
		idx0 := strconv.Itoa(l0.Index)
		for _, x := range []tc{
			// On-link, IPv4 and IPv6; MTU from the interface.
			{dst: "10.77.0.5", typ: RouteUnicast, ifname: "cmrt0", srcWant: "10.77.0.1", mtu: 1300, table: unix.RT_TABLE_MAIN},
			{dst: "::ffff:10.77.0.5", typ: RouteUnicast, ifname: "cmrt0", srcWant: "10.77.0.1", mtu: 1300},
			{dst: "10.77.0.5", src: "10.77.0.1", typ: RouteUnicast, ifname: "cmrt0", srcWant: "10.77.0.1", mtu: 1300},
			{dst: "10.77.0.5", oif: l0.Index, typ: RouteUnicast, ifname: "cmrt0", srcWant: "10.77.0.1", mtu: 1300, ipOif: "cmrt0"},
			{dst: "10.77.0.255", typ: RouteBroadcast, ifname: "cmrt0", srcWant: "10.77.0.1", mtu: 1300},
			{dst: "2001:db8:77::5", typ: RouteUnicast, ifname: "cmrt0", srcWant: "2001:db8:77::1", mtu: 1300, table: unix.RT_TABLE_MAIN},
			// Link-local with a zone (by name and by number) selects the interface.
			// (The source depends on whether DAD finished; ip(8) cross-checks it.)
			{dst: "fe80::1%cmrt0", typ: RouteUnicast, ifname: "cmrt0", mtu: 1300, srcWant: "*", ipOif: "cmrt0"},
			{dst: "fe80::1%" + idx0, typ: RouteUnicast, ifname: "cmrt0", mtu: 1300, srcWant: "*", ipOif: "cmrt0"},
			{dst: "fe80::1%cmrt0", oif: 1, wantErr: syscall.EINVAL},
			{dst: "fe80::1%nonexistent0", wantErr: syscall.ENODEV},
			// Gateway routes: RTAX_MTU from the route, else the interface MTU.
			{dst: "198.51.100.7", typ: RouteUnicast, ifname: "cmrt0", srcWant: "10.77.0.1", gw: "10.77.0.254", mtu: 1200},
			{dst: "203.0.113.200", typ: RouteUnicast, ifname: "cmrt0", srcWant: "10.77.0.1", gw: "10.77.0.254", mtu: 1300},
			{dst: "2001:db8:100::9", typ: RouteUnicast, ifname: "cmrt0", srcWant: "2001:db8:77::1", gw: "2001:db8:77::fe", mtu: 1280},
			// Local destinations: OIF is lo as ip shows; LocalName is the carrier.
			{dst: "127.0.0.1", typ: RouteLocal, ifname: "lo", local: "lo", srcWant: "127.0.0.1", mtu: 65536},
			{dst: "::1", typ: RouteLocal, ifname: "lo", local: "lo", srcWant: "::1", mtu: 65536, table: unix.RT_TABLE_LOCAL},
			{dst: "10.77.0.1", typ: RouteLocal, ifname: "lo", local: "cmrt0", srcWant: "10.77.0.1", mtu: 65536},
			{dst: "2001:db8:77::1", typ: RouteLocal, ifname: "lo", local: "cmrt0", srcWant: "2001:db8:77::1", mtu: 65536},
			// Reject routes.
			{dst: "203.0.113.1", wantErr: syscall.EHOSTUNREACH},
			{dst: "203.0.113.65", wantErr: syscall.EACCES},
			{dst: "203.0.113.129", wantErr: syscall.EINVAL},
			{dst: "2001:db8:dead::1", wantErr: syscall.EHOSTUNREACH},
			{dst: "2001:db8:beef::1", wantErr: syscall.EACCES},
			{dst: "2001:db8:cafe::1", wantErr: syscall.EINVAL},
			// A source that is not a local address.
			{dst: "10.77.0.5", src: "10.99.0.1", anyErr: true},
			// Invalid arguments.
			{dst: "10.77.0.5", src: "2001:db8:77::1", wantErr: syscall.EINVAL},
		} {
			check(t, x)
		}
	})

	t.Run("NeighGet", func(t *testing.T) {
		perm := netip.MustParseAddr("10.77.0.9")
		var out []byte
		ns.do(func() {
			out, err = exec.Command("ip", "neigh", "replace", perm.String(), "lladdr", "02:00:00:00:00:09",
				"dev", "cmrt0", "nud", "permanent").CombinedOutput()
		})
		if err != nil {
			t.Skipf("ip neigh replace: %v %s", err, out)
		}
		n, err := c.NeighGet(l0.Index, perm)
		if err != nil || n.Index != l0.Index || n.Addr != perm || n.State != unix.NUD_PERMANENT || !n.State.Valid() ||
			n.HardwareAddr.String() != "02:00:00:00:00:09" || n.State.String() != "permanent" {
			t.Errorf("NeighGet(%v) = %+v (%s), %v; want permanent 02:00:00:00:00:09 on cmrt0", perm, n, n.State, err)
		}
		if _, err := c.NeighGet(l0.Index, netip.MustParseAddr("10.77.0.10")); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("NeighGet of an address never used: %v, want ENOENT", err)
		}
		for _, bad := range []struct {
			index int
			addr  netip.Addr
		}{{0, perm}, {l0.Index, netip.Addr{}}} {
			if _, err := c.NeighGet(bad.index, bad.addr); !errors.Is(err, syscall.EINVAL) {
				t.Errorf("NeighGet(%d, %v): %v, want EINVAL", bad.index, bad.addr, err)
			}
		}
	})

	t.Run("Monitor", func(t *testing.T) {
		// Everything done so far is queued on the monitor.
		seen := map[string]bool{}
		var buf [8]Change
		for {
			n, err := m.Read(buf[:])
			if errors.Is(err, syscall.EAGAIN) {
				if n != 0 {
					t.Fatalf("Read returned n=%d with EAGAIN", n)
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, ch := range buf[:n] {
				switch ch.Kind {
				case LinkUpdated:
					seen["link "+ch.Link.Name] = true
				case AddrAdded:
					seen["addr "+ch.Addr.Prefix.String()+" "+ch.Addr.IfName] = true
				case RouteAdded:
					r := ch.Route
					seen["route "+netip.PrefixFrom(r.Dst, r.DstLen).String()+" via "+addrString(r.Gateway)+" dev "+r.IfName+" mtu "+strconv.Itoa(r.MTU)] = true
				}
			}
		}
		for _, want := range []string{
			"link cmrt0", "link cmrt1", "addr 10.77.0.1/24 cmrt0", "addr 2001:db8:77::1/64 cmrt0",
			"route 198.51.100.0/24 via 10.77.0.254 dev cmrt0 mtu 1200",
		} {
			if !seen[want] {
				t.Errorf("monitor did not report %q; saw %v", want, seen)
			}
		}

		// Blocking helper: RTM_DELADDR for the IPv4 address.
		must(c.changeAddr(false, l0.Index, v4, 0))
		waitFor(t, m, func(ch Change) bool {
			return ch.Kind == AddrRemoved && ch.Addr.Prefix == v4 && ch.Addr.Index == l0.Index && ch.Addr.IfName == "cmrt0"
		}, "AddrRemoved 10.77.0.1/24 on cmrt0")

		// Poll-loop usage: wait for readability of Fd, then Read until EAGAIN.
		must(c.changeAddr(false, l0.Index, v6, 0))
		found := false
		deadline := time.Now().Add(5 * time.Second)
		for !found && time.Now().Before(deadline) {
			fds := []unix.PollFd{{Fd: int32(m.Fd()), Events: unix.POLLIN}}
			if _, err := unix.Poll(fds, 1000); err != nil && err != unix.EINTR {
				t.Fatal(err)
			}
			for {
				n, err := m.Read(buf[:])
				if errors.Is(err, syscall.EAGAIN) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, ch := range buf[:n] {
					found = found || ch.Kind == AddrRemoved && ch.Addr.Prefix == v6 && ch.Addr.IfName == "cmrt0"
				}
			}
		}
		if !found {
			t.Errorf("poll/Read loop did not report AddrRemoved %v", v6)
		}

		// Deleting the veth removes both ends.
		must(c.delLink(l0.Index))
		waitFor(t, m, func(ch Change) bool {
			return ch.Kind == LinkRemoved && ch.Link.Index == l0.Index && ch.Link.Name == "cmrt0"
		}, "LinkRemoved cmrt0")
		if _, err := c.RouteGet(netip.MustParseAddr("10.77.0.5"), netip.Addr{}, 0); !errors.Is(err, syscall.ENETUNREACH) {
			t.Errorf("RouteGet after deleting the link: %v, want ENETUNREACH", err)
		}

		must(m.Close())
		must(m.Close())
		if _, err := m.Read(buf[:]); !errors.Is(err, ErrClosed) {
			t.Errorf("Read after Close: %v, want ErrClosed", err)
		}
		if _, err := m.Next(context.Background()); !errors.Is(err, ErrClosed) {
			t.Errorf("Next after Close: %v, want ErrClosed", err)
		}
		if m.Fd() != -1 {
			t.Errorf("Fd after Close = %d, want -1", m.Fd())
		}
	})
}

// settle waits until the veth pair is running and both ends carry a
// final (non-tentative) IPv6 link-local address, so that snapshots taken by
// the package and by ip(8) moments apart agree.
func settle(t *testing.T, c *Conn, indexes ...int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ready := true
		for _, i := range indexes {
			l, err := c.LinkByIndex(i)
			if err != nil {
				t.Fatal(err)
			}
			ready = ready && l.Flags.Running() && l.OperState.String() == "UP"
		}
		addrs, err := c.Addrs()
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range indexes {
			ok := false
			for _, a := range addrs {
				ok = ok || a.Index == i && a.Prefix.Addr().IsLinkLocalUnicast() && !a.Flags.Tentative()
			}
			ready = ready && ok
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("interfaces %v did not come up with link-local addresses: %+v", indexes, addrs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitFor reads changes with Next until match accepts one (5 s timeout).
func waitFor(t *testing.T, m *Monitor, match func(Change) bool, what string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ch, err := m.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(ch) {
			return
		}
	}
}

// TestMonitorOverrun shrinks the monitor's receive buffer, provokes more
// notifications than fit, and checks that Read reports ErrOverrun (also
// matching ENOBUFS) and then keeps working.
func TestMonitorOverrun(t *testing.T) {
	ns := newNetns(t)
	if ns == nil {
		return
	}
	var c *Conn
	var m *Monitor
	var err error
	ns.do(func() {
		if c, err = Dial(); err == nil {
			m, err = Subscribe(context.Background(), GroupIPv4Addr)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	defer m.Close()
	if err := c.setLinkUp(1, true); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(m.Fd(), unix.SOL_SOCKET, unix.SO_RCVBUF, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 200, byte(i / 250), byte(1 + i%250)}), 32)
		if err := c.changeAddr(true, 1, p, 0); err != nil {
			t.Fatal(err)
		}
		if err := c.changeAddr(false, 1, p, 0); err != nil {
			t.Fatal(err)
		}
	}
	var buf [4]Change
	overrun := false
	for range 1000 {
		n, err := m.Read(buf[:])
		if errors.Is(err, syscall.EAGAIN) {
			break
		}
		if err != nil {
			if !errors.Is(err, ErrOverrun) || !errors.Is(err, syscall.ENOBUFS) || n != 0 {
				t.Fatalf("Read: n=%d err=%v, want ErrOverrun matching ENOBUFS", n, err)
			}
			overrun = true
		}
	}
	if !overrun {
		t.Fatal("400 notifications into a minimal receive buffer did not report ErrOverrun")
	}
	// After the overrun the monitor keeps delivering.
	p := netip.MustParsePrefix("10.201.0.1/32")
	if err := c.changeAddr(true, 1, p, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, m, func(ch Change) bool { return ch.Kind == AddrAdded && ch.Addr.Prefix == p && ch.Addr.IfName == "lo" },
		"AddrAdded after the overrun")
}

// checkLookup compares RouteLookup with what RouteGet answered for the same
// destination: the same outcome and the same route, without what only
// RouteGet fills (interface names, zones, the interface MTU).
func checkLookup(t *testing.T, c *Conn, dst, src netip.Addr, want Route, wantErr error) {
	t.Helper()
	got, err := c.RouteLookup(dst, src)
	if (err == nil) != (wantErr == nil) || (wantErr != nil && !sameErrno(err, wantErr)) {
		t.Errorf("RouteLookup(%v from %v) error = %v; RouteGet said %v", dst, src, err, wantErr)
		return
	}
	if err != nil {
		return
	}
	if got.Type != want.Type || got.OIF != want.OIF || got.Table != want.Table || got.DstLen != want.DstLen ||
		got.Src != want.Src.WithZone("") || got.Gateway != want.Gateway.WithZone("") || got.Dst != want.Dst.WithZone("") ||
		got.IfName != "" || got.LocalName != "" || (got.MTU != 0 && got.MTU != want.MTU) {
		t.Errorf("RouteLookup(%v from %v) = %+v\nRouteGet gave %+v", dst, src, got, want)
	}
}

// sameErrno reports whether a and b carry the same errno (or both none).
func sameErrno(a, b error) bool {
	var ea, eb syscall.Errno
	return errors.As(a, &ea) == errors.As(b, &eb) && ea == eb
}

// TestMonitorQuiet checks what a cache built on Monitor.Quiet relies on: a
// change made before Quiet is called is either still queued (not quiet)
// or already read (a later epoch), for route changes, rule changes (which
// decode into no Change) and address changes alike.
func TestMonitorQuiet(t *testing.T) {
	ns := newNetns(t)
	if ns == nil {
		return
	}
	var c *Conn
	var m *Monitor
	var err error
	ns.do(func() {
		if c, err = Dial(); err == nil {
			m, err = Subscribe(context.Background(), GroupLink, GroupIPv4Addr, GroupIPv4Route, GroupIPv4Rule)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.setLinkUp(1, true); err != nil {
		t.Fatal(err)
	}
	drain := func() {
		t.Helper()
		var buf [8]Change
		for range 1000 {
			if _, err := m.Read(buf[:]); errors.Is(err, syscall.EAGAIN) {
				return
			} else if err != nil {
				t.Fatal(err)
			}
		}
		t.Fatal("the monitor never ran dry")
	}
	drain()
	changes := []struct {
		name string
		do   func() error
	}{
		{"route added", func() error {
			return c.addRoute(RouteUnreachable, netip.MustParsePrefix("10.202.0.0/24"), netip.Addr{}, 0, 0)
		}},
		{"rule added", func() error {
			return c.ack("RTM_NEWRULE", func(seq uint32) {
				c.req.begin(unix.RTM_NEWRULE, unix.NLM_F_ACK|unix.NLM_F_CREATE|unix.NLM_F_EXCL, seq)
				c.req.rtmsg(unix.RtMsg{Family: unix.AF_INET, Table: unix.RT_TABLE_MAIN, Type: unix.RTN_UNICAST})
				c.req.attrU32(unix.FRA_PRIORITY, 100)
			})
		}},
		{"address added", func() error { return c.changeAddr(true, 1, netip.MustParsePrefix("10.203.0.1/32"), 0) }},
	}
	for _, ch := range changes {
		e0, quiet := m.Quiet()
		if !quiet || e0%2 != 0 {
			t.Fatalf("%s: before the change: Quiet = %d, %v, want an even epoch, true", ch.name, e0, quiet)
		}
		if err := ch.do(); err != nil {
			t.Fatalf("%s: %v", ch.name, err)
		}
		if e, quiet := m.Quiet(); quiet {
			t.Fatalf("%s: Quiet = %d, true with the notification unread", ch.name, e)
		}
		drain()
		e1, quiet := m.Quiet()
		if !quiet || e1 == e0 {
			t.Fatalf("%s: after reading it: Quiet = %d, %v, want an epoch other than %d, true", ch.name, e1, quiet, e0)
		}
	}
	m.Close()
	if _, quiet := m.Quiet(); quiet {
		t.Fatal("a closed Monitor is quiet")
	}
}
