package soft

import (
	"errors"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSockNames: localAddr, peerAddr and accept4, which make their system
// calls themselves, read the same addresses as the x/sys/unix wrappers,
// for IPv4, IPv6 and IPv4-mapped sockets.
func TestSockNames(t *testing.T) {
	cases := []struct {
		name   string
		fam    int
		listen netip.AddrPort
	}{
		{"ipv4", unix.AF_INET, netip.MustParseAddrPort("127.0.0.1:0")},
		{"ipv6", unix.AF_INET6, netip.MustParseAddrPort("[::1]:0")},
		{"ipv4-mapped", unix.AF_INET6, netip.AddrPortFrom(netip.AddrFrom16(netip.MustParseAddr("127.0.0.1").As16()), 0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lfd, err := unix.Socket(tc.fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(lfd)
			sa := sockaddr(tc.listen)
			if in6, ok := sa.(*unix.SockaddrInet4); ok && tc.fam == unix.AF_INET6 {
				sa = &unix.SockaddrInet6{Addr: netip.AddrFrom4(in6.Addr).As16()}
			}
			if err := unix.Bind(lfd, sa); err != nil {
				t.Skipf("bind %s: %v", tc.listen, err)
			}
			if err := unix.Listen(lfd, 1); err != nil {
				t.Fatal(err)
			}
			// No allocation (the wrappers allocate the address, and ask
			// SO_PROTOCOL of every AF_INET socket besides).
			if n := testing.AllocsPerRun(50, func() { _ = localAddr(lfd) }); n != 0 {
				t.Errorf("localAddr: %.0f allocations, want 0", n)
			}
			lsa, _ := unix.Getsockname(lfd)
			if got, want := localAddr(lfd), addrPortOf(lsa); got != want || !got.IsValid() {
				t.Fatalf("listener localAddr %s, want %s", got, want)
			}
			cfd, err := unix.Socket(tc.fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(cfd)
			if err := unix.Connect(cfd, lsa); err != nil {
				t.Fatal(err)
			}
			afd, peer, err := accept4(lfd, unix.SOCK_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(afd)
			csa, _ := unix.Getsockname(cfd)
			psa, _ := unix.Getpeername(cfd)
			for _, c := range []struct {
				what      string
				got, want netip.AddrPort
			}{
				{"accept4's peer", peer, addrPortOf(csa)},
				{"client localAddr", localAddr(cfd), addrPortOf(csa)},
				{"client peerAddr", peerAddr(cfd), addrPortOf(psa)},
				{"accepted peerAddr", peerAddr(afd), addrPortOf(csa)},
				{"accepted localAddr", localAddr(afd), addrPortOf(psa)},
			} {
				if c.got != c.want || !c.got.IsValid() || c.got.Port() == 0 {
					t.Errorf("%s: %s, want %s", c.what, c.got, c.want)
				}
			}
		})
	}
	if got := localAddr(-1); got.IsValid() {
		t.Errorf("localAddr of a bad descriptor: %s", got)
	}
	if _, _, err := accept4(-1, 0); err != unix.EBADF {
		t.Errorf("accept4 of a bad descriptor: %v, want EBADF", err)
	}
}

// TestBindConnectNoAlloc: bind and connect, made for every connection
// (resolve_addr's bind, Connect's connect), take the address in the
// kernel's form from the stack; x/sys/unix's Bind and Connect take an
// allocated unix.Sockaddr (one allocation each per connection).
func TestBindConnectNoAlloc(t *testing.T) {
	for _, tc := range []struct {
		name string
		fam  int
		addr netip.Addr
	}{
		{"ipv4", unix.AF_INET, netip.MustParseAddr("127.0.0.1")},
		{"ipv6", unix.AF_INET6, netip.IPv6Loopback()},
		{"ipv6, numeric zone", unix.AF_INET6, netip.IPv6Loopback().WithZone("1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lfd, err := unix.Socket(tc.fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(lfd)
			if err := bindTo(lfd, netip.AddrPortFrom(tc.addr, 0)); err != nil {
				t.Skipf("bind %s: %v", tc.addr, err)
			}
			if err := unix.Listen(lfd, 64); err != nil {
				t.Fatal(err)
			}
			dst := localAddr(lfd)
			if dst.Addr() != tc.addr.WithZone("") || dst.Port() == 0 {
				t.Fatalf("bound to %s, want %s", dst, tc.addr)
			}
			var local, peer netip.AddrPort
			var cerr error
			allocs := testing.AllocsPerRun(20, func() {
				fd, err := unix.Socket(tc.fam, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					cerr = err
					return
				}
				defer unix.Close(fd)
				if err := bindTo(fd, netip.AddrPortFrom(tc.addr, 0)); err != nil {
					cerr = err
					return
				}
				if err := connectTo(fd, dst); err != nil {
					cerr = err
					return
				}
				local, peer = localAddr(fd), peerAddr(fd)
			})
			if cerr != nil {
				t.Fatal(cerr)
			}
			if allocs != 0 {
				t.Errorf("bind and connect: %.0f allocations, want 0", allocs)
			}
			if peer != dst || local.Addr() != dst.Addr() || local.Port() == 0 {
				t.Errorf("connected %s -> %s, want %s -> %s", local, peer, tc.addr, dst)
			}
			if err := connectTo(lfd, dst); !errors.Is(err, unix.EISCONN) && !errors.Is(err, unix.EINVAL) {
				t.Errorf("connect of a listening socket: %v, want an errno", err)
			}
		})
	}
}
