package ucma

import "github.com/cmrt/cmrt/fabric"

// CreateID is CREATE_ID: create a kernel cm id. Response: {u32 id}
// (DecodeUint32Resp).
//
// Payload (24 bytes): 0 uid, 8 response, 16 ps (u16), 18 qp_type (u8),
// 19 reserved[5].
type CreateID struct {
	// UID is echoed in every event of the id. Never use 0: the kernel
	// drops events of ids whose uid is 0.
	UID    uint64
	PS     fabric.PortSpace
	QPType fabric.QPType // read by the kernel only for fabric.PSIB
}

// Cmd returns CmdCreateID.
func (*CreateID) Cmd() Cmd { return CmdCreateID }

// Size returns the encoded length, 32.
func (*CreateID) Size() int { return HeaderSize + InCreateID }

// RespLen returns OutCreateID.
func (*CreateID) RespLen() int { return OutCreateID }

// Encode implements Command.
func (c *CreateID) Encode(b []byte, resp uintptr) ([]byte, error) {
	b, err := frame(b, CmdCreateID, InCreateID, OutCreateID)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint64(p[0:], c.UID)
	ne.PutUint64(p[8:], uint64(resp))
	ne.PutUint16(p[16:], uint16(c.PS))
	p[18] = uint8(c.QPType)
	return b, nil
}

// DestroyID is DESTROY_ID. Response: {u32 events_reported}.
//
// Payload (16 bytes): 0 response, 8 id, 12 reserved.
type DestroyID struct {
	ID uint32
}

// Cmd returns CmdDestroyID.
func (*DestroyID) Cmd() Cmd { return CmdDestroyID }

// Size returns the encoded length, 24.
func (*DestroyID) Size() int { return HeaderSize + InDestroyID }

// RespLen returns OutDestroyID.
func (*DestroyID) RespLen() int { return OutDestroyID }

// Encode implements Command.
func (c *DestroyID) Encode(b []byte, resp uintptr) ([]byte, error) {
	return encodeRespID(b, CmdDestroyID, OutDestroyID, resp, c.ID, 0)
}

// ResolveRoute is RESOLVE_ROUTE. No response; completion is a
// ROUTE_RESOLVED or ROUTE_ERROR event.
//
// Payload (8 bytes): 0 id, 4 timeout_ms.
type ResolveRoute struct {
	ID        uint32
	TimeoutMs uint32
}

// Cmd returns CmdResolveRoute.
func (*ResolveRoute) Cmd() Cmd { return CmdResolveRoute }

// Size returns the encoded length, 16.
func (*ResolveRoute) Size() int { return HeaderSize + InResolveRoute }

// RespLen returns 0.
func (*ResolveRoute) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *ResolveRoute) Encode(b []byte, _ uintptr) ([]byte, error) {
	return encodeTwo(b, CmdResolveRoute, c.ID, c.TimeoutMs)
}

// Listen is LISTEN. No response.
//
// Payload (8 bytes): 0 id, 4 backlog. The kernel replaces a backlog of 0
// or above net.rdma_ucm.max_backlog by that maximum.
type Listen struct {
	ID      uint32
	Backlog uint32
}

// Cmd returns CmdListen.
func (*Listen) Cmd() Cmd { return CmdListen }

// Size returns the encoded length, 16.
func (*Listen) Size() int { return HeaderSize + InListen }

// RespLen returns 0.
func (*Listen) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *Listen) Encode(b []byte, _ uintptr) ([]byte, error) {
	return encodeTwo(b, CmdListen, c.ID, c.Backlog)
}

// Disconnect is DISCONNECT. No response.
//
// Payload (4 bytes): 0 id.
type Disconnect struct {
	ID uint32
}

// Cmd returns CmdDisconnect.
func (*Disconnect) Cmd() Cmd { return CmdDisconnect }

// Size returns the encoded length, 12.
func (*Disconnect) Size() int { return HeaderSize + InDisconnect }

// RespLen returns 0.
func (*Disconnect) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *Disconnect) Encode(b []byte, _ uintptr) ([]byte, error) {
	b, err := frame(b, CmdDisconnect, InDisconnect, 0)
	if err != nil {
		return nil, err
	}
	ne.PutUint32(b[HeaderSize:], c.ID)
	return b, nil
}

// InitQPAttr is INIT_QP_ATTR: ask the CM for the attributes of a QP
// transition. Response: QPAttr (144 bytes).
//
// Payload (16 bytes): 0 response, 8 id, 12 qp_state.
type InitQPAttr struct {
	ID      uint32
	QPState uint32 // QPState*: the state to move to
}

// Cmd returns CmdInitQPAttr.
func (*InitQPAttr) Cmd() Cmd { return CmdInitQPAttr }

// Size returns the encoded length, 24.
func (*InitQPAttr) Size() int { return HeaderSize + InInitQPAttr }

// RespLen returns OutInitQPAttr.
func (*InitQPAttr) RespLen() int { return OutInitQPAttr }

// Encode implements Command.
func (c *InitQPAttr) Encode(b []byte, resp uintptr) ([]byte, error) {
	return encodeRespID(b, CmdInitQPAttr, OutInitQPAttr, resp, c.ID, c.QPState)
}

// GetEvent is GET_EVENT: dequeue the next event of the fd, blocking unless
// the fd is non-blocking (then EAGAIN when empty). Response: Event
// (336 bytes).
//
// Payload (8 bytes): 0 response.
type GetEvent struct{}

// Cmd returns CmdGetEvent.
func (*GetEvent) Cmd() Cmd { return CmdGetEvent }

