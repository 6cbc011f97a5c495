package ucma

import (
	"errors"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
)

// eventConnImage is a GET_EVENT response for a connected-mode id, built at
// the absolute offsets of struct rdma_ucm_event_resp.
func eventConnImage() []byte {
	b := make([]byte, 336)
	h64(b, 0, 0x1111222233334444)  // 0 uid
	h32(b, 8, 0x55)                // 8 id
	h32(b, 12, 6)                  // 12 event CONNECT_ERROR
	h32(b, 16, uint32(0xffffff92)) // 16 status -110 (-ETIMEDOUT)
	// 20 param.conn
	h32(b, 20, 0x00c0ffee)        // 20 conn.qp_num
	h32(b, 24, 0)                 // 24 conn.qkey
	copy(b[28:], pattern(56, 10)) // 28 conn.private_data
	b[284] = 56                   // 284 conn.private_data_len
	b[285] = 0                    // 285 srq
	b[286] = 16                   // 286 responder_resources
	b[287] = 8                    // 287 initiator_depth
	b[288] = 1                    // 288 flow_control
	b[289] = 7                    // 289 retry_count
	b[290] = 7                    // 290 rnr_retry_count
	b[291] = 0                    // 291 valid
	// 324 reserved
	h32(b, 328, 0x000015b3) // 328 ece.vendor_id
	h32(b, 332, 0x0000ff01) // 332 ece.attr_mod
	return b
}

func eventConnWant() Event {
	e := Event{
		UID: 0x1111222233334444, ID: 0x55, Event: fabric.EventConnectError, Status: -110,
		Conn: ConnParam{QPNum: 0x00c0ffee, PrivateDataLen: 56, ResponderResources: 16,
			InitiatorDepth: 8, FlowControl: 1, RetryCount: 7, RNRRetryCount: 7},
		ECE: ECE{VendorID: 0x15b3, AttrMod: 0xff01},
	}
	copy(e.Conn.PrivateData[:], pattern(56, 10))
	return e
}

// eventUDImage is a GET_EVENT response for a UD id (ud_param view).
func eventUDImage() []byte {
	b := make([]byte, 336)
	h64(b, 0, 0x00000000000000aa)  // 0 uid
	h32(b, 8, 3)                   // 8 id
	h32(b, 12, 9)                  // 12 event ESTABLISHED
	h32(b, 16, uint32(0xffffffea)) // 16 status -22
	// 20 param.ud
	h32(b, 20, 0x00ffffff) // 20 ud.qp_num
	h32(b, 24, 0x01234567) // 24 ud.qkey
	// 28 ud.ah_attr
	copy(b[28:44], testGID[:])     // 28 ah.grh.dgid
	h32(b, 44, 0x000abcde)         // 44 ah.grh.flow_label
	b[48] = 2                      // 48 ah.grh.sgid_index
	b[49] = 64                     // 49 ah.grh.hop_limit
	b[50] = 0x20                   // 50 ah.grh.traffic_class; 51 reserved
	h16(b, 52, 0x0017)             // 52 ah.dlid
	b[54] = 3                      // 54 ah.sl
	b[55] = 1                      // 55 ah.src_path_bits
	b[56] = 3                      // 56 ah.static_rate
	b[57] = 1                      // 57 ah.is_global
	b[58] = 1                      // 58 ah.port_num; 59 reserved
	copy(b[60:], pattern(180, 50)) // 60 ud.private_data
	b[316] = 180                   // 316 ud.private_data_len; 317 reserved[7]
	h32(b, 328, 7)                 // 328 ece.vendor_id
	h32(b, 332, 9)                 // 332 ece.attr_mod
	return b
}

func eventUDWant() UDParam {
	u := UDParam{QPNum: 0x00ffffff, QKey: 0x01234567, PrivateDataLen: 180,
		AHAttr: AHAttr{DGID: testGID, FlowLabel: 0xabcde, SGIDIndex: 2, HopLimit: 64,
			TrafficClass: 0x20, DLID: 0x17, SL: 3, SrcPathBits: 1, StaticRate: 3, IsGlobal: 1, PortNum: 1}}
	copy(u.PrivateData[:], pattern(180, 50))
	return u
}

