package id

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/internal/goid"
)

// Event is a CM event, as struct rdma_cm_event. Events come from an event
// channel (channel.Channel.GetEvent), from a reactor's handlers, or, on a
// synchronous id, through ID.Event.
//
// An event is owned by the runtime and recycled when it is acknowledged:
// do not use it after Ack. Its private data is a slice of its own, never
// shared with another event or id, so it may be kept. Events of synchronous
// ids are acknowledged by the id's next CM call, never by the user.
type Event struct {
	// ID is the id the event is for; for CONNECT_REQUEST, the new id.
	ID *ID
	// ListenID is the listener of a CONNECT_REQUEST.
	ListenID *ID
	// Type is the event type.
	Type EventType
	// Status is 0 or, for error events, a negative errno or a reason code
	// (REJECTED carries the transport's reject reason).
	Status int
	// Conn holds the connection parameters of events on RC ids.
	Conn ConnParam
	// UD holds the datagram parameters of events on UD ids and of multicast
	// events.
	UD UDParam
	// Arg is the argument of a USER event.
	Arg uint64
	// JoinContext is, for MULTICAST_JOIN and MULTICAST_ERROR, the context
	// given to JoinMulticast (librdmacm passes it as the UD private data).
	JoinContext any
	// Group is the multicast group of a MULTICAST_* event.
	Group netip.Addr
	// Seq is the event's sequence number in its id's journal.
	Seq uint64

	raw       RawEvent
	owner     *ID        // whose event count it is (the listener for CONNECT_REQUEST)
	mc        *multicast // the join of a MULTICAST_* event
	src       EventSource
	acked     atomic.Bool
	syncOwned bool   // held by a synchronous id, which acknowledges it
	handlerG  uint64 // the goroutine running the event's handler, while it runs
	inHandle  bool   // HandleOn owns the event: Ack only does the accounting
}

var eventPool = sync.Pool{New: func() any { return new(Event) }}

func newEvent() *Event {
	ev := eventPool.Get().(*Event)
	ev.acked.Store(false)
	return ev
}

// free clears the event and returns it to the pool.
func (ev *Event) free() {
	raw := &ev.raw
	raw.UID, raw.Child, raw.PrivateDataLen, raw.Group = 0, nil, 0, netip.Addr{}
	*ev = Event{raw: ev.raw}
	ev.acked.Store(true) // a stale Ack of a recycled event fails until it is reissued
	eventPool.Put(ev)
}

// PrivateData returns the event's private data: Conn.PrivateData on RC ids,
// UD.PrivateData on UD ids. It is valid until the event is acknowledged.
func (ev *Event) PrivateData() []byte {
	if ev.Conn.PrivateData != nil {
		return ev.Conn.PrivateData
	}
	return ev.UD.PrivateData
}

// Source returns the event source the event came from.
func (ev *Event) Source() EventSource { return ev.src }

// complete does the accounting of an acknowledgement exactly once and
// reports whether this call did it.
func (ev *Event) complete() bool {
	if !ev.acked.CompareAndSwap(false, true) {
		return false
	}
	if ev.mc != nil {
		ev.mc.completed.Add(1)
	}
	if ev.owner != nil {
		ev.owner.eventCompleted(ev.mc)
	}
	return true
}

// Ack acknowledges the event, as rdma_ack_cm_event: it counts towards the
// completion Destroy, Migrate and LeaveMulticast wait for, and the event is
// recycled. Acknowledging an event twice, or an event of a synchronous id,
// fails with EINVAL.
func (ev *Event) Ack() error {
	if ev == nil {
		return errorf("ack_cm_event", syscall.EINVAL, "nil event")
	}
	if ev.syncOwned {
		return errorf("ack_cm_event", syscall.EINVAL, "event of a synchronous id: its next call acknowledges it")
	}
	if !ev.complete() {
		return errorf("ack_cm_event", syscall.EINVAL, "event already acknowledged")
	}
	if !ev.inHandle {
		ev.free() // inside a handler, HandleOn frees it when the handler returns
	}
	return nil
}

// Handler handles events; see Event.Handle.
type Handler interface {
	// HandleEvent handles one event. The event is acknowledged when it
	// returns; the error is the caller's to report.
	HandleEvent(ev *Event) error
}

// Handle runs h for the event and then acknowledges it, even if h panics
// (the panic continues after the acknowledgement). h may acknowledge the
// event itself (Ack then only counts it; the event stays valid until h
// returns). Destroy, Migrate and
// LeaveMulticast called from h do not wait for this event (they would wait
// for themselves); called from another goroutine while h runs, they wait
// for h to return. If the event's id was destroyed before Handle, h is not
// called; a CONNECT_REQUEST whose listener was destroyed has its new id
// rejected and destroyed instead.
func (ev *Event) Handle(h Handler) error { return ev.HandleOn(h, goid.ID()) }

// HandleOn is Handle for runtimes that run handlers on goroutines whose ids
// (package internal/goid) they know: g must be the calling goroutine's id.
// It saves Handle's lookup of the goroutine.
func (ev *Event) HandleOn(h Handler, g uint64) (err error) {
	owner := ev.owner
	ev.inHandle = true
	if owner != nil {
		ev.handlerG = g
		owner.beginHandler(ev)
	}
	defer func() {
		if owner != nil {
			owner.endHandler(ev)
		}
		ev.complete() // a no-op if the handler acknowledged it already
		ev.free()
	}()
	if ev.ID == nil || ev.ID.destroyed.Load() {
		return nil
	}
	if ev.Type == EventConnectRequest && ev.ListenID != nil && ev.ListenID.destroyed.Load() {
		_ = ev.ID.Reject(nil)
		_ = ev.ID.Destroy()
		return nil
	}
	return h.HandleEvent(ev)
}
