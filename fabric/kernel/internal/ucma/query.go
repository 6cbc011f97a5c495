package ucma

// Query response sizes.
const (
	QueryAddrRespSize   = 280 // struct rdma_ucm_query_addr_resp
	QueryRouteRespSize  = 208 // struct rdma_ucm_query_route_resp
	QueryPathHeaderSize = 8   // struct rdma_ucm_query_path_resp before path_data[]
)

// Offsets of the ibdev_index fields, which kernels before 5.x leave
// unwritten; Buffers presets them to InvalidIBDevIndex.
const (
	queryAddrIBDevOff  = 272
	queryRouteIBDevOff = 200
)

// QueryAddrResp is struct rdma_ucm_query_addr_resp, the response of QUERY
// with QueryAddr (IP or AF_IB addresses as bound and resolved) or QueryGID
// (both addresses as sockaddr_ib carrying the GIDs).
//
// Layout: 0 node_guid, 8 port_num, 9 reserved, 10 pkey, 12 src_size,
// 14 dst_size, 16 src_addr (sockaddr_storage), 144 dst_addr, 272
// ibdev_index, 276 reserved. The kernel stores node_guid and pkey in
// network order although the header types them __u64/__u16; NodeGUID and
// PKey hold their host values.
type QueryAddrResp struct {
	NodeGUID   uint64
	PortNum    uint8
	PKey       uint16
	SrcSize    uint16
	DstSize    uint16
	Src        Addr
	Dst        Addr
	IBDevIndex uint32 // InvalidIBDevIndex if the kernel did not fill it
}

// Decode fills r from b[:QueryAddrRespSize]. A shorter b gives
// ErrShortBuffer. An address with an unsupported family is left zero and
// its error (ErrAddrFamily) returned after every other field is filled.
func (r *QueryAddrResp) Decode(b []byte) error {
	if len(b) < QueryAddrRespSize {
		return ErrShortBuffer
	}
	r.NodeGUID = be.Uint64(b[0:])
	r.PortNum = b[8]
	r.PKey = be.Uint16(b[10:])
	r.SrcSize = ne.Uint16(b[12:])
	r.DstSize = ne.Uint16(b[14:])
	r.IBDevIndex = ne.Uint32(b[queryAddrIBDevOff:])
	var err1, err2 error
	r.Src, err1 = DecodeSockaddr(b[16:144])
	r.Dst, err2 = DecodeSockaddr(b[144:272])
	if err1 != nil {
		return err1
	}
	return err2
}

// Encode writes r into b[:QueryAddrRespSize], reserved bytes zero; a
// shorter b gives ErrShortBuffer. SrcSize and DstSize are written as given.
func (r *QueryAddrResp) Encode(b []byte) error {
	if len(b) < QueryAddrRespSize {
		return ErrShortBuffer
	}
	b = b[:QueryAddrRespSize]
	clear(b)
	be.PutUint64(b[0:], r.NodeGUID)
	b[8] = r.PortNum
	be.PutUint16(b[10:], r.PKey)
	ne.PutUint16(b[12:], r.SrcSize)
	ne.PutUint16(b[14:], r.DstSize)
	if _, err := EncodeSockaddr(b[16:144], r.Src); err != nil {
		return err
	}
	if _, err := EncodeSockaddr(b[144:272], r.Dst); err != nil {
		return err
	}
	ne.PutUint32(b[queryAddrIBDevOff:], r.IBDevIndex)
	return nil
}

// QueryRouteResp is struct rdma_ucm_query_route_resp, the response of
// QUERY_ROUTE (the pre-AF_IB query).
//
// Layout: 0 node_guid, 8 ib_route[2] (PathRec, 64 bytes each), 136
// src_addr (sockaddr_in6 slot, may hold a sockaddr_in), 164 dst_addr, 192
// num_paths, 196 port_num, 197 reserved[3], 200 ibdev_index, 204 reserved.
// node_guid is in network order; NodeGUID holds its host value. The kernel
// copies at most 28 bytes of each address, so an AF_IB id's addresses
// arrive truncated and Decode reports ErrAddrSize for them: use QUERY for
// AF_IB.
type QueryRouteResp struct {
	NodeGUID   uint64
	Route      [2]PathRec
	Src        Addr
	Dst        Addr
	NumPaths   uint32
	PortNum    uint8
	IBDevIndex uint32 // InvalidIBDevIndex if the kernel did not fill it
}

