package ucma

import (
	"errors"
	"testing"
)

var testSGID = GID{0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x02, 0xc9, 0x03, 0x00, 0x0a, 0xbc, 0xde}

// pathRecImage is struct ib_user_path_rec at its uapi offsets.
func pathRecImage() []byte {
	b := make([]byte, 64)
	copy(b[0:16], testGID[:])   // 0 dgid
	copy(b[16:32], testSGID[:]) // 16 sgid
	n16(b, 32, 0x0017)          // 32 dlid (be16)
	n16(b, 34, 0x0001)          // 34 slid (be16)
	h32(b, 36, 0)               // 36 raw_traffic
	n32(b, 40, 0x000abcde)      // 40 flow_label (be32)
	h32(b, 44, 1)               // 44 reversible
	h32(b, 48, 4)               // 48 mtu (IB_MTU_2048)
	n16(b, 52, 0x8001)          // 52 pkey (be16)
	b[54] = 1                   // 54 hop_limit
	b[55] = 0x20                // 55 traffic_class
	b[56] = 1                   // 56 numb_path
	b[57] = 5                   // 57 sl
	b[58] = 2                   // 58 mtu_selector
	b[59] = 2                   // 59 rate_selector
	b[60] = 6                   // 60 rate
	b[61] = 2                   // 61 packet_life_time_selector
	b[62] = 18                  // 62 packet_life_time
	b[63] = 0                   // 63 preference
	return b
}

func pathRecWant() PathRec {
	return PathRec{DGID: testGID, SGID: testSGID, DLID: 0x17, SLID: 1, FlowLabel: 0xabcde,
		Reversible: 1, MTU: 4, PKey: 0x8001, HopLimit: 1, TrafficClass: 0x20, NumbPath: 1,
		SL: 5, MTUSelector: 2, RateSelector: 2, Rate: 6, PacketLifeTimeSelector: 2, PacketLifeTime: 18}
}

// pathDataImage is struct ib_path_rec_data with a packed IBTA PathRecord.
func pathDataImage() []byte {
	b := make([]byte, 72)
	h32(b, 0, 0x2B) // 0 flags GMP|PRIMARY|BIDIRECTIONAL; 4 reserved
	r := b[8:]
	n64(r, 0, 0x0000000001061d2f) // 0 service_id
	copy(r[8:24], testGID[:])     // 8 dgid
	copy(r[24:40], testSGID[:])   // 24 sgid
	n16(r, 40, 0x0017)            // 40 dlid
	n16(r, 42, 0x0001)            // 42 slid
	// 44: raw_traffic=1 (bit 31), reserved 3 bits, flow_label 0xabcde, hop_limit 0x40
	copy(r[44:48], []byte{0x8a, 0xbc, 0xde, 0x40})
	r[48] = 0x20 // 48 traffic_class
	r[49] = 0x81 // 49 reversible=1, numb_path=1
	n16(r, 50, 0xffff)
	// 52: qos_class 0x123 (12 bits), sl 13 (4 bits)
	copy(r[52:54], []byte{0x12, 0x3d})
	r[54] = 0x84 // 54 mtu_selector 2, mtu 4
	r[55] = 0x86 // 55 rate_selector 2, rate 6
	r[56] = 0x92 // 56 packet_life_time_selector 2, packet_life_time 18
	r[57] = 0x07 // 57 preference; 58..63 reserved
	return b
}

func pathDataWant() PathData {
	return PathData{Flags: 0x2B, Record: PathRecord{
		ServiceID: 0x01061d2f, DGID: testGID, SGID: testSGID, DLID: 0x17, SLID: 1,
		RawTraffic: true, FlowLabel: 0xabcde, HopLimit: 0x40, TrafficClass: 0x20,
		Reversible: true, NumbPath: 1, PKey: 0xffff, QoSClass: 0x123, SL: 13,
		MTUSelector: 2, MTU: 4, RateSelector: 2, Rate: 6,
		PacketLifeTimeSelector: 2, PacketLifeTime: 18, Preference: 7,
	}}
}

func TestPathRec(t *testing.T) {
	var p PathRec
	if err := p.Decode(pathRecImage()); err != nil || p != pathRecWant() {
		t.Errorf("Decode:\n got %+v\nwant %+v (%v)", p, pathRecWant(), err)
	}
	out := fill(64)
	want := pathRecWant()
	if err := want.Encode(out); err != nil {
		t.Fatal(err)
	}
	diff(t, "ib_user_path_rec", out, pathRecImage())
	if err := p.Decode(out[:63]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short: %v", err)
	}
}

func TestPathData(t *testing.T) {
	var d PathData
	if err := d.Decode(pathDataImage()); err != nil || d != pathDataWant() {
		t.Errorf("Decode:\n got %+v\nwant %+v (%v)", d, pathDataWant(), err)
	}
	out := fill(72)
	want := pathDataWant()
	if err := want.Encode(out); err != nil {
		t.Fatal(err)
	}
	diff(t, "ib_path_rec_data", out, pathDataImage())
	if d.Flags != PathGMP|PathPrimary|PathBidirectional {
		t.Errorf("flags %#x, want GMP|PRIMARY|BIDIRECTIONAL (0x2b)", d.Flags)
	}
	if err := d.Decode(out[:71]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short: %v", err)
	}
	// Reserved bits of the flow-label word are dropped, and do not read
	// as raw_traffic.
	img := pathDataImage()
	img[8+44] = 0x70 | 0x0a // raw_traffic 0, reserved 0b111, flow label high nibble 0xa
	w := pathDataWant()
	w.Record.RawTraffic = false
	if err := d.Decode(img); err != nil || d != w {
		t.Errorf("reserved bits leaked into fields: %+v", d.Record)
	}
}
