package uverbs

import (
	"errors"
	"testing"
)

// Response images, built by hand at the offsets of ib_user_verbs.h.

func deviceAttrImage() []byte {
	b := fill(DeviceAttrSize)
	h64(b, 0, 0x0001000200030004)
	copy(b[8:16], []byte{0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55}) // node_guid, big-endian
	h32(b, 40, 0xFFFFFF)
	h32(b, 44, 0)
	h32(b, 48, 7)
	h32(b, 52, 0x100000)
	h32(b, 56, 0x100000)
	h32(b, 60, 0x2000)
	h32(b, 64, 32)
	h32(b, 72, 0x100000)
	h32(b, 76, 32767)
	h32(b, 80, 0x100000)
	h32(b, 84, 0x100000)
	h32(b, 88, 128)
	h32(b, 100, 128)
	h32(b, 132, 8192)
	h32(b, 144, 0x8000)
	h16(b, 168, 64)
	b[171] = 1
	return b
}

func TestDeviceAttrDecode(t *testing.T) {
	var d DeviceAttr
	if err := d.Decode(deviceAttrImage()); err != nil {
		t.Fatal(err)
	}
	want := DeviceAttr{FWVer: 0x0001000200030004, NodeGUID: 0x021122fffe334455, VendorID: 0xFFFFFF, HWVer: 7,
		MaxQP: 0x100000, MaxQPWR: 0x100000, DeviceCapFlags: 0x2000, MaxSGE: 32, MaxCQ: 0x100000, MaxCQE: 32767,
		MaxMR: 0x100000, MaxPD: 0x100000, MaxQPRdAtom: 128, MaxQPInitRdAtom: 128, MaxMcastGrp: 8192,
		MaxAH: 0x8000, MaxPKeys: 64, PhysPortCnt: 1}
	if d != want {
		t.Fatalf("got %+v\nwant %+v", d, want)
	}
	b := make([]byte, DeviceAttrSize)
	if err := want.Encode(b); err != nil {
		t.Fatal(err)
	}
	var e DeviceAttr
	if err := e.Decode(b); err != nil || e != want {
		t.Fatalf("round trip %+v %v", e, err)
	}
	if err := d.Decode(b[:DeviceAttrSize-1]); !errors.Is(err, ErrShortBuffer) {
		t.Fatalf("short: %v", err)
	}
}

func TestPortAttrDecode(t *testing.T) {
	b := fill(PortAttrSize)
	h32(b, 0, 0x04010000)
	h32(b, 4, 0x800000)
	h32(b, 16, 1024)
	h16(b, 20, 64)
	h16(b, 22, 0)
	b[26], b[27], b[28] = PortActive, 5, 3
	b[36], b[37] = 5, LinkLayerEthernet
	var a PortAttr
	if err := a.Decode(b); err != nil {
		t.Fatal(err)
	}
	want := PortAttr{PortCapFlags: 0x04010000, MaxMsgSz: 0x800000, GIDTblLen: 1024, PKeyTblLen: 64,
		State: PortActive, MaxMTU: 5, ActiveMTU: 3, PhysState: 5, LinkLayer: LinkLayerEthernet}
	if a != want {
		t.Fatalf("got %+v\nwant %+v", a, want)
	}
	c := make([]byte, PortAttrSize)
	_ = want.Encode(c)
	var r PortAttr
	if err := r.Decode(c); err != nil || r != want {
		t.Fatalf("round trip %+v %v", r, err)
	}
}

