package uverbs

// GetContext is IB_USER_VERBS_CMD_GET_CONTEXT: it creates the device
// context of the open file and its async event descriptor.
//
// Payload: 0 response, 8 driver request. Response: 0 async_fd, 4
// num_comp_vectors, 8 driver response.
type GetContext struct {
	Driver    []byte // driver request bytes (none for rxe and siw)
	DriverOut int    // driver response length (siw: 8, struct siw_uresp_alloc_ctx)
}

// GetContextRespSize is the size of struct ib_uverbs_get_context_resp.
const GetContextRespSize = 8

func (c *GetContext) Cmd() Cmd     { return CmdGetContext }
func (c *GetContext) Size() int    { return HeaderSize + 8 + len(c.Driver) }
func (c *GetContext) RespLen() int { return GetContextRespSize + c.DriverOut }
func (c *GetContext) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdGetContext, 8, c.Driver, c.RespLen())
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	return msg, nil
}

// GetContextResp is struct ib_uverbs_get_context_resp.
type GetContextResp struct {
	AsyncFD        int32
	NumCompVectors uint32
}

// Decode fills r from b[:GetContextRespSize].
func (r *GetContextResp) Decode(b []byte) error {
	if len(b) < GetContextRespSize {
		return ErrShortBuffer
	}
	r.AsyncFD = int32(ne.Uint32(b[0:]))
	r.NumCompVectors = ne.Uint32(b[4:])
	return nil
}

// QueryDevice is IB_USER_VERBS_CMD_QUERY_DEVICE. Payload: 0 response.
type QueryDevice struct{}

// DeviceAttrSize is the size of struct ib_uverbs_query_device_resp.
const DeviceAttrSize = 176

func (c *QueryDevice) Cmd() Cmd     { return CmdQueryDevice }
func (c *QueryDevice) Size() int    { return HeaderSize + 8 }
func (c *QueryDevice) RespLen() int { return DeviceAttrSize }
func (c *QueryDevice) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdQueryDevice, 8, nil, DeviceAttrSize)
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	return msg, nil
}

// DeviceAttr is the part of struct ib_uverbs_query_device_resp the fabric
// uses.
//
// Layout: 0 fw_ver, 8 node_guid (be), 16 sys_image_guid (be), 24
// max_mr_size, 32 page_size_cap, 40 vendor_id, 44 vendor_part_id, 48
// hw_ver, 52 max_qp, 56 max_qp_wr, 60 device_cap_flags, 64 max_sge, 68
// max_sge_rd, 72 max_cq, 76 max_cqe, 80 max_mr, 84 max_pd, 88
// max_qp_rd_atom, 92 max_ee_rd_atom, 96 max_res_rd_atom, 100
// max_qp_init_rd_atom, 104 max_ee_init_rd_atom, 108 atomic_cap, ..., 132
// max_mcast_grp, ..., 144 max_ah, ..., 168 max_pkeys (u16), 170
// local_ca_ack_delay, 171 phys_port_cnt, 172 reserved[4].
type DeviceAttr struct {
	FWVer           uint64
	NodeGUID        uint64 // host value of the big-endian field
	VendorID        uint32
	VendorPartID    uint32
	HWVer           uint32
	MaxQP           uint32
	MaxQPWR         uint32
	DeviceCapFlags  uint32
	MaxSGE          uint32
	MaxCQ           uint32
	MaxCQE          uint32
	MaxMR           uint32
	MaxPD           uint32
	MaxQPRdAtom     uint32
	MaxQPInitRdAtom uint32
	MaxMcastGrp     uint32
	MaxAH           uint32
	MaxPKeys        uint16
	PhysPortCnt     uint8
}

// Decode fills d from b[:DeviceAttrSize].
func (d *DeviceAttr) Decode(b []byte) error {
	if len(b) < DeviceAttrSize {
		return ErrShortBuffer
	}
	d.FWVer = ne.Uint64(b[0:])
	d.NodeGUID = be64(b[8:])
	d.VendorID = ne.Uint32(b[40:])
	d.VendorPartID = ne.Uint32(b[44:])
	d.HWVer = ne.Uint32(b[48:])
	d.MaxQP = ne.Uint32(b[52:])
	d.MaxQPWR = ne.Uint32(b[56:])
	d.DeviceCapFlags = ne.Uint32(b[60:])
	d.MaxSGE = ne.Uint32(b[64:])
	d.MaxCQ = ne.Uint32(b[72:])
	d.MaxCQE = ne.Uint32(b[76:])
	d.MaxMR = ne.Uint32(b[80:])
	d.MaxPD = ne.Uint32(b[84:])
	d.MaxQPRdAtom = ne.Uint32(b[88:])
	d.MaxQPInitRdAtom = ne.Uint32(b[100:])
	d.MaxMcastGrp = ne.Uint32(b[132:])
	d.MaxAH = ne.Uint32(b[144:])
	d.MaxPKeys = ne.Uint16(b[168:])
	d.PhysPortCnt = b[171]
	return nil
}