// Size returns the encoded length, 16.
func (*GetEvent) Size() int { return HeaderSize + InGetEvent }

// RespLen returns OutGetEvent.
func (*GetEvent) RespLen() int { return OutGetEvent }

// Encode implements Command.
func (*GetEvent) Encode(b []byte, resp uintptr) ([]byte, error) {
	b, err := frame(b, CmdGetEvent, InGetEvent, OutGetEvent)
	if err != nil {
		return nil, err
	}
	ne.PutUint64(b[HeaderSize:], uint64(resp))
	return b, nil
}

// SetOption is SET_OPTION. No response. The kernel copies Len bytes from
// the user address Val during the write, so Val must point to memory that
// stays put until the write returns: use Buffers.SetOption, which stages
// the value in pinned memory. The kernel checks Len exactly per option
// (EINVAL) and reports an unknown level or name with ENOSYS.
//
// Payload (24 bytes): 0 optval, 8 id, 12 level, 16 optname, 20 optlen.
type SetOption struct {
	ID    uint32
	Level fabric.OptionLevel
	Name  fabric.OptionName
	Val   uintptr
	Len   uint32
}

// Cmd returns CmdSetOption.
func (*SetOption) Cmd() Cmd { return CmdSetOption }

// Size returns the encoded length, 32.
func (*SetOption) Size() int { return HeaderSize + InSetOption }

// RespLen returns 0.
func (*SetOption) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *SetOption) Encode(b []byte, _ uintptr) ([]byte, error) {
	b, err := frame(b, CmdSetOption, InSetOption, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint64(p[0:], uint64(c.Val))
	ne.PutUint32(p[8:], c.ID)
	ne.PutUint32(p[12:], uint32(c.Level))
	ne.PutUint32(p[16:], uint32(c.Name))
	ne.PutUint32(p[20:], c.Len)
	return b, nil
}

// Notify is NOTIFY: pass an asynchronous QP event (an ibv_event_type, e.g.
// IBV_EVENT_COMM_EST) to the CM. No response.
//
// Payload (8 bytes): 0 id, 4 event.
type Notify struct {
	ID    uint32
	Event uint32
}

// Cmd returns CmdNotify.
func (*Notify) Cmd() Cmd { return CmdNotify }

// Size returns the encoded length, 16.
func (*Notify) Size() int { return HeaderSize + InNotify }

// RespLen returns 0.
func (*Notify) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *Notify) Encode(b []byte, _ uintptr) ([]byte, error) {
	return encodeTwo(b, CmdNotify, c.ID, c.Event)
}

// MigrateID is MIGRATE_ID: move an id, with its queued events, to the fd
// the command is written on. Response: {u32 events_reported}.
//
// Payload (16 bytes): 0 response, 8 id, 12 fd (the id's current fd).
type MigrateID struct {
	ID    uint32
	OldFD int // the fd the id is on now; write the command on the new one
}

// Cmd returns CmdMigrateID.
func (*MigrateID) Cmd() Cmd { return CmdMigrateID }

// Size returns the encoded length, 24.
func (*MigrateID) Size() int { return HeaderSize + InMigrateID }

// RespLen returns OutMigrateID.
func (*MigrateID) RespLen() int { return OutMigrateID }

// Encode implements Command.
func (c *MigrateID) Encode(b []byte, resp uintptr) ([]byte, error) {
	return encodeRespID(b, CmdMigrateID, OutMigrateID, resp, c.ID, uint32(c.OldFD))
}

// WriteCMEvent is WRITE_CM_EVENT (2025 kernels): queue a USER event with
// the given status and argument on the id's fd. The kernel rejects other
// event types with EINVAL. No response.
//
// Payload (320 bytes): 0 id, 4 reserved, 8 event, 12 status, 16 param
// union (304 bytes; u64 arg at 16).
type WriteCMEvent struct {
	ID     uint32
	Event  fabric.EventType // fabric.EventUser
	Status int32
	Arg    uint64
}

// Cmd returns CmdWriteCMEvent.
func (*WriteCMEvent) Cmd() Cmd { return CmdWriteCMEvent }

// Size returns the encoded length, 328.
func (*WriteCMEvent) Size() int { return HeaderSize + InWriteCMEvent }

// RespLen returns 0.
func (*WriteCMEvent) RespLen() int { return 0 }

// Encode implements Command; resp is ignored.
func (c *WriteCMEvent) Encode(b []byte, _ uintptr) ([]byte, error) {
	b, err := frame(b, CmdWriteCMEvent, InWriteCMEvent, 0)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint32(p[0:], c.ID)
	ne.PutUint32(p[8:], uint32(c.Event))
	ne.PutUint32(p[12:], uint32(c.Status))
	ne.PutUint64(p[16:], c.Arg)
	return b, nil
}

// encodeRespID frames the common layout {u64 response; u32 id; u32 x}.
func encodeRespID(b []byte, c Cmd, out int, resp uintptr, id, x uint32) ([]byte, error) {
	b, err := frame(b, c, 16, out)
	if err != nil {
		return nil, err
	}
	p := b[HeaderSize:]
	ne.PutUint64(p[0:], uint64(resp))
	ne.PutUint32(p[8:], id)
	ne.PutUint32(p[12:], x)
	return b, nil
}

// encodeTwo frames the common layout {u32 a; u32 b} without response.
func encodeTwo(b []byte, c Cmd, x, y uint32) ([]byte, error) {
	b, err := frame(b, c, 8, 0)
	if err != nil {
		return nil, err
	}
	ne.PutUint32(b[HeaderSize:], x)
	ne.PutUint32(b[HeaderSize+4:], y)
	return b, nil
}
