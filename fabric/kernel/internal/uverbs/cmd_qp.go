package uverbs

// QP types (enum ib_qp_type).
const (
	QPTypeRC = 2
	QPTypeUC = 3
	QPTypeUD = 4
)

// QP states (enum ib_qp_state).
const (
	QPStateReset = 0
	QPStateInit  = 1
	QPStateRTR   = 2
	QPStateRTS   = 3
	QPStateSQD   = 4
	QPStateSQE   = 5
	QPStateErr   = 6
)

// QP attribute mask bits (enum ib_qp_attr_mask).
const (
	QPAttrState            = 1 << 0
	QPAttrCurState         = 1 << 1
	QPAttrEnSQDAsyncNotify = 1 << 2
	QPAttrAccessFlags      = 1 << 3
	QPAttrPKeyIndex        = 1 << 4
	QPAttrPort             = 1 << 5
	QPAttrQKey             = 1 << 6
	QPAttrAV               = 1 << 7
	QPAttrPathMTU          = 1 << 8
	QPAttrTimeout          = 1 << 9
	QPAttrRetryCnt         = 1 << 10
	QPAttrRNRRetry         = 1 << 11
	QPAttrRQPSN            = 1 << 12
	QPAttrMaxQPRdAtomic    = 1 << 13
	QPAttrAltPath          = 1 << 14
	QPAttrMinRNRTimer      = 1 << 15
	QPAttrSQPSN            = 1 << 16
	QPAttrMaxDestRdAtomic  = 1 << 17
	QPAttrPathMigState     = 1 << 18
	QPAttrCap              = 1 << 19
	QPAttrDestQPN          = 1 << 20
	// QPAttrStandard is every bit MODIFY_QP accepts (IB_QP_ATTR_STANDARD_BITS);
	// others give EOPNOTSUPP.
	QPAttrStandard = 1<<21 - 1
)

// CreateQP is IB_USER_VERBS_CMD_CREATE_QP.
//
// Payload: 0 response, 8 user_handle, 16 pd_handle, 20 send_cq_handle, 24
// recv_cq_handle, 28 srq_handle, 32 max_send_wr, 36 max_recv_wr, 40
// max_send_sge, 44 max_recv_sge, 48 max_inline_data, 52 sq_sig_all, 53
// qp_type, 54 is_srq, 55 reserved, 56 driver request. Response: see
// CreateQPResp, then the driver response.
type CreateQP struct {
	UserHandle           uint64
	PD, SendCQ, RecvCQ   uint32
	SRQ                  uint32
	MaxSendWR, MaxRecvWR uint32
	MaxSendSGE           uint32
	MaxRecvSGE           uint32
	MaxInline            uint32
	SigAll               bool
	Type                 uint8
	Driver               []byte
	DriverOut            int // rxe: struct rxe_create_qp_resp (32); siw: struct siw_uresp_create_qp (32)
}

// CreateQPRespSize is the size of struct ib_uverbs_create_qp_resp.
const CreateQPRespSize = 32

func (c *CreateQP) Cmd() Cmd     { return CmdCreateQP }
func (c *CreateQP) Size() int    { return HeaderSize + 56 + len(c.Driver) }
func (c *CreateQP) RespLen() int { return CreateQPRespSize + c.DriverOut }
func (c *CreateQP) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdCreateQP, 56, c.Driver, c.RespLen())
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint64(p[8:], c.UserHandle)
	ne.PutUint32(p[16:], c.PD)
	ne.PutUint32(p[20:], c.SendCQ)
	ne.PutUint32(p[24:], c.RecvCQ)
	ne.PutUint32(p[28:], c.SRQ)
	ne.PutUint32(p[32:], c.MaxSendWR)
	ne.PutUint32(p[36:], c.MaxRecvWR)
	ne.PutUint32(p[40:], c.MaxSendSGE)
	ne.PutUint32(p[44:], c.MaxRecvSGE)
	ne.PutUint32(p[48:], c.MaxInline)
	if c.SigAll {
		p[52] = 1
	}
	p[53] = c.Type
	return msg, nil
}

// CreateQPResp is struct ib_uverbs_create_qp_resp: the QP's handle and
// number and the capacities the driver actually gave it.
//
// Layout: 0 qp_handle, 4 qpn, 8 max_send_wr, 12 max_recv_wr, 16
// max_send_sge, 20 max_recv_sge, 24 max_inline_data, 28 reserved.
type CreateQPResp struct {
	Handle               uint32
	QPN                  uint32
	MaxSendWR, MaxRecvWR uint32
	MaxSendSGE           uint32
	MaxRecvSGE           uint32
	MaxInline            uint32
}

