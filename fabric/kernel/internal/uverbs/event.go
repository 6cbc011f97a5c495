package uverbs

import "strconv"

// EventType is an asynchronous event type (enum ib_event_type, the values
// of enum ibv_event_type).
type EventType uint32

// Asynchronous event types.
const (
	EventCQErr            EventType = 0
	EventQPFatal          EventType = 1
	EventQPReqErr         EventType = 2
	EventQPAccessErr      EventType = 3
	EventCommEst          EventType = 4
	EventSQDrained        EventType = 5
	EventPathMig          EventType = 6
	EventPathMigErr       EventType = 7
	EventDeviceFatal      EventType = 8
	EventPortActive       EventType = 9
	EventPortErr          EventType = 10
	EventLIDChange        EventType = 11
	EventPKeyChange       EventType = 12
	EventSMChange         EventType = 13
	EventSRQErr           EventType = 14
	EventSRQLimitReached  EventType = 15
	EventQPLastWQEReached EventType = 16
	EventClientReregister EventType = 17
	EventGIDChange        EventType = 18
	EventWQFatal          EventType = 19
)

const numEventTypes = 20

var eventNames = [numEventTypes]string{
	"CQ_ERR", "QP_FATAL", "QP_REQ_ERR", "QP_ACCESS_ERR", "COMM_EST", "SQ_DRAINED",
	"PATH_MIG", "PATH_MIG_ERR", "DEVICE_FATAL", "PORT_ACTIVE", "PORT_ERR",
	"LID_CHANGE", "PKEY_CHANGE", "SM_CHANGE", "SRQ_ERR", "SRQ_LIMIT_REACHED",
	"QP_LAST_WQE_REACHED", "CLIENT_REREGISTER", "GID_CHANGE", "WQ_FATAL",
}

// String returns the name libibverbs gives, e.g. "IBV_EVENT_COMM_EST".
func (t EventType) String() string {
	if t < numEventTypes {
		return "IBV_EVENT_" + eventNames[t]
	}
	return "EventType(" + strconv.FormatUint(uint64(t), 10) + ")"
}

// QPEvent reports whether the event's element is a QP (otherwise a CQ, an
// SRQ, a WQ or a port).
func (t EventType) QPEvent() bool {
	switch t {
	case EventQPFatal, EventQPReqErr, EventQPAccessErr, EventCommEst, EventSQDrained,
		EventPathMig, EventPathMigErr, EventQPLastWQEReached:
		return true
	}
	return false
}

// AsyncEventSize is the size of struct ib_uverbs_async_event_desc, one
// record read(2) from the async event descriptor.
const AsyncEventSize = 16

// AsyncEvent is struct ib_uverbs_async_event_desc: 0 element (the
// user_handle of the QP, CQ, SRQ or WQ, or the port number), 8 event_type,
// 12 reserved.
type AsyncEvent struct {
	Element uint64
	Type    EventType
}

// Decode fills e from b[:AsyncEventSize].
func (e *AsyncEvent) Decode(b []byte) error {
	if len(b) < AsyncEventSize {
		return ErrShortBuffer
	}
	e.Element = ne.Uint64(b[0:])
	e.Type = EventType(ne.Uint32(b[8:]))
	return nil
}

// Encode writes e into b[:AsyncEventSize] (a fake kernel's record).
func (e *AsyncEvent) Encode(b []byte) error {
	if len(b) < AsyncEventSize {
		return ErrShortBuffer
	}
	ne.PutUint64(b[0:], e.Element)
	ne.PutUint32(b[8:], uint32(e.Type))
	ne.PutUint32(b[12:], 0)
	return nil
}

// CompEventSize is the size of struct ib_uverbs_comp_event_desc, one record
// read(2) from a completion channel: the user_handle of the CQ that
// completed.
const CompEventSize = 8

// DecodeCompEvent returns the CQ user handle of a completion event record.
func DecodeCompEvent(b []byte) (uint64, error) {
	if len(b) < CompEventSize {
		return 0, ErrShortBuffer
	}
	return ne.Uint64(b), nil
}
