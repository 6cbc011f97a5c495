package uverbs

// CreateCompChannel is IB_USER_VERBS_CMD_CREATE_COMP_CHANNEL: a new
// completion channel descriptor. Payload: 0 response. Response: 0 fd.
type CreateCompChannel struct{}

func (c *CreateCompChannel) Cmd() Cmd     { return CmdCreateCompChannel }
func (c *CreateCompChannel) Size() int    { return HeaderSize + 8 }
func (c *CreateCompChannel) RespLen() int { return 4 }
func (c *CreateCompChannel) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdCreateCompChannel, 8, nil, 4)
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	return msg, nil
}

// CreateCQ is IB_USER_VERBS_CMD_CREATE_CQ.
//
// Payload: 0 response, 8 user_handle, 16 cqe, 20 comp_vector, 24
// comp_channel (s32, -1 for none), 28 reserved, 32 driver request.
// Response: 0 cq_handle, 4 cqe, 8 driver response.
type CreateCQ struct {
	UserHandle  uint64 // echoed in completion and async events
	CQE         uint32
	CompVector  uint32
	CompChannel int32
	Driver      []byte
	DriverOut   int // rxe: struct mminfo (16); siw: struct siw_uresp_create_cq (16)
}

// CreateCQRespSize is the size of struct ib_uverbs_create_cq_resp.
const CreateCQRespSize = 8

func (c *CreateCQ) Cmd() Cmd     { return CmdCreateCQ }
func (c *CreateCQ) Size() int    { return HeaderSize + 32 + len(c.Driver) }
func (c *CreateCQ) RespLen() int { return CreateCQRespSize + c.DriverOut }
func (c *CreateCQ) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdCreateCQ, 32, c.Driver, c.RespLen())
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint64(p[8:], c.UserHandle)
	ne.PutUint32(p[16:], c.CQE)
	ne.PutUint32(p[20:], c.CompVector)
	ne.PutUint32(p[24:], uint32(c.CompChannel))
	return msg, nil
}

// CreateCQResp is struct ib_uverbs_create_cq_resp.
type CreateCQResp struct {
	Handle uint32
	CQE    uint32 // the depth the driver gave the queue
}

// Decode fills r from b[:CreateCQRespSize].
func (r *CreateCQResp) Decode(b []byte) error {
	if len(b) < CreateCQRespSize {
		return ErrShortBuffer
	}
	r.Handle = ne.Uint32(b[0:])
	r.CQE = ne.Uint32(b[4:])
	return nil
}

// Encode writes r into b[:CreateCQRespSize].
func (r *CreateCQResp) Encode(b []byte) error {
	if len(b) < CreateCQRespSize {
		return ErrShortBuffer
	}
	ne.PutUint32(b[0:], r.Handle)
	ne.PutUint32(b[4:], r.CQE)
	return nil
}

// DestroyCQ is IB_USER_VERBS_CMD_DESTROY_CQ. Payload: 0 response, 8
// cq_handle, 12 reserved. Response: 0 comp_events_reported, 4
// async_events_reported.
type DestroyCQ struct {
	Handle uint32
}

// DestroyCQRespSize is the size of struct ib_uverbs_destroy_cq_resp.
const DestroyCQRespSize = 8

func (c *DestroyCQ) Cmd() Cmd     { return CmdDestroyCQ }
func (c *DestroyCQ) Size() int    { return HeaderSize + 16 }
func (c *DestroyCQ) RespLen() int { return DestroyCQRespSize }
func (c *DestroyCQ) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdDestroyCQ, 16, nil, DestroyCQRespSize)
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint32(p[8:], c.Handle)
	return msg, nil
}

// ReqNotifyCQ is IB_USER_VERBS_CMD_REQ_NOTIFY_CQ: arm the queue's
// completion channel for its next (or next solicited) completion.
// Payload: 0 cq_handle, 4 solicited_only. No response.
type ReqNotifyCQ struct {
	Handle        uint32
	SolicitedOnly bool
}

