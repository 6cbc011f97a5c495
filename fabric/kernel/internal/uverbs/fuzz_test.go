package uverbs

import "testing"

// The fuzz targets decode arbitrary kernel output (never panicking) and
// check that encode(decode(b)) decodes to the same value.

func FuzzDeviceAttr(f *testing.F) {
	f.Add(deviceAttrImage())
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		var d DeviceAttr
		if err := d.Decode(b); err != nil {
			if len(b) >= DeviceAttrSize {
				t.Fatal(err)
			}
			return
		}
		buf := make([]byte, DeviceAttrSize)
		_ = d.Encode(buf)
		var e DeviceAttr
		if err := e.Decode(buf); err != nil || e != d {
			t.Fatalf("round trip %+v != %+v", e, d)
		}
	})
}

func FuzzPortAttr(f *testing.F) {
	f.Add(make([]byte, PortAttrSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var a PortAttr
		if err := a.Decode(b); err != nil {
			if len(b) >= PortAttrSize {
				t.Fatal(err)
			}
			return
		}
		buf := make([]byte, PortAttrSize)
		_ = a.Encode(buf)
		var c PortAttr
		if err := c.Decode(buf); err != nil || c != a {
			t.Fatalf("round trip %+v != %+v", c, a)
		}
	})
}

func FuzzWC(f *testing.F) {
	f.Add(wcImage())
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var w WC
		if err := w.Decode(b); err != nil {
			if len(b) >= WCSize {
				t.Fatal(err)
			}
			return
		}
		buf := make([]byte, WCSize)
		_ = w.Encode(buf)
		var v WC
		if err := v.Decode(buf); err != nil || v != w {
			t.Fatalf("round trip %+v != %+v", v, w)
		}
	})
}

func FuzzSmallResponses(f *testing.F) {
	f.Add(make([]byte, 32))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		var gc GetContextResp
		_ = gc.Decode(b)
		var mr RegMRResp
		if mr.Decode(b) == nil {
			buf := make([]byte, RegMRRespSize)
			_ = mr.Encode(buf)
			var m RegMRResp
			if m.Decode(buf) != nil || m != mr {
				t.Fatal("reg_mr round trip")
			}
		}
		var cq CreateCQResp
		if cq.Decode(b) == nil {
			buf := make([]byte, CreateCQRespSize)
			_ = cq.Encode(buf)
			var c CreateCQResp
			if c.Decode(buf) != nil || c != cq {
				t.Fatal("create_cq round trip")
			}
		}
		var qp CreateQPResp
		if qp.Decode(b) == nil {
			buf := make([]byte, CreateQPRespSize)
			_ = qp.Encode(buf)
			var q CreateQPResp
			if q.Decode(buf) != nil || q != qp {
				t.Fatal("create_qp round trip")
			}
		}
		_, _ = DecodeUint32Resp(b)
		_, _ = DecodeHeader(b)
	})
}

func FuzzEvents(f *testing.F) {
	f.Add(make([]byte, AsyncEventSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e AsyncEvent
		if e.Decode(b) == nil {
			_ = e.Type.String()
			_ = e.Type.QPEvent()
			buf := make([]byte, AsyncEventSize)
			_ = e.Encode(buf)
			var g AsyncEvent
			if g.Decode(buf) != nil || g != e {
				t.Fatal("async round trip")
			}
		}
		_, _ = DecodeCompEvent(b)
	})
}
