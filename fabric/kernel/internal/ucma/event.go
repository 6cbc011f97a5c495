package ucma

import "github.com/cmrt/cmrt/fabric"

// Sizes of struct rdma_ucm_event_resp.
const (
	// EventRespSize is the full size, ECE included (the GET_EVENT out).
	EventRespSize = 336
	// EventRespMinSize is the smallest out the kernel accepts for
	// GET_EVENT: everything before the reserved word and the ECE.
	EventRespMinSize = 324
	// eventParamOff is the offset of the 4-byte aligned param union.
	eventParamOff = 20
	// eventECEOff is the offset of the ECE.
	eventECEOff = 328
)

// Event is a decoded struct rdma_ucm_event_resp, the GET_EVENT response.
//
// Layout: 0 uid, 8 id, 12 event, 16 status (s32), 20 param union (304 bytes:
// conn_param, ud_param, or u32 arg32[2]), 324 reserved, 328 ece.
//
// The kernel fills one view of the union: UD for ids with a UD QP
// (PSUDP, PSIPoIB, or PSIB with a UD QP) and for MULTICAST_* events, Arg
// for USER events, Conn otherwise. Decode fills all three from the same
// bytes; the caller reads the one that applies. Conn.PrivateData starts at
// offset 28 of the response and UD.PrivateData at offset 60.
type Event struct {
	// UID is the user context of the id (from CREATE_ID or ACCEPT), or of
	// the multicast join for MULTICAST_* events. For CONNECT_REQUEST it
	// is the listener's.
	UID uint64
	// ID is the kernel handle of the id the event is for; for
	// CONNECT_REQUEST, the handle of the new id.
	ID uint32
	// Event is the event type.
	Event fabric.EventType
	// Status is 0 or a negative errno, or the IB REJ reason (REJECTED) or
	// SIDR status (UNREACHABLE of a UD id).
	Status int32
	// Conn is the conn_param view of the param union.
	Conn ConnParam
	// UD is the ud_param view of the param union.
	UD UDParam
	// Arg is the u64 of a USER event: arg32[0..1] read as one
	// host-endian u64, which is how the kernel stored it.
	Arg uint64
	// ECE is the enhanced connection establishment data; zero if the
	// response was shorter than EventRespSize.
	ECE ECE
}

// Decode fills e from a GET_EVENT response. b must hold at least
// EventRespMinSize bytes (ErrShortBuffer otherwise); the ECE is read only
// if b holds EventRespSize. Decode does not allocate.
func (e *Event) Decode(b []byte) error {
	if len(b) < EventRespMinSize {
		return ErrShortBuffer
	}
	e.UID = ne.Uint64(b[0:])
	e.ID = ne.Uint32(b[8:])
	e.Event = fabric.EventType(int32(ne.Uint32(b[12:])))
	e.Status = int32(ne.Uint32(b[16:]))
	p := b[eventParamOff : eventParamOff+UDParamSize]
	_ = e.Conn.Decode(p)
	_ = e.UD.Decode(p)
	e.Arg = ne.Uint64(p)
	if len(b) >= EventRespSize {
		e.ECE = getECE(b[eventECEOff:])
	} else {
		e.ECE = ECE{}
	}
	return nil
}

// ParamView selects which view of the event's param union Encode writes.
type ParamView uint8

// Param union views.
const (
	ParamConn ParamView = iota // Conn: connected-mode ids
	ParamUD                    // UD: UD ids and multicast events
	ParamArg                   // Arg: USER events
)

// Encode writes e as a GET_EVENT response into b[:EventRespSize], with the
// param union taken from the chosen view and every other byte zero; a
// shorter b gives ErrShortBuffer. It is the kernel's side of the ABI, for
// fake kernels and tests.
func (e *Event) Encode(b []byte, view ParamView) error {
	if len(b) < EventRespSize {
		return ErrShortBuffer
	}
	b = b[:EventRespSize]
	clear(b)
	ne.PutUint64(b[0:], e.UID)
	ne.PutUint32(b[8:], e.ID)
	ne.PutUint32(b[12:], uint32(e.Event))
	ne.PutUint32(b[16:], uint32(e.Status))
	p := b[eventParamOff : eventParamOff+UDParamSize]
	switch view {
	case ParamUD:
		_ = e.UD.Encode(p)
	case ParamArg:
		ne.PutUint64(p, e.Arg)
	default:
		_ = e.Conn.Encode(p)
	}
	e.ECE.put(b[eventECEOff:])
	return nil
}
