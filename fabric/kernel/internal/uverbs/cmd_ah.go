package uverbs

// CreateAH is IB_USER_VERBS_CMD_CREATE_AH: an address handle for UD sends.
//
// Payload: 0 response, 8 user_handle, 16 pd_handle, 20 reserved, 24 attr
// (struct ib_uverbs_ah_attr), 56 driver request. Response: 0 ah_handle, 4
// driver response.
type CreateAH struct {
	UserHandle uint64
	PD         uint32
	Attr       AHAttr
	DriverOut  int // rxe: struct rxe_create_ah_resp (8)
}

// CreateAHRespSize is the size of struct ib_uverbs_create_ah_resp.
const CreateAHRespSize = 4

func (c *CreateAH) Cmd() Cmd     { return CmdCreateAH }
func (c *CreateAH) Size() int    { return HeaderSize + 56 }
func (c *CreateAH) RespLen() int { return CreateAHRespSize + c.DriverOut }
func (c *CreateAH) Encode(b []byte, resp uintptr) ([]byte, error) {
	msg, p, err := frame(b, CmdCreateAH, 56, nil, c.RespLen())
	if err != nil {
		return nil, err
	}
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint64(p[8:], c.UserHandle)
	ne.PutUint32(p[16:], c.PD)
	c.Attr.putAHAttr(p[24:56])
	return msg, nil
}

// DestroyAH returns IB_USER_VERBS_CMD_DESTROY_AH of handle. Payload: 0
// ah_handle.
func DestroyAH(handle uint32) Command { return &handleCmd{c: CmdDestroyAH, handle: handle} }

// Mcast is IB_USER_VERBS_CMD_ATTACH_MCAST (Detach false) or DETACH_MCAST:
// a UD QP joins or leaves the receivers of a multicast group.
//
// Payload: 0 gid[16], 16 qp_handle, 20 mlid (u16), 22 reserved. No
// response.
type Mcast struct {
	GID    [16]byte
	QP     uint32
	MLID   uint16
	Detach bool
}

func (c *Mcast) Cmd() Cmd {
	if c.Detach {
		return CmdDetachMcast
	}
	return CmdAttachMcast
}
func (c *Mcast) Size() int    { return HeaderSize + 24 }
func (c *Mcast) RespLen() int { return 0 }
func (c *Mcast) Encode(b []byte, _ uintptr) ([]byte, error) {
	msg, p, err := frame(b, c.Cmd(), 24, nil, 0)
	if err != nil {
		return nil, err
	}
	copy(p[0:16], c.GID[:])
	ne.PutUint32(p[16:], c.QP)
	ne.PutUint16(p[20:], c.MLID)
	return msg, nil
}