func (c *ReqNotifyCQ) Cmd() Cmd     { return CmdReqNotifyCQ }
func (c *ReqNotifyCQ) Size() int    { return HeaderSize + 8 }
func (c *ReqNotifyCQ) RespLen() int { return 0 }
func (c *ReqNotifyCQ) Encode(b []byte, _ uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdReqNotifyCQ, 8, nil, 0)
	if err != nil {
		return nil, err
	}
	ne.PutUint32(p[0:], c.Handle)
	if c.SolicitedOnly {
		ne.PutUint32(p[4:], 1)
	}
	return msg, nil
}

// WCSize is the size of struct ib_uverbs_wc.
const WCSize = 48

// Work completion flags (IBV_WC_* of enum ibv_wc_flags).
const (
	WCFlagGRH           = 1 << 0
	WCFlagWithImm       = 1 << 1
	WCFlagIPCSumOK      = 1 << 2
	WCFlagWithInv       = 1 << 3
	WCFlagWithSL        = 1 << 4
	WCFlagWithDLIDBits  = 1 << 5
	WCFlagWithTimestamp = 1 << 6
)

// Work completion opcodes (enum ib_uverbs_wc_opcode, and IB_WC_RECV and
// IB_WC_RECV_RDMA_WITH_IMM of the kernel's enum ib_wc_opcode).
const (
	WCOpSend            = 0
	WCOpRDMAWrite       = 1
	WCOpRDMARead        = 2
	WCOpCompSwap        = 3
	WCOpFetchAdd        = 4
	WCOpBindMW          = 5
	WCOpLocalInv        = 6
	WCOpRecv            = 128
	WCOpRecvRDMAWithImm = 129
)

// WC is struct ib_uverbs_wc, the work completion the kernel (and drivers
// that share completion queues with user space in this form, as rxe does)
// write.
//
// Layout: 0 wr_id, 8 status, 12 opcode, 16 vendor_err, 20 byte_len, 24
// ex (be32 imm_data or u32 invalidate_rkey), 28 qp_num, 32 src_qp, 36
// wc_flags, 40 pkey_index (u16), 42 slid (u16), 44 sl, 45 dlid_path_bits,
// 46 port_num, 47 reserved.
type WC struct {
	WRID         uint64
	Status       uint32
	Opcode       uint32
	VendorErr    uint32
	ByteLen      uint32
	Ex           uint32 // immediate data (raw big-endian bytes read as host order) or invalidated rkey
	QPNum        uint32
	SrcQP        uint32
	Flags        uint32
	PKeyIndex    uint16
	SLID         uint16
	SL           uint8
	DLIDPathBits uint8
	PortNum      uint8
}

// Decode fills w from b[:WCSize].
func (w *WC) Decode(b []byte) error {
	if len(b) < WCSize {
		return ErrShortBuffer
	}
	w.WRID = ne.Uint64(b[0:])
	w.Status = ne.Uint32(b[8:])
	w.Opcode = ne.Uint32(b[12:])
	w.VendorErr = ne.Uint32(b[16:])
	w.ByteLen = ne.Uint32(b[20:])
	w.Ex = ne.Uint32(b[24:])
	w.QPNum = ne.Uint32(b[28:])
	w.SrcQP = ne.Uint32(b[32:])
	w.Flags = ne.Uint32(b[36:])
	w.PKeyIndex = ne.Uint16(b[40:])
	w.SLID = ne.Uint16(b[42:])
	w.SL = b[44]
	w.DLIDPathBits = b[45]
	w.PortNum = b[46]
	return nil
}

// Encode writes w into b[:WCSize], reserved byte zero (a fake kernel's
// completion).
func (w *WC) Encode(b []byte) error {
	if len(b) < WCSize {
		return ErrShortBuffer
	}
	ne.PutUint64(b[0:], w.WRID)
	ne.PutUint32(b[8:], w.Status)
	ne.PutUint32(b[12:], w.Opcode)
	ne.PutUint32(b[16:], w.VendorErr)
	ne.PutUint32(b[20:], w.ByteLen)
	ne.PutUint32(b[24:], w.Ex)
	ne.PutUint32(b[28:], w.QPNum)
	ne.PutUint32(b[32:], w.SrcQP)
	ne.PutUint32(b[36:], w.Flags)
	ne.PutUint16(b[40:], w.PKeyIndex)
	ne.PutUint16(b[42:], w.SLID)
	b[44] = w.SL
	b[45] = w.DLIDPathBits
	b[46] = w.PortNum
	b[47] = 0
	return nil
}
