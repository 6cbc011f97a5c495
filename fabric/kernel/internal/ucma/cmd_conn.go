package ucma

// Connect is CONNECT. No response; completion is an event
// (CONNECT_RESPONSE, ESTABLISHED for UD, REJECTED, UNREACHABLE, ...).
//
// Payload (288 bytes): 0 conn_param (272), 272 id, 276 reserved, 280 ece.
type Connect struct {
	ID    uint32
	Param ConnParam // Param.Valid must be 1
	ECE   ECE
}

// Cmd returns CmdConnect.
func (*Connect) Cmd() Cmd { return CmdConnect }

// Size returns the encoded length, 296.
func (*Connect) Size() int { return HeaderSize + InConnect }

// RespLen returns 0.
func (*Connect) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *Connect) Encode(b []byte, _ uintptr) ([]byte, error) {
	b, err := frame(b, CmdConnect, InConnect, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	_ = c.Param.Encode(p[0:ConnParamSize])
	ne.PutUint32(p[272:], c.ID)
	c.ECE.put(p[280:])
	return b, nil
}

// Accept is ACCEPT. No response. With Param.Valid 1 the kernel also sets
// the id's uid to UID, so events for a new connection are delivered; with
// Valid 0 it only completes the handshake of an id user space set up.
//
// Payload (296 bytes): 0 uid, 8 conn_param (272), 280 id, 284 reserved,
// 288 ece.
type Accept struct {
	UID   uint64
	ID    uint32
	Param ConnParam
	ECE   ECE
}

// Cmd returns CmdAccept.
func (*Accept) Cmd() Cmd { return CmdAccept }

// Size returns the encoded length, 304.
func (*Accept) Size() int { return HeaderSize + InAccept }

// RespLen returns 0.
func (*Accept) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *Accept) Encode(b []byte, _ uintptr) ([]byte, error) {
	b, err := frame(b, CmdAccept, InAccept, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint64(p[0:], c.UID)
	_ = c.Param.Encode(p[8 : 8+ConnParamSize])
	ne.PutUint32(p[280:], c.ID)
	c.ECE.put(p[288:])
	return b, nil
}

// Reject is REJECT. No response.
//
// Payload (264 bytes): 0 id, 4 private_data_len (u8), 5 reason (u8),
// 6 reserved[2], 8 private_data[256].
type Reject struct {
	ID uint32
	// Reason is RejectConsumerDefined (also what 0 means) or
	// RejectVendorOptionNotSupported; the kernel refuses others.
	Reason         uint8
	PrivateData    [MaxPrivateData]byte
	PrivateDataLen uint8
}

// SetPrivateData copies p into PrivateData and sets PrivateDataLen. More
// than 255 bytes gives ErrPrivateData.
func (c *Reject) SetPrivateData(p []byte) error {
	return setPrivateData(&c.PrivateData, &c.PrivateDataLen, p)
}

// Cmd returns CmdReject.
func (*Reject) Cmd() Cmd { return CmdReject }

// Size returns the encoded length, 272.
func (*Reject) Size() int { return HeaderSize + InReject }

// RespLen returns 0.
func (*Reject) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *Reject) Encode(b []byte, _ uintptr) ([]byte, error) {
	b, err := frame(b, CmdReject, InReject, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint32(p[0:], c.ID)
	p[4] = c.PrivateDataLen
	p[5] = c.Reason
	copy(p[8:8+MaxPrivateData], c.PrivateData[:])
	return b, nil
}
