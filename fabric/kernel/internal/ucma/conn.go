package ucma

// Sizes of the connection-parameter structures.
const (
	ConnParamSize = 272 // struct rdma_ucm_conn_param
	UDParamSize   = 304 // struct rdma_ucm_ud_param
	AHAttrSize    = 32  // struct ib_uverbs_ah_attr
	ECESize       = 8   // struct rdma_ucm_ece
)

// ConnParam is struct rdma_ucm_conn_param, the connection parameters of
// CONNECT and ACCEPT and the conn view of an event. Fields are host values.
//
// Layout: 0 qp_num, 4 qkey, 8 private_data[256], 264 private_data_len,
// 265 srq, 266 responder_resources, 267 initiator_depth, 268 flow_control,
// 269 retry_count, 270 rnr_retry_count, 271 valid.
type ConnParam struct {
	QPNum              uint32
	QKey               uint32 // only used by the kernel for AF_IB ids
	PrivateData        [MaxPrivateData]byte
	PrivateDataLen     uint8
	SRQ                uint8
	ResponderResources uint8
	InitiatorDepth     uint8
	FlowControl        uint8
	RetryCount         uint8
	RNRRetryCount      uint8
	// Valid must be 1 on CONNECT (the kernel rejects 0 with EINVAL); on
	// ACCEPT, 0 means "no parameters" and makes the kernel send an RTU
	// for an id whose QP user space moved to RTS itself.
	Valid uint8
}

// SetPrivateData copies p into PrivateData, zeroes the rest, and sets
// PrivateDataLen. More than 255 bytes gives ErrPrivateData.
func (c *ConnParam) SetPrivateData(p []byte) error {
	return setPrivateData(&c.PrivateData, &c.PrivateDataLen, p)
}

// Data returns PrivateData[:PrivateDataLen], aliasing c.
func (c *ConnParam) Data() []byte { return c.PrivateData[:c.PrivateDataLen] }

// Encode writes c into b[:ConnParamSize]; a shorter b gives ErrShortBuffer.
func (c *ConnParam) Encode(b []byte) error {
	if len(b) < ConnParamSize {
		return ErrShortBuffer
	}
	ne.PutUint32(b[0:], c.QPNum)
	ne.PutUint32(b[4:], c.QKey)
	copy(b[8:264], c.PrivateData[:])
	b[264] = c.PrivateDataLen
	b[265] = c.SRQ
	b[266] = c.ResponderResources
	b[267] = c.InitiatorDepth
	b[268] = c.FlowControl
	b[269] = c.RetryCount
	b[270] = c.RNRRetryCount
	b[271] = c.Valid
	return nil
}

// Decode fills c from b[:ConnParamSize]; a shorter b gives ErrShortBuffer.
func (c *ConnParam) Decode(b []byte) error {
	if len(b) < ConnParamSize {
		return ErrShortBuffer
	}
	c.QPNum = ne.Uint32(b[0:])
	c.QKey = ne.Uint32(b[4:])
	copy(c.PrivateData[:], b[8:264])
	c.PrivateDataLen = b[264]
	c.SRQ = b[265]
	c.ResponderResources = b[266]
	c.InitiatorDepth = b[267]
	c.FlowControl = b[268]
	c.RetryCount = b[269]
	c.RNRRetryCount = b[270]
	c.Valid = b[271]
	return nil
}