func TestDecodeEventConn(t *testing.T) {
	var e Event
	if err := e.Decode(eventConnImage()); err != nil {
		t.Fatal(err)
	}
	want := eventConnWant()
	if e.UID != want.UID || e.ID != want.ID || e.Event != want.Event || e.Status != want.Status || e.ECE != want.ECE {
		t.Errorf("header: got uid %#x id %d %v status %d ece %+v", e.UID, e.ID, e.Event, e.Status, e.ECE)
	}
	if e.Conn != want.Conn {
		t.Errorf("conn view:\n got %+v\nwant %+v", e.Conn, want.Conn)
	}
	if string(e.Conn.Data()) != string(pattern(56, 10)) {
		t.Errorf("private data (offset 28) wrong: % x", e.Conn.Data()[:8])
	}
	// The UD view of the same bytes puts private data 32 bytes later.
	if e.UD.PrivateData[0] != pattern(56, 10)[32] {
		t.Errorf("UD view is not a reinterpretation of the same bytes")
	}
}

func TestDecodeEventUD(t *testing.T) {
	var e Event
	if err := e.Decode(eventUDImage()); err != nil {
		t.Fatal(err)
	}
	if e.UID != 0xaa || e.ID != 3 || e.Event != fabric.EventEstablished || e.Status != -22 || e.ECE != (ECE{7, 9}) {
		t.Errorf("header: uid %#x id %d %v status %d ece %+v", e.UID, e.ID, e.Event, e.Status, e.ECE)
	}
	if want := eventUDWant(); e.UD != want {
		t.Errorf("ud view:\n got %+v\nwant %+v", e.UD, want)
	}
	if string(e.UD.Data()) != string(pattern(180, 50)) {
		t.Errorf("private data (offset 60) wrong")
	}
}

func TestDecodeEventUserArg(t *testing.T) {
	b := make([]byte, 336)
	h64(b, 0, 1)
	h32(b, 12, 18)                 // USER
	h64(b, 20, 0x0a0b0c0d01020304) // param.arg32[0..1] as the kernel memcpy'd the u64
	var e Event
	if err := e.Decode(b); err != nil {
		t.Fatal(err)
	}
	if e.Event != fabric.EventUser || e.Arg != 0x0a0b0c0d01020304 {
		t.Errorf("USER: %v arg %#x", e.Event, e.Arg)
	}
}

func TestDecodeEventShort(t *testing.T) {
	img := eventConnImage()
	var e Event
	if err := e.Decode(img[:323]); !errors.Is(err, ErrShortBuffer) || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("323 bytes: err %v, want ErrShortBuffer", err)
	}
	e.ECE = ECE{1, 1}
	if err := e.Decode(img[:324]); err != nil {
		t.Fatalf("324 bytes: %v", err)
	}
	if e.ECE != (ECE{}) || e.Conn != eventConnWant().Conn {
		t.Errorf("324 bytes: ECE %+v (want zero), conn ok=%v", e.ECE, e.Conn == eventConnWant().Conn)
	}
}

func TestEncodeEvent(t *testing.T) {
	want := eventConnWant()
	got := fill(400)
	if err := want.Encode(got, ParamConn); err != nil {
		t.Fatal(err)
	}
	diff(t, "conn event", got[:336], eventConnImage())

	ud := Event{UID: 0xaa, ID: 3, Event: fabric.EventEstablished, Status: -22, UD: eventUDWant(), ECE: ECE{7, 9}}
	if err := ud.Encode(got, ParamUD); err != nil {
		t.Fatal(err)
	}
	diff(t, "ud event", got[:336], eventUDImage())

	if err := ud.Encode(got[:335], ParamUD); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("335 bytes: %v", err)
	}
}

// The event field carries the kernel's enum rdma_cm_event_type, which is
// fabric.EventType's numbering: the package has no event enum of its own.
func TestEventTypeIsTheKernels(t *testing.T) {
	for _, c := range []struct {
		wire uint32
		want fabric.EventType
	}{
		{0, fabric.EventAddrResolved}, {4, fabric.EventConnectRequest}, {8, fabric.EventRejected},
		{9, fabric.EventEstablished}, {12, fabric.EventMulticastJoin}, {15, fabric.EventTimewaitExit},
		{17, fabric.EventAddrInfoError}, {18, fabric.EventUser},
	} {
		b := make([]byte, EventRespSize)
		ne.PutUint32(b[12:], c.wire)
		var e Event
		if err := e.Decode(b); err != nil || e.Event != c.want {
			t.Errorf("event %d decodes as %v (%v), want %v", c.wire, e.Event, err, c.want)
		}
	}
}