// Encode writes d into b[:DeviceAttrSize], fields it does not hold zero
// (a fake kernel's response).
func (d *DeviceAttr) Encode(b []byte) error {
	if len(b) < DeviceAttrSize {
		return ErrShortBuffer
	}
	clear(b[:DeviceAttrSize])
	ne.PutUint64(b[0:], d.FWVer)
	putBE64(b[8:], d.NodeGUID)
	ne.PutUint32(b[40:], d.VendorID)
	ne.PutUint32(b[44:], d.VendorPartID)
	ne.PutUint32(b[48:], d.HWVer)
	ne.PutUint32(b[52:], d.MaxQP)
	ne.PutUint32(b[56:], d.MaxQPWR)
	ne.PutUint32(b[60:], d.DeviceCapFlags)
	ne.PutUint32(b[64:], d.MaxSGE)
	ne.PutUint32(b[72:], d.MaxCQ)
	ne.PutUint32(b[76:], d.MaxCQE)
	ne.PutUint32(b[80:], d.MaxMR)
	ne.PutUint32(b[84:], d.MaxPD)
	ne.PutUint32(b[88:], d.MaxQPRdAtom)
	ne.PutUint32(b[100:], d.MaxQPInitRdAtom)
	ne.PutUint32(b[132:], d.MaxMcastGrp)
	ne.PutUint32(b[144:], d.MaxAH)
	ne.PutUint16(b[168:], d.MaxPKeys)
	b[171] = d.PhysPortCnt
	return nil
}

// QueryPort is IB_USER_VERBS_CMD_QUERY_PORT. Payload: 0 response, 8
// port_num, 9 reserved[7].
type QueryPort struct {
	Port uint8
}

// PortAttrSize is the size of struct ib_uverbs_query_port_resp.
const PortAttrSize = 40

func (c *QueryPort) Cmd() Cmd     { return CmdQueryPort }
func (c *QueryPort) Size() int    { return HeaderSize + 16 }
func (c *QueryPort) RespLen() int { return PortAttrSize }
func (c *QueryPort) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdQueryPort, 16, nil, PortAttrSize)
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	p[8] = c.Port
	return msg, nil
}

// Port states (enum ibv_port_state).
const (
	PortDown   = 1
	PortInit   = 2
	PortArmed  = 3
	PortActive = 4
)

// Link layers (IBV_LINK_LAYER_*).
const (
	LinkLayerUnspecified = 0
	LinkLayerInfiniBand  = 1
	LinkLayerEthernet    = 2
)

// PortAttr is struct ib_uverbs_query_port_resp.
//
// Layout: 0 port_cap_flags, 4 max_msg_sz, 8 bad_pkey_cntr, 12
// qkey_viol_cntr, 16 gid_tbl_len, 20 pkey_tbl_len (u16), 22 lid (u16), 24
// sm_lid (u16), 26 state, 27 max_mtu, 28 active_mtu, 29 lmc, 30 max_vl_num,
// 31 sm_sl, 32 subnet_timeout, 33 init_type_reply, 34 active_width, 35
// active_speed, 36 phys_state, 37 link_layer, 38 flags, 39 reserved.
type PortAttr struct {
	PortCapFlags uint32
	MaxMsgSz     uint32
	GIDTblLen    uint32
	PKeyTblLen   uint16
	LID          uint16
	State        uint8
	MaxMTU       uint8
	ActiveMTU    uint8
	PhysState    uint8
	LinkLayer    uint8
}

// Decode fills a from b[:PortAttrSize].
func (a *PortAttr) Decode(b []byte) error {
	if len(b) < PortAttrSize {
		return ErrShortBuffer
	}
	a.PortCapFlags = ne.Uint32(b[0:])
	a.MaxMsgSz = ne.Uint32(b[4:])
	a.GIDTblLen = ne.Uint32(b[16:])
	a.PKeyTblLen = ne.Uint16(b[20:])
	a.LID = ne.Uint16(b[22:])
	a.State = b[26]
	a.MaxMTU = b[27]
	a.ActiveMTU = b[28]
	a.PhysState = b[36]
	a.LinkLayer = b[37]
	return nil
}

// Encode writes a into b[:PortAttrSize], other fields zero.
func (a *PortAttr) Encode(b []byte) error {
	if len(b) < PortAttrSize {
		return ErrShortBuffer
	}
	clear(b[:PortAttrSize])
	ne.PutUint32(b[0:], a.PortCapFlags)
	ne.PutUint32(b[4:], a.MaxMsgSz)
	ne.PutUint32(b[16:], a.GIDTblLen)
	ne.PutUint16(b[20:], a.PKeyTblLen)
	ne.PutUint16(b[22:], a.LID)
	b[26] = a.State
	b[27] = a.MaxMTU
	b[28] = a.ActiveMTU
	b[36] = a.PhysState
	b[37] = a.LinkLayer
	return nil
}

func be64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

func putBE64(b []byte, v uint64) {
	_ = b[7]
	for k := 7; k >= 0; k-- {
		b[k] = byte(v)
		v >>= 8
	}
}
