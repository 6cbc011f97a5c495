package ucma

// BindIP is BIND_IP, the pre-AF_IB bind: the address travels in a 28-byte
// sockaddr_in6 slot, so only IP addresses (or none) fit. No response.
//
// Payload (40 bytes): 0 response (unused, zero), 8 addr (sockaddr_in6
// slot), 36 id.
type BindIP struct {
	ID   uint32
	Addr Addr
}

// Cmd returns CmdBindIP.
func (*BindIP) Cmd() Cmd { return CmdBindIP }

// Size returns the encoded length, 48.
func (*BindIP) Size() int { return HeaderSize + InBindIP }

// RespLen returns 0.
func (*BindIP) RespLen() int { return 0 }

// Encode implements Command; resp is ignored. An AF_IB Addr gives
// ErrAddrFamily.
func (c *BindIP) Encode(b []byte, _ uintptr) ([]byte, error) {
	if c.Addr.IsIB() {
		return nil, ErrAddrFamily
	}
	b, err := frame(b, CmdBindIP, InBindIP, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	_, _ = EncodeSockaddr(p[8:36], c.Addr)
	ne.PutUint32(p[36:], c.ID)
	return b, nil
}

// ResolveIP is RESOLVE_IP, the pre-AF_IB address resolution. No response;
// completion is an ADDR_RESOLVED or ADDR_ERROR event.
//
// Payload (64 bytes): 0 src (sockaddr_in6 slot; zero for "any"), 28 dst,
// 56 id, 60 timeout_ms.
type ResolveIP struct {
	ID        uint32
	TimeoutMs uint32
	Src       Addr // may be the zero Addr
	Dst       Addr
}

// Cmd returns CmdResolveIP.
func (*ResolveIP) Cmd() Cmd { return CmdResolveIP }

// Size returns the encoded length, 72.
func (*ResolveIP) Size() int { return HeaderSize + InResolveIP }

// RespLen returns 0.
func (*ResolveIP) RespLen() int { return 0 }

// Encode implements Command; resp is ignored. An AF_IB address gives
// ErrAddrFamily.
func (c *ResolveIP) Encode(b []byte, _ uintptr) ([]byte, error) {
	if c.Src.IsIB() || c.Dst.IsIB() {
		return nil, ErrAddrFamily
	}
	b, err := frame(b, CmdResolveIP, InResolveIP, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	_, _ = EncodeSockaddr(p[0:28], c.Src)
	_, _ = EncodeSockaddr(p[28:56], c.Dst)
	ne.PutUint32(p[56:], c.ID)
	ne.PutUint32(p[60:], c.TimeoutMs)
	return b, nil
}

// QueryRoute is QUERY_ROUTE, the pre-AF_IB query. Response: QueryRouteResp
// (208 bytes).
//
// Payload (16 bytes): the QUERY layout, 0 response, 8 id, 12 option (0,
// unused).
type QueryRoute struct {
	ID uint32
}

// Cmd returns CmdQueryRoute.
func (*QueryRoute) Cmd() Cmd { return CmdQueryRoute }

// Size returns the encoded length, 24.
func (*QueryRoute) Size() int { return HeaderSize + InQueryRoute }

// RespLen returns OutQueryRoute.
func (*QueryRoute) RespLen() int { return OutQueryRoute }

// Encode implements Command.
func (c *QueryRoute) Encode(b []byte, resp uintptr) ([]byte, error) {
	return encodeRespID(b, CmdQueryRoute, OutQueryRoute, resp, c.ID, 0)
}

// prefill marks ibdev_index as unset, for kernels that do not write it.
func (*QueryRoute) prefill(r []byte) {
	if len(r) >= queryRouteIBDevOff+4 {
		ne.PutUint32(r[queryRouteIBDevOff:], InvalidIBDevIndex)
	}
}

// Query is QUERY. Response by Option: QueryAddr and QueryGID give
// QueryAddrResp (280 bytes), QueryPath gives a path list
// (DecodeQueryPath), QueryIBService service records.
//
// Payload (16 bytes): 0 response, 8 id, 12 option.
type Query struct {
	ID     uint32
	Option uint32 // Query*
	// Out overrides the response size. Zero means OutQueryAddr for
	// QueryAddr and QueryGID, OutQueryPath for QueryPath, and 0 (which the
	// kernel refuses with ENOSPC) for any other option.
	Out uint16
}

// Cmd returns CmdQuery.
func (*Query) Cmd() Cmd { return CmdQuery }

// Size returns the encoded length, 24.
func (*Query) Size() int { return HeaderSize + InQuery }

// RespLen returns the response size for Option, or Out if set.
func (c *Query) RespLen() int {
	if c.Out != 0 {
		return int(c.Out)
	}
	switch c.Option {
	case QueryAddr, QueryGID:
		return OutQueryAddr
	case QueryPath:
		return OutQueryPath
	}
	return 0
}

// Encode implements Command.
func (c *Query) Encode(b []byte, resp uintptr) ([]byte, error) {
	return encodeRespID(b, CmdQuery, c.RespLen(), resp, c.ID, c.Option)
}

// prefill marks ibdev_index as unset, for kernels that do not write it.
func (c *Query) prefill(r []byte) {
	if (c.Option == QueryAddr || c.Option == QueryGID) && len(r) >= queryAddrIBDevOff+4 {
		ne.PutUint32(r[queryAddrIBDevOff:], InvalidIBDevIndex)
	}
}

// Bind is BIND: bind an id to an IP or AF_IB address. No response.
//
// Payload (136 bytes): 0 id, 4 addr_size (u16), 6 reserved, 8 addr
// (sockaddr_storage). addr_size is Addr.Size(); the kernel requires it to
// match the family (EINVAL).
type Bind struct {
	ID   uint32
	Addr Addr
}

// Cmd returns CmdBind.
func (*Bind) Cmd() Cmd { return CmdBind }

// Size returns the encoded length, 144.
func (*Bind) Size() int { return HeaderSize + InBind }

// RespLen returns 0.
func (*Bind) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *Bind) Encode(b []byte, _ uintptr) ([]byte, error) {
	b, err := frame(b, CmdBind, InBind, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint32(p[0:], c.ID)
	n, _ := EncodeSockaddr(p[8:136], c.Addr)
	ne.PutUint16(p[4:], uint16(n))
	return b, nil
}

// ResolveAddr is RESOLVE_ADDR: resolve the destination (and bind the
// source if given and the id is unbound). No response; completion is an
// ADDR_RESOLVED or ADDR_ERROR event.
//
// Payload (272 bytes): 0 id, 4 timeout_ms, 8 src_size (u16), 10 dst_size
// (u16), 12 reserved, 16 src (sockaddr_storage), 144 dst.
type ResolveAddr struct {
	ID        uint32
	TimeoutMs uint32
	Src       Addr // the zero Addr gives src_size 0: no source
	Dst       Addr
}

// Cmd returns CmdResolveAddr.
func (*ResolveAddr) Cmd() Cmd { return CmdResolveAddr }

// Size returns the encoded length, 280.
func (*ResolveAddr) Size() int { return HeaderSize + InResolveAddr }

// RespLen returns 0.
func (*ResolveAddr) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *ResolveAddr) Encode(b []byte, _ uintptr) ([]byte, error) {
	b, err := frame(b, CmdResolveAddr, InResolveAddr, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint32(p[0:], c.ID)
	ne.PutUint32(p[4:], c.TimeoutMs)
	ns, _ := EncodeSockaddr(p[16:144], c.Src)
	nd, _ := EncodeSockaddr(p[144:272], c.Dst)
	ne.PutUint16(p[8:], uint16(ns))
	ne.PutUint16(p[10:], uint16(nd))
	return b, nil
}

// ResolveIBService is RESOLVE_IB_SERVICE (2025 kernels): resolve an IB
// service record by id and/or name. No response; completion is an
// ADDRINFO_RESOLVED or ADDRINFO_ERROR event.
//
// Payload (88 bytes): 0 id, 4 reserved, 8 service_id (u64), 16 name[64],
// 80 flags, 84 reserved.
type ResolveIBService struct {
	ID        uint32
	ServiceID uint64
	// Name is at most 63 bytes (ErrServiceName); it is NUL-padded.
	Name  string
	Flags uint32 // IBServiceByID | IBServiceByName
}

// Cmd returns CmdResolveIBService.
func (*ResolveIBService) Cmd() Cmd { return CmdResolveIBService }

// Size returns the encoded length, 96.
func (*ResolveIBService) Size() int { return HeaderSize + InResolveIBService }

// RespLen returns 0.
func (*ResolveIBService) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *ResolveIBService) Encode(b []byte, _ uintptr) ([]byte, error) {
	if len(c.Name) >= IBServiceNameSize {
		return nil, ErrServiceName
	}
	b, err := frame(b, CmdResolveIBService, InResolveIBService, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint32(p[0:], c.ID)
	ne.PutUint64(p[8:], c.ServiceID)
	copy(p[16:16+IBServiceNameSize], c.Name)
	ne.PutUint32(p[80:], c.Flags)
	return b, nil
}
