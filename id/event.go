package id

import (
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
)

// Event is a CM event, as struct rdma_cm_event. Events come from an event
// channel (channel.Channel.GetEvent), from a reactor's handlers, or, on a
// synchronous id, through ID.Event.
//
// Who owns an event decides how long it lives:
//
//   - An event from GetEvent (or NextEvent) is the caller's, as
//     rdma_get_cm_event's is: it is allocated for the caller and never
//     reused, so it keeps its content after Ack, and a second Ack fails with
//     EINVAL. Every such event must be acknowledged (Ack or Handle).
//   - The current event of a synchronous id (ID.Event) is acknowledged by
//     the id's next CM call, never by the user (Ack is EINVAL); it too keeps
//     its content after that call.
//   - An event handed to a reactor's handler belongs to the reactor, which
//     acknowledges it when the handler returns and then reuses it for a
//     later event (so dispatch allocates nothing): it is valid only while
//     the handler runs. Copy what you need (ID, Type, Status, PrivateData
//     are safe to keep); do not keep the *Event. Ack of it is a no-op
//     inside the handler and EINVAL outside, so a kept pointer cannot
//     acknowledge the event the reactor reuses it for.
//
// The private data (PrivateData, Conn.PrivateData, UD.PrivateData) is a
// slice of its own, never shared with another event and never reused: it
// may be kept, and written, after the event is acknowledged.
type Event struct {
	// ID is the id the event is for; for CONNECT_REQUEST, the new id.
	ID *ID
	// ListenID is the listener of a CONNECT_REQUEST.
	ListenID *ID
	// Type is the event type.
	Type EventType
	// Status is 0 or, for error events, a negative errno or a reason code:
	// REJECTED carries the transport's reject reason, and UNREACHABLE on a
	// UD id a positive SIDR status (2, IB_SIDR_REJECT, when the peer
	// rejected the request). Err gives it as an error, with its name.
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

	owner     *ID        // whose event count it is (the listener for CONNECT_REQUEST)
	mc        *multicast // the join of a MULTICAST_* event
	src       fabric.EventSource
	st        atomic.Uint32 // evAcked, evHandling, evCounted; not used while pooled (see evAcked)
	pooled    bool          // the library's (TakeEvent): recycled when Handle returns
	inHandler bool          // pooled: Handle runs its handler (evHandling's part)
	counted   bool          // pooled: the acknowledgement was counted (evCounted's part)
	kept      bool          // a runtime's own (TakeEventInto): free clears it, out of the pool
	syncOwned bool          // held by a synchronous id, which acknowledges it
}

// Bits of Event.st. One atomic word, so that concurrent Acks (a user error)
// and an Ack racing Handle are decided by a compare-and-swap, never by a
// data race.
//
// A library's event (pooled: TakeEvent, TakeEventInto, DeliverClaimed*)
// keeps its state in plain fields instead (inHandler, counted): from its
// take to its free only the goroutine that takes, delivers and handles it
// writes them (one goroutine, or a runtime's hand-off from the one that
// took it to the one that handles it, which orders them), and its Ack only
// reads whether a handler runs. That spares three locked instructions per
// reactor event (the reset at the take, Handle's mark, finish's;
// BENCHMARKS.md, "What is slow and why", finding 27). Its st stays
// evAcked|evCounted (free sets it), what a stale pointer's Ack and Handle
// read once free has cleared pooled.
const (
	evAcked    = 1 << iota // Ack (or the end of Handle) acknowledged it: a second Ack is EINVAL
	evHandling             // Handle runs a handler for it: the accounting waits for its end
	evCounted              // the acknowledgement was counted towards the owner's completion
)

var eventPool = sync.Pool{New: func() any { return new(Event) }}

