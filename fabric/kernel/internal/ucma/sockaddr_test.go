package ucma

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"
)

func TestSockaddrEncode(t *testing.T) {
	cases := []struct {
		name string
		addr Addr
		size int
		want func(b []byte)
	}{
		{"in", mustIP(t, ap4), 16, sockIn4},
		{"in6", mustIP(t, ap6), 28, sockIn6},
		{"in6-scope", mustIP(t, ap6ll), 28, sockIn6LL},
		{"ib", IBSockaddr(testIB), 48, sockIB},
		{"none", Addr{}, 0, func([]byte) {}},
	}
	for _, tc := range cases {
		for _, slot := range []int{SockaddrStorageSize, SockaddrIn6Size} {
			if tc.size > slot {
				continue
			}
			want := make([]byte, slot)
			tc.want(want)
			got := fill(slot)
			n, err := EncodeSockaddr(got, tc.addr)
			if err != nil || n != tc.size {
				t.Errorf("%s/%d: n %d err %v, want %d", tc.name, slot, n, err, tc.size)
			}
			if tc.addr.Size() != tc.size {
				t.Errorf("%s: Size %d, want %d", tc.name, tc.addr.Size(), tc.size)
			}
			diff(t, tc.name, got, want)

			back, err := DecodeSockaddr(want)
			if err != nil || back != tc.addr {
				t.Errorf("%s/%d: decode = %v, %v; want %v", tc.name, slot, back, err, tc.addr)
			}
		}
	}
}

func TestSockaddrIBInIPSlot(t *testing.T) {
	slot := fill(SockaddrIn6Size)
	if _, err := EncodeSockaddr(slot, IBSockaddr(testIB)); !errors.Is(err, ErrAddrSize) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("AF_IB into 28 bytes: err %v, want ErrAddrSize", err)
	}
	if slot[0] != 0xA5 {
		t.Errorf("failed encode modified the slot")
	}
}

func TestSockaddrDecodeErrors(t *testing.T) {
	b := make([]byte, 128)
	h16(b, 0, 1) // AF_UNIX
	if _, err := DecodeSockaddr(b); !errors.Is(err, ErrAddrFamily) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("AF_UNIX: err %v, want ErrAddrFamily/EINVAL", err)
	}
	ib := make([]byte, 48)
	sockIB(ib)
	if _, err := DecodeSockaddr(ib[:28]); !errors.Is(err, ErrAddrSize) {
		t.Errorf("AF_IB in 28 bytes: err %v, want ErrAddrSize", err)
	}
	in := make([]byte, 16)
	sockIn4(in)
	if _, err := DecodeSockaddr(in[:15]); !errors.Is(err, ErrAddrSize) {
		t.Errorf("sockaddr_in in 15 bytes: err %v", err)
	}
	if _, err := DecodeSockaddr([]byte{2}); !errors.Is(err, ErrAddrSize) {
		t.Errorf("1 byte: err %v", err)
	}
	if a, err := DecodeSockaddr(make([]byte, 28)); err != nil || a.IsValid() {
		t.Errorf("family 0: %v, %v; want zero Addr", a, err)
	}
}

func TestSockaddrFlowInfoIgnored(t *testing.T) {
	b := make([]byte, 28)
	sockIn6(b)
	n32(b, 4, 0x12345) // sin6_flowinfo
	a, err := DecodeSockaddr(b)
	if err != nil || a != mustIP(t, ap6) {
		t.Errorf("decode with flowinfo: %v, %v", a, err)
	}
}

func TestIPAddr(t *testing.T) {
	a4 := mustIP(t, ap4)
	if a4.Family() != AFInet || a4.AddrPort() != ap4 || a4.Port() != 7471 || a4.IsIB() || !a4.IsValid() {
		t.Errorf("v4: %v fam %d", a4, a4.Family())
	}
	mapped := mustIP(t, netip.MustParseAddrPort("[::ffff:192.0.2.1]:1"))
	if mapped.Family() != AFInet6 {
		t.Errorf("IPv4-mapped IPv6 has family %d, want AF_INET6", mapped.Family())
	}
	ll := mustIP(t, ap6ll)
	if ll.ScopeID() != 3 || ll.AddrPort() != ap6ll || ll.String() != "[fe80::1%3]:4791" {
		t.Errorf("scoped: scope %d, AddrPort %v", ll.ScopeID(), ll.AddrPort())
	}
	if got := IPAddrScope(netip.MustParseAddrPort("[fe80::1%eth9]:4791"), 3); got != ll {
		t.Errorf("IPAddrScope = %v, want %v", got, ll)
	}
	if _, err := IPAddr(netip.AddrPort{}); !errors.Is(err, ErrBadAddr) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("invalid: err %v", err)
	}
	if _, err := IPAddr(netip.MustParseAddrPort("[fe80::1%no-such-if0]:1")); !errors.Is(err, ErrBadAddr) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("unknown zone: err %v", err)
	}
	ifs, _ := net.Interfaces()
	if len(ifs) > 0 {
		named := netip.MustParseAddrPort("[fe80::2%" + ifs[0].Name + "]:9")
		a, err := IPAddr(named)
		if err != nil || a.ScopeID() != uint32(ifs[0].Index) {
			t.Errorf("zone %q: scope %d err %v, want %d", ifs[0].Name, a.ScopeID(), err, ifs[0].Index)
		}
	}
	ib := IBSockaddr(testIB)
	if ib.Family() != AFIB || ib.IB() != testIB || ib.Port() != 7471 || ib.AddrPort().IsValid() || ib.Size() != 48 {
		t.Errorf("ib: %v", ib)
	}
	if (Addr{}).String() != "<none>" || (Addr{}).Size() != 0 {
		t.Errorf("zero Addr: %q", Addr{}.String())
	}
}