// Decode fills r from b[:CreateQPRespSize].
func (r *CreateQPResp) Decode(b []byte) error {
	if len(b) < CreateQPRespSize {
		return ErrShortBuffer
	}
	r.Handle = ne.Uint32(b[0:])
	r.QPN = ne.Uint32(b[4:])
	r.MaxSendWR = ne.Uint32(b[8:])
	r.MaxRecvWR = ne.Uint32(b[12:])
	r.MaxSendSGE = ne.Uint32(b[16:])
	r.MaxRecvSGE = ne.Uint32(b[20:])
	r.MaxInline = ne.Uint32(b[24:])
	return nil
}

// Encode writes r into b[:CreateQPRespSize].
func (r *CreateQPResp) Encode(b []byte) error {
	if len(b) < CreateQPRespSize {
		return ErrShortBuffer
	}
	ne.PutUint32(b[0:], r.Handle)
	ne.PutUint32(b[4:], r.QPN)
	ne.PutUint32(b[8:], r.MaxSendWR)
	ne.PutUint32(b[12:], r.MaxRecvWR)
	ne.PutUint32(b[16:], r.MaxSendSGE)
	ne.PutUint32(b[20:], r.MaxRecvSGE)
	ne.PutUint32(b[24:], r.MaxInline)
	ne.PutUint32(b[28:], 0)
	return nil
}

// AHAttr is an address vector: the fields of struct ib_uverbs_ah_attr
// (CREATE_AH) and struct ib_uverbs_qp_dest (MODIFY_QP), which lay them out
// differently.
type AHAttr struct {
	DGID         [16]byte
	FlowLabel    uint32
	SGIDIndex    uint8
	HopLimit     uint8
	TrafficClass uint8
	DLID         uint16
	SL           uint8
	SrcPathBits  uint8
	StaticRate   uint8
	IsGlobal     uint8
	PortNum      uint8
}

// AHAttrSize is the size of struct ib_uverbs_ah_attr.
const AHAttrSize = 32

// putAHAttr writes a as struct ib_uverbs_ah_attr: 0 dgid, 16 flow_label,
// 20 sgid_index, 21 hop_limit, 22 traffic_class, 23 reserved, 24 dlid, 26
// sl, 27 src_path_bits, 28 static_rate, 29 is_global, 30 port_num, 31
// reserved.
func (a *AHAttr) putAHAttr(b []byte) {
	_ = b[AHAttrSize-1]
	copy(b[0:16], a.DGID[:])
	ne.PutUint32(b[16:], a.FlowLabel)
	b[20], b[21], b[22], b[23] = a.SGIDIndex, a.HopLimit, a.TrafficClass, 0
	ne.PutUint16(b[24:], a.DLID)
	b[26], b[27], b[28], b[29], b[30], b[31] = a.SL, a.SrcPathBits, a.StaticRate, a.IsGlobal, a.PortNum, 0
}

// qpDestSize is the size of struct ib_uverbs_qp_dest.
const qpDestSize = 32

// putQPDest writes a as struct ib_uverbs_qp_dest: 0 dgid, 16 flow_label,
// 20 dlid, 22 reserved, 24 sgid_index, 25 hop_limit, 26 traffic_class, 27
// sl, 28 src_path_bits, 29 static_rate, 30 is_global, 31 port_num.
func (a *AHAttr) putQPDest(b []byte) {
	_ = b[qpDestSize-1]
	copy(b[0:16], a.DGID[:])
	ne.PutUint32(b[16:], a.FlowLabel)
	ne.PutUint16(b[20:], a.DLID)
	b[22], b[23] = 0, 0
	b[24], b[25], b[26], b[27] = a.SGIDIndex, a.HopLimit, a.TrafficClass, a.SL
	b[28], b[29], b[30], b[31] = a.SrcPathBits, a.StaticRate, a.IsGlobal, a.PortNum
}

// QPAttr holds the attributes of a QP transition: the fields of struct
// ib_uverbs_qp_attr, as INIT_QP_ATTR of the rdma_cm returns them, which
// MODIFY_QP sends in its own layout.
type QPAttr struct {
	State, CurState                   uint8
	PathMTU, PathMigState             uint8
	QKey, RQPSN, SQPSN, DestQPN       uint32
	AccessFlags                       uint32
	AH, AltAH                         AHAttr
	PKeyIndex, AltPKeyIndex           uint16
	EnSQDAsyncNotify                  uint8
	MaxRdAtomic, MaxDestRdAtomic      uint8
	MinRNRTimer, PortNum              uint8
	Timeout, RetryCnt, RNRRetry       uint8
	AltPortNum, AltTimeout            uint8
	MaxSendWR, MaxRecvWR              uint32 // not sent by MODIFY_QP
	MaxSendSGE, MaxRecvSGE, MaxInline uint32 // not sent by MODIFY_QP
}