// Decode fills r from b[:QueryRouteRespSize]. A shorter b gives
// ErrShortBuffer. An address with an unsupported family is left zero and
// its error returned after every other field is filled.
func (r *QueryRouteResp) Decode(b []byte) error {
	if len(b) < QueryRouteRespSize {
		return ErrShortBuffer
	}
	r.NodeGUID = be.Uint64(b[0:])
	_ = r.Route[0].Decode(b[8:72])
	_ = r.Route[1].Decode(b[72:136])
	r.NumPaths = ne.Uint32(b[192:])
	r.PortNum = b[196]
	r.IBDevIndex = ne.Uint32(b[queryRouteIBDevOff:])
	var err1, err2 error
	r.Src, err1 = DecodeSockaddr(b[136:164])
	r.Dst, err2 = DecodeSockaddr(b[164:192])
	if err1 != nil {
		return err1
	}
	return err2
}

// Encode writes r into b[:QueryRouteRespSize], reserved bytes zero; a
// shorter b gives ErrShortBuffer, an AF_IB address ErrAddrSize.
func (r *QueryRouteResp) Encode(b []byte) error {
	if len(b) < QueryRouteRespSize {
		return ErrShortBuffer
	}
	b = b[:QueryRouteRespSize]
	clear(b)
	be.PutUint64(b[0:], r.NodeGUID)
	_ = r.Route[0].Encode(b[8:72])
	_ = r.Route[1].Encode(b[72:136])
	if _, err := EncodeSockaddr(b[136:164], r.Src); err != nil {
		return err
	}
	if _, err := EncodeSockaddr(b[164:192], r.Dst); err != nil {
		return err
	}
	ne.PutUint32(b[192:], r.NumPaths)
	b[196] = r.PortNum
	ne.PutUint32(b[queryRouteIBDevOff:], r.IBDevIndex)
	return nil
}

// DecodeQueryPath decodes a QUERY (QueryPath) response: {u32 num_paths,
// u32 reserved} followed by 72-byte PathData records. It returns the
// kernel's num_paths and fills dst[:n], where n is the smallest of
// num_paths, len(dst) and the number of whole records in b. A b shorter
// than the 8-byte header gives ErrShortBuffer. It does not allocate.
func DecodeQueryPath(b []byte, dst []PathData) (num uint32, n int, err error) {
	if len(b) < QueryPathHeaderSize {
		return 0, 0, ErrShortBuffer
	}
	num = ne.Uint32(b)
	n = min(len(dst), (len(b)-QueryPathHeaderSize)/PathDataSize)
	if uint64(n) > uint64(num) {
		n = int(num)
	}
	for i := range n {
		off := QueryPathHeaderSize + i*PathDataSize
		_ = dst[i].Decode(b[off : off+PathDataSize])
	}
	return num, n, nil
}

// EncodeQueryPath writes a QueryPath response holding paths (num_paths =
// len(paths)) into b and returns the written slice; a b too short gives
// ErrShortBuffer.
func EncodeQueryPath(b []byte, paths []PathData) ([]byte, error) {
	size := QueryPathHeaderSize + len(paths)*PathDataSize
	if len(b) < size {
		return nil, ErrShortBuffer
	}
	b = b[:size]
	ne.PutUint32(b[0:], uint32(len(paths)))
	ne.PutUint32(b[4:], 0)
	for i := range paths {
		off := QueryPathHeaderSize + i*PathDataSize
		_ = paths[i].Encode(b[off : off+PathDataSize])
	}
	return b, nil
}
