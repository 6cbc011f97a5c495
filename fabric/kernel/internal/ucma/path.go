package ucma

// Path record sizes.
const (
	PathRecSize    = 64 // struct ib_user_path_rec
	PathRecordSize = 64 // packed IBTA SA PathRecord
	PathDataSize   = 72 // struct ib_path_rec_data
)

// PathRec is struct ib_user_path_rec (uapi ib_user_sa.h), the unpacked path
// record of the QUERY_ROUTE response. Fields hold host values; the ABI's
// be16/be32 fields (dlid, slid, flow_label, pkey) are converted.
//
// Layout: 0 dgid, 16 sgid, 32 dlid (be16), 34 slid (be16), 36 raw_traffic,
// 40 flow_label (be32), 44 reversible, 48 mtu, 52 pkey (be16), 54 hop_limit,
// 55 traffic_class, 56 numb_path, 57 sl, 58 mtu_selector, 59 rate_selector,
// 60 rate, 61 packet_life_time_selector, 62 packet_life_time, 63 preference.
type PathRec struct {
	DGID                   GID
	SGID                   GID
	DLID                   uint16
	SLID                   uint16
	RawTraffic             uint32
	FlowLabel              uint32
	Reversible             uint32
	MTU                    uint32
	PKey                   uint16
	HopLimit               uint8
	TrafficClass           uint8
	NumbPath               uint8
	SL                     uint8
	MTUSelector            uint8
	RateSelector           uint8
	Rate                   uint8
	PacketLifeTimeSelector uint8
	PacketLifeTime         uint8
	Preference             uint8
}

// Encode writes p into b[:PathRecSize]; a shorter b gives ErrShortBuffer.
func (p *PathRec) Encode(b []byte) error {
	if len(b) < PathRecSize {
		return ErrShortBuffer
	}
	copy(b[0:16], p.DGID[:])
	copy(b[16:32], p.SGID[:])
	be.PutUint16(b[32:], p.DLID)
	be.PutUint16(b[34:], p.SLID)
	ne.PutUint32(b[36:], p.RawTraffic)
	be.PutUint32(b[40:], p.FlowLabel)
	ne.PutUint32(b[44:], p.Reversible)
	ne.PutUint32(b[48:], p.MTU)
	be.PutUint16(b[52:], p.PKey)
	b[54] = p.HopLimit
	b[55] = p.TrafficClass
	b[56] = p.NumbPath
	b[57] = p.SL
	b[58] = p.MTUSelector
	b[59] = p.RateSelector
	b[60] = p.Rate
	b[61] = p.PacketLifeTimeSelector
	b[62] = p.PacketLifeTime
	b[63] = p.Preference
	return nil
}

// Decode fills p from b[:PathRecSize]; a shorter b gives ErrShortBuffer.
func (p *PathRec) Decode(b []byte) error {
	if len(b) < PathRecSize {
		return ErrShortBuffer
	}
	p.DGID = GID(b[0:16])
	p.SGID = GID(b[16:32])
	p.DLID = be.Uint16(b[32:])
	p.SLID = be.Uint16(b[34:])
	p.RawTraffic = ne.Uint32(b[36:])
	p.FlowLabel = be.Uint32(b[40:])
	p.Reversible = ne.Uint32(b[44:])
	p.MTU = ne.Uint32(b[48:])
	p.PKey = be.Uint16(b[52:])
	p.HopLimit = b[54]
	p.TrafficClass = b[55]
	p.NumbPath = b[56]
	p.SL = b[57]
	p.MTUSelector = b[58]
	p.RateSelector = b[59]
	p.Rate = b[60]
	p.PacketLifeTimeSelector = b[61]
	p.PacketLifeTime = b[62]
	p.Preference = b[63]
	return nil
}

