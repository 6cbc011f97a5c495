package ucma

import (
	"errors"
	"syscall"
	"testing"
)

// queryAddrImage is a QUERY(ADDR) response: IPv4 source, IPv6 destination.
func queryAddrImage() []byte {
	b := make([]byte, 280)
	n64(b, 0, 0x0002c90300012345) // 0 node_guid (network order)
	b[8] = 1                      // 8 port_num; 9 reserved
	n16(b, 10, 0xffff)            // 10 pkey (network order)
	h16(b, 12, 16)                // 12 src_size
	h16(b, 14, 28)                // 14 dst_size
	sockIn4(b[16:144])            // 16 src_addr
	sockIn6(b[144:272])           // 144 dst_addr
	h32(b, 272, 2)                // 272 ibdev_index; 276 reserved
	return b
}

// queryGIDImage is a QUERY(GID) response: both addresses sockaddr_ib.
func queryGIDImage() []byte {
	b := make([]byte, 280)
	n64(b, 0, 0x0002c90300012345)
	b[8] = 2
	n16(b, 10, 0x8001)
	h16(b, 12, 48)
	h16(b, 14, 48)
	sockIB(b[16:144])
	sockIB(b[144:272])
	h32(b, 272, 0xffffffff) // not filled by an old kernel
	return b
}

func TestQueryAddrResp(t *testing.T) {
	var r QueryAddrResp
	if err := r.Decode(queryAddrImage()); err != nil {
		t.Fatal(err)
	}
	want := QueryAddrResp{NodeGUID: 0x0002c90300012345, PortNum: 1, PKey: 0xffff, SrcSize: 16, DstSize: 28,
		Src: mustIP(t, ap4), Dst: mustIP(t, ap6), IBDevIndex: 2}
	if r != want {
		t.Errorf("ADDR:\n got %+v\nwant %+v", r, want)
	}
	out := fill(280)
	if err := want.Encode(out); err != nil {
		t.Fatal(err)
	}
	diff(t, "query addr", out, queryAddrImage())

	if err := r.Decode(queryGIDImage()); err != nil {
		t.Fatal(err)
	}
	wantGID := QueryAddrResp{NodeGUID: 0x0002c90300012345, PortNum: 2, PKey: 0x8001, SrcSize: 48, DstSize: 48,
		Src: IBSockaddr(testIB), Dst: IBSockaddr(testIB), IBDevIndex: InvalidIBDevIndex}
	if r != wantGID {
		t.Errorf("GID:\n got %+v\nwant %+v", r, wantGID)
	}
	if err := wantGID.Encode(out); err != nil {
		t.Fatal(err)
	}
	diff(t, "query gid", out, queryGIDImage())

	if err := r.Decode(queryAddrImage()[:279]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short: %v", err)
	}
	bad := queryAddrImage()
	h16(bad, 144, 1) // dst family AF_UNIX
	if err := r.Decode(bad); !errors.Is(err, ErrAddrFamily) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("bad family: %v", err)
	}
	if r.Src != mustIP(t, ap4) || r.IBDevIndex != 2 || r.Dst.IsValid() {
		t.Errorf("bad family: other fields not filled: %+v", r)
	}
}

// queryRouteImage is a QUERY_ROUTE response with one path and IPv4
// addresses in the sockaddr_in6 slots.
func queryRouteImage() []byte {
	b := make([]byte, 208)
	n64(b, 0, 0x0002c90300012345) // 0 node_guid
	copy(b[8:72], pathRecImage()) // 8 ib_route[0]; 72 ib_route[1] zero
	sockIn4(b[136:164])           // 136 src_addr
	sockIn4(b[164:192])           // 164 dst_addr
	h32(b, 192, 1)                // 192 num_paths
	b[196] = 1                    // 196 port_num; 197 reserved[3]
	h32(b, 200, 0)                // 200 ibdev_index; 204 reserved
	return b
}

func TestQueryRouteResp(t *testing.T) {
	var r QueryRouteResp
	if err := r.Decode(queryRouteImage()); err != nil {
		t.Fatal(err)
	}
	want := QueryRouteResp{NodeGUID: 0x0002c90300012345, Route: [2]PathRec{pathRecWant(), {}},
		Src: mustIP(t, ap4), Dst: mustIP(t, ap4), NumPaths: 1, PortNum: 1}
	if r != want {
		t.Errorf("got  %+v\nwant %+v", r, want)
	}
	out := fill(208)
	if err := want.Encode(out); err != nil {
		t.Fatal(err)
	}
	diff(t, "query route", out, queryRouteImage())
	if err := r.Decode(out[:207]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short: %v", err)
	}
	ib := want
	ib.Dst = IBSockaddr(testIB)
	if err := ib.Encode(out); !errors.Is(err, ErrAddrSize) {
		t.Errorf("AF_IB in route response: %v", err)
	}
}

func TestQueryPath(t *testing.T) {
	second := pathDataWant()
	second.Flags = PathGMP | PathAlternate | PathBidirectional
	second.Record.DLID = 0x99

	// {u32 num_paths, u32 reserved} then 72-byte records.
	img := make([]byte, 8+2*72)
	h32(img, 0, 2)
	copy(img[8:], pathDataImage())
	copy(img[80:], pathDataImage())
	h32(img, 80, uint32(second.Flags)) // second record's flags
	n16(img, 80+8+40, 0x99)            // second record's dlid

	var dst [6]PathData
	num, n, err := DecodeQueryPath(img, dst[:])
	if err != nil || num != 2 || n != 2 || dst[0] != pathDataWant() || dst[1] != second {
		t.Errorf("2 paths: num %d n %d err %v\n%+v", num, n, err, dst[:2])
	}
	if _, n, _ := DecodeQueryPath(img, dst[:1]); n != 1 {
		t.Errorf("dst of 1: n %d", n)
	}
	if num, n, _ := DecodeQueryPath(img[:8+72+71], dst[:]); num != 2 || n != 1 {
		t.Errorf("truncated: num %d n %d, want 2 1", num, n)
	}
	more := append([]byte(nil), img...)
	h32(more, 0, 5)
	if num, n, _ := DecodeQueryPath(more, dst[:]); num != 5 || n != 2 {
		t.Errorf("num_paths 5 with 2 records: num %d n %d", num, n)
	}
	none := append([]byte(nil), img...)
	h32(none, 0, 0)
	if _, n, _ := DecodeQueryPath(none, dst[:]); n != 0 {
		t.Errorf("num_paths 0: n %d", n)
	}
	if _, _, err := DecodeQueryPath(img[:7], dst[:]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short: %v", err)
	}

	out := fill(400)
	enc, err := EncodeQueryPath(out, []PathData{pathDataWant(), second})
	if err != nil {
		t.Fatal(err)
	}
	diff(t, "query path", enc, img)
	if _, err := EncodeQueryPath(out[:151], []PathData{pathDataWant(), second}); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short encode: %v", err)
	}
}

func TestDecodeUint32Resp(t *testing.T) {
	b := make([]byte, 4)
	h32(b, 0, 0xcafe)
	if v, err := DecodeUint32Resp(b); err != nil || v != 0xcafe {
		t.Errorf("= %#x, %v", v, err)
	}
	if _, err := DecodeUint32Resp(b[:3]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short: %v", err)
	}
}