// free clears a library-owned event and returns it to the pool. Only Handle
// calls it, when the handler has returned.
func (ev *Event) free() {
	// Field by field, not *ev = Event{}, which copied a whole zero event
	// over it: a tenth of the reactor's dispatch when the event still held
	// its raw event. TestEventFreeClearsEveryField keeps this list
	// complete.
	ev.ID, ev.ListenID, ev.Type, ev.Status = nil, nil, 0, 0
	ev.Conn, ev.UD, ev.Arg, ev.JoinContext = ConnParam{}, UDParam{}, 0, nil
	ev.Group, ev.Seq = netip.Addr{}, 0
	kept := ev.kept
	ev.owner, ev.mc, ev.src, ev.pooled, ev.syncOwned, ev.kept = nil, nil, nil, false, false, false
	ev.inHandler, ev.counted = false, false
	// A stale Ack of a pooled event fails until it is reissued. A library
	// event's st is that already but for the pool's fresh ones (zero), and
	// an Event that was not the library's: only those need the store (an
	// atomic exchange, a full barrier).
	if ev.st.Load() != evAcked|evCounted {
		ev.st.Store(evAcked | evCounted)
	}
	if !kept {
		eventPool.Put(ev)
	}
}

// PrivateData returns the event's private data: Conn.PrivateData on RC ids,
// UD.PrivateData on UD ids. The slice is the event's alone: it may be kept
// after the event is acknowledged.
func (ev *Event) PrivateData() []byte {
	if ev.Conn.PrivateData != nil {
		return ev.Conn.PrivateData
	}
	return ev.UD.PrivateData
}

// Source returns the event source the event came from.
func (ev *Event) Source() fabric.EventSource { return ev.src }

// count does the accounting of one acknowledgement. The caller has set
// evCounted: it runs once per event.
func (ev *Event) count() {
	if ev.mc != nil {
		ev.mc.completed.Add(1)
	}
	if ev.owner != nil {
		ev.owner.eventCompleted(ev.mc)
	}
}

// settle acknowledges the event and does its accounting, unless that was
// done already; it reports whether this call did it. It is how the library
// acknowledges events the user never got, and a synchronous id's events.
func (ev *Event) settle() bool {
	if ev.pooled {
		return ev.countOnce()
	}
	for {
		s := ev.st.Load()
		if s&evCounted != 0 {
			return false
		}
		if ev.st.CompareAndSwap(s, s|evAcked|evCounted) {
			ev.count()
			return true
		}
	}
}

// Ack acknowledges the event, as rdma_ack_cm_event: it counts towards the
// completion Destroy, Migrate and LeaveMulticast wait for. Acknowledging an
// event twice (also from two goroutines at once: one of them wins) fails
// with EINVAL, as does acknowledging the event of a synchronous id (its next
// call does). Inside a handler (Handle), Ack marks the event and the
// accounting is done when the handler returns.
//
// An event handed to a reactor's handler is the reactor's, which
// acknowledges it when the handler returns: Ack inside the handler is
// allowed and does nothing, and outside it fails with EINVAL. So a pointer
// kept past the handler (which the reactor reuses) can never acknowledge
// the event the object holds next.
func (ev *Event) Ack() error {
	if ev == nil {
		return errorf("ack_cm_event", syscall.EINVAL, "nil event")
	}
	if ev.syncOwned {
		return errorf("ack_cm_event", syscall.EINVAL, "event of a synchronous id: its next call acknowledges it")
	}
	if ev.pooled {
		if ev.inHandler {
			return nil // the reactor acknowledges it when the handler returns
		}
		return errorf("ack_cm_event", syscall.EINVAL, "event of a reactor, outside its handler (the reactor acknowledged it)")
	}
	for {
		s := ev.st.Load()
		if s&evAcked != 0 {
			return errorf("ack_cm_event", syscall.EINVAL, "event already acknowledged")
		}
		n := s | evAcked
		if s&evHandling == 0 {
			n |= evCounted
		}
		if ev.st.CompareAndSwap(s, n) {
			if n&evCounted != 0 {
				ev.count()
			}
			return nil
		}
	}
}

// Err returns the event's status as an error: nil when Status is 0,
// otherwise an *Error (Op: the event's name) wrapping the errno a
// synchronous call returns for the event (StatusErrno): a negative status
// -s gives s (UNREACHABLE -110 is ETIMEDOUT), REJECTED gives ECONNREFUSED
// whatever the reject reason, and a positive status is taken as the errno
// itself. The message names the status: the reject reason, or for
// UNREACHABLE on a UD id the SIDR status. Note that a rejected UD connect
// is UNREACHABLE with status 2 (IB_SIDR_REJECT), so its errno is 2, ENOENT
// ("no such file or directory"), as librdmacm reports it to a synchronous
// caller; status 1 (IB_SIDR_UNSUPPORTED) is EPERM.
func (ev *Event) Err() error {
	if ev == nil || ev.Status == 0 {
		return nil
	}
	return &Error{Op: ev.Type.String(), Msg: statusText(ev.Type, ev.Status), Err: StatusErrno(ev.Type, ev.Status)}
}