// PathRecord is an IBTA SA PathRecord in the packed, big-endian wire form
// the kernel puts in ib_path_rec_data.path_rec (QUERY PATH responses, the
// IB_PATH option). Fields hold host values; sub-byte fields are unpacked.
// Reserved bits are dropped on decode and written as zero.
//
// Wire layout: 0 service_id (be64), 8 dgid, 24 sgid, 40 dlid, 42 slid,
// 44 be32 {raw_traffic:1, reserved:3, flow_label:20, hop_limit:8},
// 48 traffic_class, 49 {reversible:1, numb_path:7}, 50 pkey,
// 52 be16 {qos_class:12, sl:4}, 54 {mtu_selector:2, mtu:6},
// 55 {rate_selector:2, rate:6}, 56 {packet_life_time_selector:2,
// packet_life_time:6}, 57 preference, 58 reserved[6].
type PathRecord struct {
	ServiceID              uint64
	DGID                   GID
	SGID                   GID
	DLID                   uint16
	SLID                   uint16
	RawTraffic             bool
	FlowLabel              uint32 // 20 bits
	HopLimit               uint8
	TrafficClass           uint8
	Reversible             bool
	NumbPath               uint8  // 7 bits
	PKey                   uint16 // host value of the be16 pkey
	QoSClass               uint16 // 12 bits
	SL                     uint8  // 4 bits
	MTUSelector            uint8  // 2 bits
	MTU                    uint8  // 6 bits
	RateSelector           uint8  // 2 bits
	Rate                   uint8  // 6 bits
	PacketLifeTimeSelector uint8  // 2 bits
	PacketLifeTime         uint8  // 6 bits
	Preference             uint8
}

// Encode packs p into b[:PathRecordSize]; bits beyond a field's width are
// dropped. A shorter b gives ErrShortBuffer.
func (p *PathRecord) Encode(b []byte) error {
	if len(b) < PathRecordSize {
		return ErrShortBuffer
	}
	be.PutUint64(b[0:], p.ServiceID)
	copy(b[8:24], p.DGID[:])
	copy(b[24:40], p.SGID[:])
	be.PutUint16(b[40:], p.DLID)
	be.PutUint16(b[42:], p.SLID)
	w := (p.FlowLabel&0xFFFFF)<<8 | uint32(p.HopLimit)
	if p.RawTraffic {
		w |= 1 << 31
	}
	be.PutUint32(b[44:], w)
	b[48] = p.TrafficClass
	b[49] = p.NumbPath & 0x7F
	if p.Reversible {
		b[49] |= 0x80
	}
	be.PutUint16(b[50:], p.PKey)
	be.PutUint16(b[52:], (p.QoSClass&0xFFF)<<4|uint16(p.SL&0xF))
	b[54] = p.MTUSelector<<6 | p.MTU&0x3F
	b[55] = p.RateSelector<<6 | p.Rate&0x3F
	b[56] = p.PacketLifeTimeSelector<<6 | p.PacketLifeTime&0x3F
	b[57] = p.Preference
	clear(b[58:PathRecordSize])
	return nil
}

// Decode unpacks p from b[:PathRecordSize]; a shorter b gives
// ErrShortBuffer.
func (p *PathRecord) Decode(b []byte) error {
	if len(b) < PathRecordSize {
		return ErrShortBuffer
	}
	p.ServiceID = be.Uint64(b[0:])
	p.DGID = GID(b[8:24])
	p.SGID = GID(b[24:40])
	p.DLID = be.Uint16(b[40:])
	p.SLID = be.Uint16(b[42:])
	w := be.Uint32(b[44:])
	p.RawTraffic = w>>31 != 0
	p.FlowLabel = w >> 8 & 0xFFFFF
	p.HopLimit = uint8(w)
	p.TrafficClass = b[48]
	p.Reversible = b[49]&0x80 != 0
	p.NumbPath = b[49] & 0x7F
	p.PKey = be.Uint16(b[50:])
	q := be.Uint16(b[52:])
	p.QoSClass = q >> 4
	p.SL = uint8(q & 0xF)
	p.MTUSelector = b[54] >> 6
	p.MTU = b[54] & 0x3F
	p.RateSelector = b[55] >> 6
	p.Rate = b[55] & 0x3F
	p.PacketLifeTimeSelector = b[56] >> 6
	p.PacketLifeTime = b[56] & 0x3F
	p.Preference = b[57]
	return nil
}

// PathData is struct ib_path_rec_data: flags (Path* bits, host-endian),
// a reserved word, and the packed record.
type PathData struct {
	Flags  uint32
	Record PathRecord
}

// Encode writes d into b[:PathDataSize]; a shorter b gives ErrShortBuffer.
func (d *PathData) Encode(b []byte) error {
	if len(b) < PathDataSize {
		return ErrShortBuffer
	}
	ne.PutUint32(b[0:], d.Flags)
	ne.PutUint32(b[4:], 0)
	return d.Record.Encode(b[8:PathDataSize])
}

// Decode fills d from b[:PathDataSize]; a shorter b gives ErrShortBuffer.
func (d *PathData) Decode(b []byte) error {
	if len(b) < PathDataSize {
		return ErrShortBuffer
	}
	d.Flags = ne.Uint32(b[0:])
	return d.Record.Decode(b[8:PathDataSize])
}
