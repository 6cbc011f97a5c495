package ucma

import (
	"testing"
)

// The fuzz targets decode arbitrary bytes (never panicking) and, where an
// encoder exists, check decode(encode(x)) == x for every decoded x. Seeds
// are the hand-built images of the unit tests.

func FuzzEvent(f *testing.F) {
	f.Add(eventConnImage())
	f.Add(eventUDImage())
	f.Add(eventConnImage()[:324])
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var x Event
		if err := x.Decode(b); err != nil {
			if len(b) >= EventRespMinSize {
				t.Fatalf("%d bytes: %v", len(b), err)
			}
			return
		}
		buf := make([]byte, EventRespSize)
		for _, view := range []ParamView{ParamConn, ParamUD, ParamArg} {
			if err := x.Encode(buf, view); err != nil {
				t.Fatal(err)
			}
			var y Event
			if err := y.Decode(buf); err != nil {
				t.Fatal(err)
			}
			if y.UID != x.UID || y.ID != x.ID || y.Event != x.Event || y.Status != x.Status || y.ECE != x.ECE {
				t.Fatalf("view %d: header %+v != %+v", view, y, x)
			}
			switch view {
			case ParamConn:
				if y.Conn != x.Conn {
					t.Fatalf("conn round trip differs")
				}
			case ParamUD:
				if y.UD != x.UD {
					t.Fatalf("ud round trip differs")
				}
			case ParamArg:
				if y.Arg != x.Arg {
					t.Fatalf("arg round trip differs")
				}
			}
		}
	})
}

func FuzzSockaddr(f *testing.F) {
	for _, put := range []func([]byte){sockIn4, sockIn6, sockIn6LL, sockIB} {
		b := make([]byte, 128)
		put(b)
		f.Add(b)
	}
	f.Add([]byte{10, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		x, err := DecodeSockaddr(b)
		if err != nil {
			return
		}
		if !x.IsValid() {
			return
		}
		slot := make([]byte, SockaddrStorageSize)
		n, err := EncodeSockaddr(slot, x)
		if err != nil || n != x.Size() {
			t.Fatalf("encode %v: n %d, %v", x, n, err)
		}
		y, err := DecodeSockaddr(slot)
		if err != nil || y != x {
			t.Fatalf("round trip: %v != %v (%v)", y, x, err)
		}
		if !x.IsIB() {
			in6 := make([]byte, SockaddrIn6Size)
			if _, err := EncodeSockaddr(in6, x); err != nil {
				t.Fatal(err)
			}
			if z, err := DecodeSockaddr(in6); err != nil || z != x {
				t.Fatalf("in6 slot round trip: %v != %v", z, x)
			}
			// The zone string form must map back to the same address.
			if ap := x.AddrPort(); ap.IsValid() && IPAddrScope(ap, x.ScopeID()) != x {
				t.Fatalf("AddrPort %v does not map back", ap)
			}
		}
		_ = x.String()
	})
}

func FuzzQueryAddrResp(f *testing.F) {
	f.Add(queryAddrImage())
	f.Add(queryGIDImage())
	f.Fuzz(func(t *testing.T, b []byte) {
		var x QueryAddrResp
		if err := x.Decode(b); err != nil {
			return
		}
		buf := make([]byte, QueryAddrRespSize)
		if err := x.Encode(buf); err != nil {
			t.Fatal(err)
		}
		var y QueryAddrResp
		if err := y.Decode(buf); err != nil || y != x {
			t.Fatalf("round trip: %+v != %+v (%v)", y, x, err)
		}
	})
}

func FuzzQueryRouteResp(f *testing.F) {
	f.Add(queryRouteImage())
	f.Fuzz(func(t *testing.T, b []byte) {
		var x QueryRouteResp
		if err := x.Decode(b); err != nil {
			return
		}
		buf := make([]byte, QueryRouteRespSize)
		if err := x.Encode(buf); err != nil {
			t.Fatal(err)
		}
		var y QueryRouteResp
		if err := y.Decode(buf); err != nil || y != x {
			t.Fatalf("round trip: %+v != %+v (%v)", y, x, err)
		}
	})
}

func FuzzQueryPath(f *testing.F) {
	img := make([]byte, 8+72)
	h32(img, 0, 1)
	copy(img[8:], pathDataImage())
	f.Add(img)
	f.Add(img[:8])
	f.Fuzz(func(t *testing.T, b []byte) {
		var dst [8]PathData
		num, n, err := DecodeQueryPath(b, dst[:])
		if err != nil {
			return
		}
		if uint64(n) > uint64(num) || n > len(dst) || 8+n*PathDataSize > len(b) {
			t.Fatalf("n %d out of bounds (num %d, len %d)", n, num, len(b))
		}
		buf := make([]byte, 8+n*PathDataSize)
		enc, err := EncodeQueryPath(buf, dst[:n])
		if err != nil {
			t.Fatal(err)
		}
		var back [8]PathData
		num2, n2, err := DecodeQueryPath(enc, back[:])
		if err != nil || num2 != uint32(n) || n2 != n || back != dst {
			t.Fatalf("round trip: num %d n %d err %v", num2, n2, err)
		}
	})
}

func FuzzPathRecords(f *testing.F) {
	both := append(pathRecImage(), pathDataImage()...)
	f.Add(both)
	f.Fuzz(func(t *testing.T, b []byte) {
		var p PathRec
		if p.Decode(b) == nil {
			buf := make([]byte, PathRecSize)
			_ = p.Encode(buf)
			var q PathRec
			if err := q.Decode(buf); err != nil || q != p {
				t.Fatalf("ib_user_path_rec round trip: %+v != %+v", q, p)
			}
		}
		var d PathData
		if d.Decode(b) == nil {
			buf := make([]byte, PathDataSize)
			_ = d.Encode(buf)
			var e PathData
			if err := e.Decode(buf); err != nil || e != d {
				t.Fatalf("ib_path_rec_data round trip: %+v != %+v", e, d)
			}
		}
	})
}

func FuzzParams(f *testing.F) {
	f.Add(qpAttrImage())
	f.Add(eventUDImage()[20:])
	f.Fuzz(func(t *testing.T, b []byte) {
		var q QPAttr
		if q.Decode(b) == nil {
			buf := make([]byte, QPAttrSize)
			_ = q.Encode(buf)
			var r QPAttr
			if err := r.Decode(buf); err != nil || r != q {
				t.Fatalf("qp_attr round trip")
			}
		}
		var c ConnParam
		if c.Decode(b) == nil {
			buf := make([]byte, ConnParamSize)
			_ = c.Encode(buf)
			var d ConnParam
			if err := d.Decode(buf); err != nil || d != c {
				t.Fatalf("conn_param round trip")
			}
		}
		var u UDParam
		if u.Decode(b) == nil {
			buf := make([]byte, UDParamSize)
			_ = u.Encode(buf)
			var v UDParam
			if err := v.Decode(buf); err != nil || v != u {
				t.Fatalf("ud_param round trip")
			}
		}
		var a AHAttr
		if a.Decode(b) == nil {
			buf := make([]byte, AHAttrSize)
			_ = a.Encode(buf)
			var z AHAttr
			if err := z.Decode(buf); err != nil || z != a {
				t.Fatalf("ah_attr round trip")
			}
		}
		if h, err := DecodeHeader(b); err == nil {
			_ = h.Cmd.String()
		}
	})
}