// statusText says what an event's non-zero status means.
func statusText(t EventType, status int) string {
	switch {
	case t == EventRejected:
		return "status " + rejectReason(status)
	case t == EventUnreachable && status > 0 && status < len(sidrStatus):
		return fmt.Sprintf("status %d (%s)", status, sidrStatus[status])
	case status < 0:
		return fmt.Sprintf("status %d (-%s)", status, errnoName(syscall.Errno(-status)))
	}
	return fmt.Sprintf("status %d", status)
}

// sidrStatus names the status of a SIDR REP (IBTA 16.3.2, the kernel's enum
// ib_cm_sidr_status), which a UD id's UNREACHABLE carries.
var sidrStatus = [...]string{
	1: "IB_SIDR_UNSUPPORTED: no UD listener for the port",
	2: "IB_SIDR_REJECT: the peer rejected the request",
	3: "IB_SIDR_NO_QP: the peer has no QP for it",
	4: "IB_SIDR_REDIRECT",
	5: "IB_SIDR_UNSUPPORTED_VERSION",
}

// rejectReason names the reason a REJECTED event carries: the kernel fabric
// reports the IB CM reject reason (28 when the peer rejected, 8 with no
// listener), the software fabric what iWARP's cma_iw_handler maps them to.
func rejectReason(status int) string {
	switch status {
	case 28:
		return "28 (IB_CM_REJ_CONSUMER_DEFINED: the peer rejected)"
	case 8:
		return "8 (IB_CM_REJ_INVALID_SERVICE_ID: no listener on the port)"
	case -int(syscall.ECONNRESET):
		return fmt.Sprintf("%d (-ECONNRESET: the peer rejected)", status)
	case -int(syscall.ECONNREFUSED):
		return fmt.Sprintf("%d (-ECONNREFUSED: no listener on the port)", status)
	}
	if status < 0 {
		return fmt.Sprintf("%d (-%s)", status, errnoName(syscall.Errno(-status)))
	}
	return fmt.Sprintf("%d (reject reason)", status)
}

func errnoName(e syscall.Errno) string {
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno %d", int(e))
}

// String describes the event in one line, for logs: its type, id, status
// (with its name) and what it carries, never its private data's bytes.
func (ev *Event) String() string {
	if ev == nil {
		return "<nil event>"
	}
	var b strings.Builder
	if ev.Type == EventUser {
		b.WriteString("USER")
	} else {
		b.WriteString(ev.Type.String())
	}
	if ev.ID != nil {
		fmt.Fprintf(&b, " id=%d", ev.ID.Handle())
	}
	if ev.ListenID != nil {
		fmt.Fprintf(&b, " listen_id=%d", ev.ListenID.Handle())
	}
	if ev.Status != 0 {
		fmt.Fprintf(&b, " %s", statusText(ev.Type, ev.Status))
	}
	if ev.Type == EventUser {
		fmt.Fprintf(&b, " arg=%d", ev.Arg)
	}
	if ev.Group.IsValid() {
		fmt.Fprintf(&b, " group=%s", ev.Group)
	}
	if n := len(ev.PrivateData()); n > 0 {
		fmt.Fprintf(&b, " private_data=%dB", n)
	}
	return b.String()
}

// Handler handles events; see Event.Handle. While a handler of one of an
// id's events runs, Destroy, Migrate and LeaveMulticast of that id do not
// wait for the id's events to be acknowledged, whoever calls them (the
// handler itself may): a goroutine that must know the id's handlers are
// done waits on ID.Done after Destroy.
type Handler interface {
	// HandleEvent handles one event. The event is acknowledged when it
	// returns; the error is the caller's to report.
	HandleEvent(ev *Event) error
}

