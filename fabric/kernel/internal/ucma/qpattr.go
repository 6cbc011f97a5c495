package ucma

// QPAttrSize is the size of struct ib_uverbs_qp_attr, the INIT_QP_ATTR
// response.
const QPAttrSize = 144

// QPAttr is struct ib_uverbs_qp_attr (uapi ib_user_verbs.h): the QP
// attributes the CM computes for a transition, with AttrMask saying which
// are set (IBV_QP_* bits). All fields are host-endian.
//
// Layout: 0 qp_attr_mask, 4 qp_state, 8 cur_qp_state, 12 path_mtu,
// 16 path_mig_state, 20 qkey, 24 rq_psn, 28 sq_psn, 32 dest_qp_num,
// 36 qp_access_flags, 40 ah_attr, 72 alt_ah_attr, 104 max_send_wr,
// 108 max_recv_wr, 112 max_send_sge, 116 max_recv_sge, 120 max_inline_data,
// 124 pkey_index (u16), 126 alt_pkey_index (u16), 128 en_sqd_async_notify,
// 129 sq_draining, 130 max_rd_atomic, 131 max_dest_rd_atomic,
// 132 min_rnr_timer, 133 port_num, 134 timeout, 135 retry_cnt,
// 136 rnr_retry, 137 alt_port_num, 138 alt_timeout, 139 reserved[5].
type QPAttr struct {
	AttrMask         uint32
	QPState          uint32
	CurQPState       uint32
	PathMTU          uint32
	PathMigState     uint32
	QKey             uint32
	RQPSN            uint32
	SQPSN            uint32
	DestQPNum        uint32
	QPAccessFlags    uint32
	AHAttr           AHAttr
	AltAHAttr        AHAttr
	MaxSendWR        uint32
	MaxRecvWR        uint32
	MaxSendSGE       uint32
	MaxRecvSGE       uint32
	MaxInlineData    uint32
	PKeyIndex        uint16
	AltPKeyIndex     uint16
	EnSQDAsyncNotify uint8
	SQDraining       uint8
	MaxRDAtomic      uint8
	MaxDestRDAtomic  uint8
	MinRNRTimer      uint8
	PortNum          uint8
	Timeout          uint8
	RetryCnt         uint8
	RNRRetry         uint8
	AltPortNum       uint8
	AltTimeout       uint8
}

// Decode fills q from b[:QPAttrSize]; a shorter b gives ErrShortBuffer.
func (q *QPAttr) Decode(b []byte) error {
	if len(b) < QPAttrSize {
		return ErrShortBuffer
	}
	q.AttrMask = ne.Uint32(b[0:])
	q.QPState = ne.Uint32(b[4:])
	q.CurQPState = ne.Uint32(b[8:])
	q.PathMTU = ne.Uint32(b[12:])
	q.PathMigState = ne.Uint32(b[16:])
	q.QKey = ne.Uint32(b[20:])
	q.RQPSN = ne.Uint32(b[24:])
	q.SQPSN = ne.Uint32(b[28:])
	q.DestQPNum = ne.Uint32(b[32:])
	q.QPAccessFlags = ne.Uint32(b[36:])
	_ = q.AHAttr.Decode(b[40:72])
	_ = q.AltAHAttr.Decode(b[72:104])
	q.MaxSendWR = ne.Uint32(b[104:])
	q.MaxRecvWR = ne.Uint32(b[108:])
	q.MaxSendSGE = ne.Uint32(b[112:])
	q.MaxRecvSGE = ne.Uint32(b[116:])
	q.MaxInlineData = ne.Uint32(b[120:])
	q.PKeyIndex = ne.Uint16(b[124:])
	q.AltPKeyIndex = ne.Uint16(b[126:])
	q.EnSQDAsyncNotify = b[128]
	q.SQDraining = b[129]
	q.MaxRDAtomic = b[130]
	q.MaxDestRDAtomic = b[131]
	q.MinRNRTimer = b[132]
	q.PortNum = b[133]
	q.Timeout = b[134]
	q.RetryCnt = b[135]
	q.RNRRetry = b[136]
	q.AltPortNum = b[137]
	q.AltTimeout = b[138]
	return nil
}

// Encode writes q into b[:QPAttrSize], reserved bytes zero; a shorter b
// gives ErrShortBuffer.
func (q *QPAttr) Encode(b []byte) error {
	if len(b) < QPAttrSize {
		return ErrShortBuffer
	}
	ne.PutUint32(b[0:], q.AttrMask)
	ne.PutUint32(b[4:], q.QPState)
	ne.PutUint32(b[8:], q.CurQPState)
	ne.PutUint32(b[12:], q.PathMTU)
	ne.PutUint32(b[16:], q.PathMigState)
	ne.PutUint32(b[20:], q.QKey)
	ne.PutUint32(b[24:], q.RQPSN)
	ne.PutUint32(b[28:], q.SQPSN)
	ne.PutUint32(b[32:], q.DestQPNum)
	ne.PutUint32(b[36:], q.QPAccessFlags)
	_ = q.AHAttr.Encode(b[40:72])
	_ = q.AltAHAttr.Encode(b[72:104])
	ne.PutUint32(b[104:], q.MaxSendWR)
	ne.PutUint32(b[108:], q.MaxRecvWR)
	ne.PutUint32(b[112:], q.MaxSendSGE)
	ne.PutUint32(b[116:], q.MaxRecvSGE)
	ne.PutUint32(b[120:], q.MaxInlineData)
	ne.PutUint16(b[124:], q.PKeyIndex)
	ne.PutUint16(b[126:], q.AltPKeyIndex)
	b[128] = q.EnSQDAsyncNotify
	b[129] = q.SQDraining
	b[130] = q.MaxRDAtomic
	b[131] = q.MaxDestRDAtomic
	b[132] = q.MinRNRTimer
	b[133] = q.PortNum
	b[134] = q.Timeout
	b[135] = q.RetryCnt
	b[136] = q.RNRRetry
	b[137] = q.AltPortNum
	b[138] = q.AltTimeout
	clear(b[139:QPAttrSize])
	return nil
}