// AHAttr is struct ib_uverbs_ah_attr, an address handle description: the
// ah_attr of a UD event and of ib_uverbs_qp_attr. All fields are
// host-endian.
//
// Layout: 0 dgid[16], 16 flow_label, 20 sgid_index, 21 hop_limit,
// 22 traffic_class, 23 reserved, 24 dlid, 26 sl, 27 src_path_bits,
// 28 static_rate, 29 is_global, 30 port_num, 31 reserved.
type AHAttr struct {
	DGID         GID
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

// Encode writes a into b[:AHAttrSize], reserved bytes zero; a shorter b
// gives ErrShortBuffer.
func (a *AHAttr) Encode(b []byte) error {
	if len(b) < AHAttrSize {
		return ErrShortBuffer
	}
	copy(b[0:16], a.DGID[:])
	ne.PutUint32(b[16:], a.FlowLabel)
	b[20] = a.SGIDIndex
	b[21] = a.HopLimit
	b[22] = a.TrafficClass
	b[23] = 0
	ne.PutUint16(b[24:], a.DLID)
	b[26] = a.SL
	b[27] = a.SrcPathBits
	b[28] = a.StaticRate
	b[29] = a.IsGlobal
	b[30] = a.PortNum
	b[31] = 0
	return nil
}

// Decode fills a from b[:AHAttrSize]; a shorter b gives ErrShortBuffer.
func (a *AHAttr) Decode(b []byte) error {
	if len(b) < AHAttrSize {
		return ErrShortBuffer
	}
	a.DGID = GID(b[0:16])
	a.FlowLabel = ne.Uint32(b[16:])
	a.SGIDIndex = b[20]
	a.HopLimit = b[21]
	a.TrafficClass = b[22]
	a.DLID = ne.Uint16(b[24:])
	a.SL = b[26]
	a.SrcPathBits = b[27]
	a.StaticRate = b[28]
	a.IsGlobal = b[29]
	a.PortNum = b[30]
	return nil
}

// UDParam is struct rdma_ucm_ud_param, the UD view of an event (ids with a
// UD QP and multicast events).
//
// Layout: 0 qp_num, 4 qkey, 8 ah_attr (32), 40 private_data[256],
// 296 private_data_len, 297 reserved[7].
type UDParam struct {
	QPNum          uint32
	QKey           uint32
	AHAttr         AHAttr
	PrivateData    [MaxPrivateData]byte
	PrivateDataLen uint8
}

// Data returns PrivateData[:PrivateDataLen], aliasing u.
func (u *UDParam) Data() []byte { return u.PrivateData[:u.PrivateDataLen] }

// Encode writes u into b[:UDParamSize], reserved bytes zero; a shorter b
// gives ErrShortBuffer.
func (u *UDParam) Encode(b []byte) error {
	if len(b) < UDParamSize {
		return ErrShortBuffer
	}
	ne.PutUint32(b[0:], u.QPNum)
	ne.PutUint32(b[4:], u.QKey)
	_ = u.AHAttr.Encode(b[8:40])
	copy(b[40:296], u.PrivateData[:])
	b[296] = u.PrivateDataLen
	clear(b[297:UDParamSize])
	return nil
}

// Decode fills u from b[:UDParamSize]; a shorter b gives ErrShortBuffer.
func (u *UDParam) Decode(b []byte) error {
	if len(b) < UDParamSize {
		return ErrShortBuffer
	}
	u.QPNum = ne.Uint32(b[0:])
	u.QKey = ne.Uint32(b[4:])
	_ = u.AHAttr.Decode(b[8:40])
	copy(u.PrivateData[:], b[40:296])
	u.PrivateDataLen = b[296]
	return nil
}

// ECE is struct rdma_ucm_ece, the enhanced connection establishment
// options of CONNECT, ACCEPT and events.
type ECE struct {
	VendorID uint32
	AttrMod  uint32
}

// put writes e at b[0:8].
func (e ECE) put(b []byte) {
	ne.PutUint32(b[0:], e.VendorID)
	ne.PutUint32(b[4:], e.AttrMod)
}

// getECE reads an ECE at b[0:8].
func getECE(b []byte) ECE {
	return ECE{VendorID: ne.Uint32(b[0:]), AttrMod: ne.Uint32(b[4:])}
}

// setPrivateData implements the SetPrivateData methods.
func setPrivateData(dst *[MaxPrivateData]byte, n *uint8, p []byte) error {
	if len(p) > 255 {
		return ErrPrivateData
	}
	copy(dst[:], p)
	clear(dst[len(p):])
	*n = uint8(len(p))
	return nil
}