// Handle runs h for the event and then acknowledges it, even if h panics
// (the panic continues after the acknowledgement). h may acknowledge the
// event itself: Ack then marks it, and its accounting is still done when h
// returns. If the event's id was destroyed before Handle, h is not called;
// a CONNECT_REQUEST whose listener was destroyed has its new id rejected
// and destroyed instead. An event from TakeEvent is recycled when Handle
// returns.
//
// Handle brackets h: while h runs, Destroy, Migrate and LeaveMulticast of
// the id that owns the event (the listener, for a CONNECT_REQUEST) return
// without waiting for the acknowledgement of the id's events, whether h
// calls them or another goroutine does (cmrt does not tell goroutines
// apart); the id is finalized, and ID.Done closed, when the last event is
// acknowledged. So h may destroy its own id, and a goroutine that must
// know h has returned waits on Done.
//
// A CONNECT_REQUEST that h leaves unanswered (neither accepted, rejected
// nor destroyed: its new id still in StateConnectRequest) is
// rejected and its new id destroyed when h panics or returns an error, so
// the peer is refused at once instead of waiting out its timeout and the id
// does not leak. A handler that wants to answer later, from another
// goroutine, must return nil.
//
// Handle of an event already acknowledged, or of a synchronous id's event,
// fails with EINVAL without calling h.
func (ev *Event) Handle(h Handler) (err error) {
	if ev == nil {
		return errorf("handle", syscall.EINVAL, "nil event")
	}
	if ev.syncOwned {
		return errorf("handle", syscall.EINVAL, "event of a synchronous id: its next call acknowledges it")
	}
	owner, pooled := ev.owner, ev.pooled
	if pooled {
		// Handed to Handle again by its own handler: the outer Handle
		// acknowledges it when the handler returns. Run, the inner one
		// freed it under the outer, which freed it again: the same
		// Event twice in the pool, handed to two takers at once.
		if ev.inHandler {
			return errorf("handle", syscall.EINVAL, "event already being handled: its handler's return acknowledges it")
		}
		ev.inHandler = true // a plain field: see evAcked
	} else {
		for {
			s := ev.st.Load()
			if s&evAcked != 0 {
				return errorf("handle", syscall.EINVAL, "event already acknowledged")
			}
			if ev.st.CompareAndSwap(s, s|evHandling) {
				break
			}
		}
	}
	if owner != nil {
		owner.beginHandler()
	}
	answered := false
	defer func() {
		if !answered {
			ev.refuseRequest()
		}
		if owner != nil {
			owner.endHandler()
		}
		ev.inHandler = false
		if ev.pooled { // finish's first case, inlined: a call fewer per event
			ev.countOnce()
		} else {
			ev.finish()
		}
		if pooled {
			ev.free()
		}
	}()
	if ev.ID == nil || ev.ID.destroyed.Load() {
		answered = true
		return nil
	}
	if ev.Type == EventConnectRequest && ev.ListenID != nil && ev.ListenID.destroyed.Load() {
		_ = ev.ID.Reject(nil)
		_ = ev.ID.Destroy()
		answered = true
		return nil
	}
	err = h.HandleEvent(ev)
	answered = err == nil
	return err
}

// countOnce counts a library event's acknowledgement, once (counted is
// evCounted's part for a pooled event), and reports whether this call did.
// Small enough to inline, so that Handle's deferred end pays no call for
// it.
func (ev *Event) countOnce() bool {
	if ev.counted {
		return false
	}
	ev.counted = true
	ev.count()
	return true
}

// finish ends Handle: the event is acknowledged and counted (once).
func (ev *Event) finish() {
	if ev.pooled {
		ev.countOnce()
		return
	}
	for {
		s := ev.st.Load()
		n := (s | evAcked | evCounted) &^ evHandling
		if ev.st.CompareAndSwap(s, n) {
			if s&evCounted == 0 {
				ev.count()
			}
			return
		}
	}
}

// refuseRequest rejects and destroys the new id of a CONNECT_REQUEST whose
// handler panicked or failed without answering it.
func (ev *Event) refuseRequest() {
	if ev.Type != EventConnectRequest || ev.ID == nil || ev.ID.State() != StateConnectRequest {
		return
	}
	_ = ev.ID.Reject(nil)
	_ = ev.ID.Destroy()
}
