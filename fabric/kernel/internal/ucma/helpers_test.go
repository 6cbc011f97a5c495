package ucma

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"testing"
)

// The tests build every expected image by hand, field by field at the
// offsets of the ABI tables, with encoding/binary directly: host order for
// plain integers (h16/h32/h64), network order for big-endian fields
// (n16/n32/n64). They never call the package's encoders to build an
// expectation.

func h16(b []byte, off int, v uint16) { binary.NativeEndian.PutUint16(b[off:], v) }
func h32(b []byte, off int, v uint32) { binary.NativeEndian.PutUint32(b[off:], v) }
func h64(b []byte, off int, v uint64) { binary.NativeEndian.PutUint64(b[off:], v) }
func n16(b []byte, off int, v uint16) { binary.BigEndian.PutUint16(b[off:], v) }
func n32(b []byte, off int, v uint32) { binary.BigEndian.PutUint32(b[off:], v) }
func n64(b []byte, off int, v uint64) { binary.BigEndian.PutUint64(b[off:], v) }

// hdr writes struct rdma_ucm_cmd_hdr {u32 cmd; u16 in; u16 out} at b[0:8].
func hdr(b []byte, cmd uint32, in, out uint16) {
	h32(b, 0, cmd)
	h16(b, 4, in)
	h16(b, 6, out)
}

// testResp is the response address used in command images.
const testResp = uintptr(0x00007f12_3456_7800)

// fill returns n bytes of 0xA5, so that bytes an encoder forgets to zero
// show up in comparisons.
func fill(n int) []byte { return bytes.Repeat([]byte{0xA5}, n) }

// pattern returns n bytes 1, 2, 3, ... (mod 251), for private data.
func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i)%251 + seed
	}
	return p
}

// diff reports the first differing offset of got and want.
func diff(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if bytes.Equal(got, want) {
		return
	}
	if len(got) != len(want) {
		t.Errorf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			t.Errorf("%s: first difference at byte %d: got %#02x, want %#02x\n got  %s\n want %s",
				what, i, got[i], want[i], window(got, i), window(want, i))
			return
		}
	}
}

func window(b []byte, i int) string {
	lo, hi := max(0, i-8), min(len(b), i+8)
	return fmt.Sprintf("[%d:%d] % x", lo, hi, b[lo:hi])
}

// Test addresses.
var (
	ap4 = netip.MustParseAddrPort("192.0.2.10:7471")
	ap6 = netip.MustParseAddrPort("[2001:db8::42]:7174")
	// ap6ll is link-local with scope id 3 (numeric zone: no lookup).
	ap6ll = netip.MustParseAddrPort("[fe80::1%3]:4791")

	testGID = GID{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x01, 0x23, 0x45}
	testIB  = IBAddr{
		PKey:     0xffff,
		FlowInfo: 0x000abcde,
		GID:      testGID,
		SID:      0x0000_0000_0106_1d2f, // PS_TCP << 16 | 7471
		SIDMask:  0xffff_ffff_ffff_ffff,
		ScopeID:  5,
	}
)

func mustIP(t testing.TB, ap netip.AddrPort) Addr {
	t.Helper()
	a, err := IPAddr(ap)
	if err != nil {
		t.Fatalf("IPAddr(%v): %v", ap, err)
	}
	return a
}

// sockIn4 writes sockaddr_in for ap4 at b[0:16]:
// 0 family (host u16), 2 port (be16), 4 addr[4], 8 zero[8].
func sockIn4(b []byte) {
	h16(b, 0, 2)    // sin_family AF_INET
	n16(b, 2, 7471) // sin_port
	copy(b[4:8], []byte{192, 0, 2, 10})
}

// sockIn6 writes sockaddr_in6 for ap6 at b[0:28]:
// 0 family, 2 port (be16), 4 flowinfo (be32), 8 addr[16], 24 scope_id.
func sockIn6(b []byte) {
	h16(b, 0, 10)   // sin6_family AF_INET6
	n16(b, 2, 7174) // sin6_port
	n32(b, 4, 0)    // sin6_flowinfo
	copy(b[8:24], []byte{0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42})
	h32(b, 24, 0) // sin6_scope_id
}

// sockIn6LL writes sockaddr_in6 for ap6ll (fe80::1, scope id 3).
func sockIn6LL(b []byte) {
	h16(b, 0, 10)
	n16(b, 2, 4791)
	copy(b[8:24], []byte{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	h32(b, 24, 3)
}

// sockIB writes sockaddr_ib for testIB at b[0:48]: 0 family, 2 pkey (be16),
// 4 flowinfo (be32), 8 gid[16], 24 sid (be64), 32 sid_mask (be64),
// 40 scope_id (host u64).
func sockIB(b []byte) {
	h16(b, 0, 27) // sib_family AF_IB
	n16(b, 2, 0xffff)
	n32(b, 4, 0x000abcde)
	copy(b[8:24], testGID[:])
	n64(b, 24, 0x0000_0000_0106_1d2f)
	n64(b, 32, 0xffff_ffff_ffff_ffff)
	h64(b, 40, 5)
}
