package uverbs

// AllocPD is IB_USER_VERBS_CMD_ALLOC_PD. Payload: 0 response. Response:
// 0 pd_handle.
type AllocPD struct{}

// AllocPDRespSize is the size of struct ib_uverbs_alloc_pd_resp.
const AllocPDRespSize = 4

func (c *AllocPD) Cmd() Cmd     { return CmdAllocPD }
func (c *AllocPD) Size() int    { return HeaderSize + 8 }
func (c *AllocPD) RespLen() int { return AllocPDRespSize }
func (c *AllocPD) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdAllocPD, 8, nil, AllocPDRespSize)
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	return msg, nil
}

// DeallocPD returns IB_USER_VERBS_CMD_DEALLOC_PD of handle. Payload: 0
// pd_handle.
func DeallocPD(handle uint32) Command { return &handleCmd{c: CmdDeallocPD, handle: handle} }

// Access flags of REG_MR (enum ib_access_flags, the values of
// ibv_access_flags).
const (
	AccessLocalWrite   = 1 << 0
	AccessRemoteWrite  = 1 << 1
	AccessRemoteRead   = 1 << 2
	AccessRemoteAtomic = 1 << 3
	AccessMWBind       = 1 << 4
)

// RegMR is IB_USER_VERBS_CMD_REG_MR: register [Start, Start+Length) of the
// process's memory, addressed by peers from HCAVA.
//
// Payload: 0 response, 8 start, 16 length, 24 hca_va, 32 pd_handle, 36
// access_flags, 40 driver request. Response: 0 mr_handle, 4 lkey, 8 rkey,
// 12 driver response.
type RegMR struct {
	Start, Length, HCAVA uint64
	PD                   uint32
	Access               uint32
	Driver               []byte // siw: struct siw_ureq_reg_mr (8 bytes)
	DriverOut            int    // siw: struct siw_uresp_reg_mr (8 bytes)
}

// RegMRRespSize is the size of struct ib_uverbs_reg_mr_resp.
const RegMRRespSize = 12

func (c *RegMR) Cmd() Cmd     { return CmdRegMR }
func (c *RegMR) Size() int    { return HeaderSize + 40 + len(c.Driver) }
func (c *RegMR) RespLen() int { return RegMRRespSize + c.DriverOut }
func (c *RegMR) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdRegMR, 40, c.Driver, c.RespLen())
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint64(p[8:], c.Start)
	ne.PutUint64(p[16:], c.Length)
	ne.PutUint64(p[24:], c.HCAVA)
	ne.PutUint32(p[32:], c.PD)
	ne.PutUint32(p[36:], c.Access)
	return msg, nil
}

// RegMRResp is struct ib_uverbs_reg_mr_resp.
type RegMRResp struct {
	Handle uint32
	LKey   uint32
	RKey   uint32
}

// Decode fills r from b[:RegMRRespSize].
func (r *RegMRResp) Decode(b []byte) error {
	if len(b) < RegMRRespSize {
		return ErrShortBuffer
	}
	r.Handle = ne.Uint32(b[0:])
	r.LKey = ne.Uint32(b[4:])
	r.RKey = ne.Uint32(b[8:])
	return nil
}

// Encode writes r into b[:RegMRRespSize].
func (r *RegMRResp) Encode(b []byte) error {
	if len(b) < RegMRRespSize {
		return ErrShortBuffer
	}
	ne.PutUint32(b[0:], r.Handle)
	ne.PutUint32(b[4:], r.LKey)
	ne.PutUint32(b[8:], r.RKey)
	return nil
}

// DeregMR returns IB_USER_VERBS_CMD_DEREG_MR of handle. Payload: 0
// mr_handle.
func DeregMR(handle uint32) Command { return &handleCmd{c: CmdDeregMR, handle: handle} }