// ModifyQP is IB_USER_VERBS_CMD_MODIFY_QP: move a QP with the attributes
// Mask selects. No response.
//
// Payload: 0 dest (struct ib_uverbs_qp_dest), 32 alt_dest, 64 qp_handle,
// 68 attr_mask, 72 qkey, 76 rq_psn, 80 sq_psn, 84 dest_qp_num, 88
// qp_access_flags, 92 pkey_index (u16), 94 alt_pkey_index (u16), 96
// qp_state, 97 cur_qp_state, 98 path_mtu, 99 path_mig_state, 100
// en_sqd_async_notify, 101 max_rd_atomic, 102 max_dest_rd_atomic, 103
// min_rnr_timer, 104 port_num, 105 timeout, 106 retry_cnt, 107 rnr_retry,
// 108 alt_port_num, 109 alt_timeout, 110 reserved[2].
type ModifyQP struct {
	Handle uint32
	Mask   uint32
	Attr   QPAttr
}

// modifyQPSize is the size of struct ib_uverbs_modify_qp.
const modifyQPSize = 112

func (c *ModifyQP) Cmd() Cmd     { return CmdModifyQP }
func (c *ModifyQP) Size() int    { return HeaderSize + modifyQPSize }
func (c *ModifyQP) RespLen() int { return 0 }
func (c *ModifyQP) Encode(b []byte, _ uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdModifyQP, modifyQPSize, nil, 0)
	if err != nil {
		return nil, err
	}
	a := &c.Attr
	a.AH.putQPDest(p[0:32])
	a.AltAH.putQPDest(p[32:64])
	ne.PutUint32(p[64:], c.Handle)
	ne.PutUint32(p[68:], c.Mask)
	ne.PutUint32(p[72:], a.QKey)
	ne.PutUint32(p[76:], a.RQPSN)
	ne.PutUint32(p[80:], a.SQPSN)
	ne.PutUint32(p[84:], a.DestQPN)
	ne.PutUint32(p[88:], a.AccessFlags)
	ne.PutUint16(p[92:], a.PKeyIndex)
	ne.PutUint16(p[94:], a.AltPKeyIndex)
	p[96], p[97], p[98], p[99] = a.State, a.CurState, a.PathMTU, a.PathMigState
	p[100], p[101], p[102], p[103] = a.EnSQDAsyncNotify, a.MaxRdAtomic, a.MaxDestRdAtomic, a.MinRNRTimer
	p[104], p[105], p[106], p[107] = a.PortNum, a.Timeout, a.RetryCnt, a.RNRRetry
	p[108], p[109] = a.AltPortNum, a.AltTimeout
	return msg, nil
}

// DestroyQP is IB_USER_VERBS_CMD_DESTROY_QP. Payload: 0 response, 8
// qp_handle, 12 reserved. Response: 0 events_reported.
type DestroyQP struct {
	Handle uint32
}

func (c *DestroyQP) Cmd() Cmd     { return CmdDestroyQP }
func (c *DestroyQP) Size() int    { return HeaderSize + 16 }
func (c *DestroyQP) RespLen() int { return 4 }
func (c *DestroyQP) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdDestroyQP, 16, nil, 4)
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint32(p[8:], c.Handle)
	return msg, nil
}

// SendWRSize is the size of struct ib_uverbs_send_wr, the wqe_size a
// POST_SEND must name even when it carries no work request.
const SendWRSize = 56

// PostSendSize is the size of a POST_SEND without work requests.
const PostSendSize = HeaderSize + 24

// PostSend is IB_USER_VERBS_CMD_POST_SEND with no work request: the
// doorbell of providers whose send queue lives in memory shared with the
// kernel (rxe, siw), which makes the driver look at the queue.
//
// Payload: 0 response, 8 qp_handle, 12 wr_count, 16 sge_count, 20
// wqe_size. Response: 0 bad_wr.
type PostSend struct {
	Handle uint32
}

func (c *PostSend) Cmd() Cmd     { return CmdPostSend }
func (c *PostSend) Size() int    { return PostSendSize }
func (c *PostSend) RespLen() int { return 4 }
func (c *PostSend) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdPostSend, 24, nil, 4)
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint32(p[8:], c.Handle)
	ne.PutUint32(p[20:], SendWRSize)
	return msg, nil
}