func TestSmallResponses(t *testing.T) {
	b := fill(64)
	h32(b, 0, 11)
	h32(b, 4, 0x1234)
	h32(b, 8, 0x5678)
	h32(b, 12, 4)
	h32(b, 16, 2)
	h32(b, 20, 3)
	h32(b, 24, 416)
	var gc GetContextResp
	if err := gc.Decode(b); err != nil || gc.AsyncFD != 11 || gc.NumCompVectors != 0x1234 {
		t.Fatalf("get_context %+v %v", gc, err)
	}
	var mr RegMRResp
	if err := mr.Decode(b); err != nil || mr != (RegMRResp{Handle: 11, LKey: 0x1234, RKey: 0x5678}) {
		t.Fatalf("reg_mr %+v %v", mr, err)
	}
	var cq CreateCQResp
	if err := cq.Decode(b); err != nil || cq != (CreateCQResp{Handle: 11, CQE: 0x1234}) {
		t.Fatalf("create_cq %+v %v", cq, err)
	}
	var qp CreateQPResp
	if err := qp.Decode(b); err != nil || qp != (CreateQPResp{Handle: 11, QPN: 0x1234, MaxSendWR: 0x5678,
		MaxRecvWR: 4, MaxSendSGE: 2, MaxRecvSGE: 3, MaxInline: 416}) {
		t.Fatalf("create_qp %+v %v", qp, err)
	}
	if v, err := DecodeUint32Resp(b); err != nil || v != 11 {
		t.Fatalf("u32 %d %v", v, err)
	}
	for name, dec := range map[string]func([]byte) error{
		"get_context": gc.Decode, "reg_mr": mr.Decode, "create_cq": cq.Decode, "create_qp": qp.Decode,
		"u32": func(b []byte) error { _, err := DecodeUint32Resp(b); return err },
	} {
		if err := dec(b[:3]); !errors.Is(err, ErrShortBuffer) {
			t.Errorf("%s short: %v", name, err)
		}
	}
}

func wcImage() []byte {
	b := fill(WCSize)
	h64(b, 0, 0xDEADBEEF00000001)
	h32(b, 8, 5)
	h32(b, 12, WCOpRecv)
	h32(b, 16, 0x99)
	h32(b, 20, 1064)
	h32(b, 24, 0xAABBCCDD)
	h32(b, 28, 0x11)
	h32(b, 32, 0x22)
	h32(b, 36, WCFlagGRH|WCFlagWithInv)
	h16(b, 40, 1)
	h16(b, 42, 0x33)
	b[44], b[45], b[46] = 4, 0, 1
	return b
}

func TestWCDecode(t *testing.T) {
	var w WC
	if err := w.Decode(wcImage()); err != nil {
		t.Fatal(err)
	}
	want := WC{WRID: 0xDEADBEEF00000001, Status: 5, Opcode: WCOpRecv, VendorErr: 0x99, ByteLen: 1064,
		Ex: 0xAABBCCDD, QPNum: 0x11, SrcQP: 0x22, Flags: WCFlagGRH | WCFlagWithInv, PKeyIndex: 1, SLID: 0x33,
		SL: 4, PortNum: 1}
	if w != want {
		t.Fatalf("got %+v\nwant %+v", w, want)
	}
	b := fill(WCSize)
	_ = want.Encode(b)
	img := wcImage()
	img[47] = 0
	if string(b) != string(img) {
		t.Fatalf("encode\n got %x\nwant %x", b, img)
	}
}

func TestAsyncEventDecode(t *testing.T) {
	b := fill(AsyncEventSize)
	h64(b, 0, 0x0000000100000002)
	h32(b, 8, uint32(EventCommEst))
	var e AsyncEvent
	if err := e.Decode(b); err != nil || e != (AsyncEvent{Element: 0x0000000100000002, Type: EventCommEst}) {
		t.Fatalf("%+v %v", e, err)
	}
	if e.Type.String() != "IBV_EVENT_COMM_EST" || !e.Type.QPEvent() || EventPortActive.QPEvent() {
		t.Fatalf("names: %s %v", e.Type, e.Type.QPEvent())
	}
	if EventType(77).String() != "EventType(77)" {
		t.Fatal(EventType(77).String())
	}
	h, err := DecodeCompEvent(b)
	if err != nil || h != 0x0000000100000002 {
		t.Fatalf("comp %x %v", h, err)
	}
	if _, err := DecodeCompEvent(b[:7]); !errors.Is(err, ErrShortBuffer) {
		t.Fatal(err)
	}
}
