package ucma

// JoinIPMcast is JOIN_IP_MCAST, the pre-AF_IB join (full member only).
// Response: {u32 mc_id}; completion is a MULTICAST_JOIN or MULTICAST_ERROR
// event whose uid is UID.
//
// Payload (48 bytes): 0 response, 8 uid, 16 addr (sockaddr_in6 slot),
// 44 id.
type JoinIPMcast struct {
	UID  uint64 // echoed in the join's events; never 0
	ID   uint32
	Addr Addr
}

// Cmd returns CmdJoinIPMcast.
func (*JoinIPMcast) Cmd() Cmd { return CmdJoinIPMcast }

// Size returns the encoded length, 56.
func (*JoinIPMcast) Size() int { return HeaderSize + InJoinIPMcast }

// RespLen returns OutJoinMcast.
func (*JoinIPMcast) RespLen() int { return OutJoinMcast }

// Encode implements Command. An AF_IB Addr gives ErrAddrFamily.
func (c *JoinIPMcast) Encode(b []byte, resp uintptr) ([]byte, error) {
	if c.Addr.IsIB() {
		return nil, ErrAddrFamily
	}
	b, err := frame(b, CmdJoinIPMcast, InJoinIPMcast, OutJoinMcast)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint64(p[8:], c.UID)
	_, _ = EncodeSockaddr(p[16:44], c.Addr)
	ne.PutUint32(p[44:], c.ID)
	return b, nil
}

// JoinMcast is JOIN_MCAST. Response: {u32 mc_id}; completion as for
// JoinIPMcast.
//
// Payload (152 bytes): 0 response, 8 uid, 16 id, 20 addr_size (u16),
// 22 join_flags (u16), 24 addr (sockaddr_storage).
type JoinMcast struct {
	UID   uint64 // echoed in the join's events; never 0
	ID    uint32
	Addr  Addr
	Flags uint16 // JoinFullMember or JoinSendOnlyFullMember
}

// Cmd returns CmdJoinMcast.
func (*JoinMcast) Cmd() Cmd { return CmdJoinMcast }

// Size returns the encoded length, 160.
func (*JoinMcast) Size() int { return HeaderSize + InJoinMcast }

// RespLen returns OutJoinMcast.
func (*JoinMcast) RespLen() int { return OutJoinMcast }

// Encode implements Command.
func (c *JoinMcast) Encode(b []byte, resp uintptr) ([]byte, error) {
	b, err := frame(b, CmdJoinMcast, InJoinMcast, OutJoinMcast)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint64(p[8:], c.UID)
	ne.PutUint32(p[16:], c.ID)
	n, _ := EncodeSockaddr(p[24:152], c.Addr)
	ne.PutUint16(p[20:], uint16(n))
	ne.PutUint16(p[22:], c.Flags)
	return b, nil
}

// LeaveMcast is LEAVE_MCAST, with the DESTROY_ID layout. Response:
// {u32 events_reported} for the join.
//
// Payload (16 bytes): 0 response, 8 id (the mc_id from the join),
// 12 reserved.
type LeaveMcast struct {
	ID uint32 // the multicast id
}

// Cmd returns CmdLeaveMcast.
func (*LeaveMcast) Cmd() Cmd { return CmdLeaveMcast }

// Size returns the encoded length, 24.
func (*LeaveMcast) Size() int { return HeaderSize + InLeaveMcast }

// RespLen returns OutLeaveMcast.
func (*LeaveMcast) RespLen() int { return OutLeaveMcast }

// Encode implements Command.
func (c *LeaveMcast) Encode(b []byte, resp uintptr) ([]byte, error) {
	return encodeRespID(b, CmdLeaveMcast, OutLeaveMcast, resp, c.ID, 0)
}
