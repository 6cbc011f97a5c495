package ucma

import (
	"errors"
	"testing"
)

// qpAttrImage is struct ib_uverbs_qp_attr at its uapi offsets, every field
// distinct.
func qpAttrImage() []byte {
	b := make([]byte, 144)
	h32(b, 0, 0x001fffff)  // 0 qp_attr_mask
	h32(b, 4, 2)           // 4 qp_state RTR
	h32(b, 8, 1)           // 8 cur_qp_state
	h32(b, 12, 5)          // 12 path_mtu IBV_MTU_4096
	h32(b, 16, 0)          // 16 path_mig_state
	h32(b, 20, 0x11111111) // 20 qkey
	h32(b, 24, 0x00aaaaaa) // 24 rq_psn
	h32(b, 28, 0x00bbbbbb) // 28 sq_psn
	h32(b, 32, 0x00000123) // 32 dest_qp_num
	h32(b, 36, 0x0000000f) // 36 qp_access_flags
	a := b[40:72]          // 40 ah_attr
	copy(a[0:16], testGID[:])
	h32(a, 16, 0x12345)
	a[20], a[21], a[22] = 1, 255, 0x0c
	h16(a, 24, 0x0042)
	a[26], a[27], a[28], a[29], a[30] = 2, 0, 7, 1, 1
	copy(b[72:88], testSGID[:]) // 72 alt_ah_attr.dgid
	b[72+30] = 2                // alt_ah_attr.port_num
	h32(b, 104, 128)            // 104 max_send_wr
	h32(b, 108, 256)            // 108 max_recv_wr
	h32(b, 112, 4)              // 112 max_send_sge
	h32(b, 116, 5)              // 116 max_recv_sge
	h32(b, 120, 64)             // 120 max_inline_data
	h16(b, 124, 3)              // 124 pkey_index
	h16(b, 126, 4)              // 126 alt_pkey_index
	b[128] = 1                  // 128 en_sqd_async_notify
	b[129] = 0                  // 129 sq_draining
	b[130] = 16                 // 130 max_rd_atomic
	b[131] = 8                  // 131 max_dest_rd_atomic
	b[132] = 12                 // 132 min_rnr_timer
	b[133] = 1                  // 133 port_num
	b[134] = 14                 // 134 timeout
	b[135] = 7                  // 135 retry_cnt
	b[136] = 6                  // 136 rnr_retry
	b[137] = 2                  // 137 alt_port_num
	b[138] = 15                 // 138 alt_timeout; 139 reserved[5]
	return b
}

func qpAttrWant() QPAttr {
	return QPAttr{
		AttrMask: 0x1fffff, QPState: QPStateRTR, CurQPState: QPStateInit, PathMTU: 5,
		QKey: 0x11111111, RQPSN: 0xaaaaaa, SQPSN: 0xbbbbbb, DestQPNum: 0x123, QPAccessFlags: 0xf,
		AHAttr: AHAttr{DGID: testGID, FlowLabel: 0x12345, SGIDIndex: 1, HopLimit: 255, TrafficClass: 0x0c,
			DLID: 0x42, SL: 2, StaticRate: 7, IsGlobal: 1, PortNum: 1},
		AltAHAttr: AHAttr{DGID: testSGID, PortNum: 2},
		MaxSendWR: 128, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 5, MaxInlineData: 64,
		PKeyIndex: 3, AltPKeyIndex: 4, EnSQDAsyncNotify: 1, MaxRDAtomic: 16, MaxDestRDAtomic: 8,
		MinRNRTimer: 12, PortNum: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 6, AltPortNum: 2, AltTimeout: 15,
	}
}

func TestQPAttr(t *testing.T) {
	var q QPAttr
	if err := q.Decode(qpAttrImage()); err != nil || q != qpAttrWant() {
		t.Errorf("Decode:\n got %+v\nwant %+v (%v)", q, qpAttrWant(), err)
	}
	out := fill(144)
	want := qpAttrWant()
	if err := want.Encode(out); err != nil {
		t.Fatal(err)
	}
	diff(t, "ib_uverbs_qp_attr", out, qpAttrImage())
	if err := q.Decode(out[:143]); !errors.Is(err, ErrShortBuffer) {
		t.Errorf("short: %v", err)
	}
}
