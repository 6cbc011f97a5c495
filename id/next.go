package id

import (
	"context"
	"sync"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/evq"
)

// NextEvent retrieves the next event from src and maps it to its id, as
// rdma_get_cm_event: the uid the fabric reports names the id (or multicast
// join); a CONNECT_REQUEST creates the new id, which inherits the listener's
// channel, context, port space and QP type (a synchronous listener's new id
// gets a private channel of its own); the id's state advances and the event
// is journaled. Events for ids destroyed meanwhile are dropped, as the kernel
// drops them. With block unset an empty source gives an error wrapping
// EAGAIN.
//
// The event is the caller's: it is allocated for this call (as librdmacm
// allocates one per rdma_get_cm_event) and never reused, so a stale pointer
// to it can never reach another event. It must be acknowledged (Ack, or
// Handle).
func NextEvent(ctx context.Context, src fabric.EventSource, block bool) (*Event, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	raw := rawPool.Get().(*fabric.RawEvent)
	defer rawPool.Put(raw)
	ev := new(Event)
	for {
		if err := src.Next(ctx, block, raw); err != nil {
			return nil, err
		}
		ev.src = src
		if deliver(ev, raw) {
			return ev, nil
		}
		*ev = Event{}
	}
}

// rawPool holds NextEvent's raw events (376 bytes, most of it private
// data, which deliver copies out): an Event does not carry its raw event.
var rawPool = sync.Pool{New: func() any { return new(fabric.RawEvent) }}

// TakeEvent is NextEvent without waiting, for runtimes that hand each event
// to a handler (package reactor): the event belongs to the library, which
// reuses it once its handler has run, so taking and dispatching an event
// allocates nothing. It must be passed to Handle exactly once; Ack outside
// the handler fails with EINVAL, and the event must not be used after
// Handle returns.
//
// raw is the caller's buffer for the fabric's raw event, overwritten by
// every call: a runtime taking events on one goroutine keeps one, so that
// the raw event is copied into memory that stays in that goroutine's cache
// rather than into the event, which a worker on another CPU handles and
// recycles. It must not be shared by goroutines taking events at once.
func TakeEvent(src fabric.EventSource, raw *fabric.RawEvent) (*Event, error) {
	return TakeEventAt(src, raw, journal.Now())
}

// TakeEventAt is TakeEvent with the journal's clock read by the caller
// (journal.Now), for a runtime that takes a batch of events: it reads the
// clock once for the batch, and the records of the batch's events share
// that time (journal.Journal.AddAt).
func TakeEventAt(src fabric.EventSource, raw *fabric.RawEvent, at journal.Stamp) (*Event, error) {
	for {
		if err := src.Next(context.Background(), false, raw); err != nil {
			return nil, err
		}
		ev := newPooled(src)
		if ev = keepIf(ev, deliverAt(ev, raw, at)); ev != nil {
			return ev, nil
		}
	}
}

// TakeEventInto is TakeEventAt with the event's memory the caller's: ev,
// made once with new(Event) by a runtime that takes and handles one event
// at a time (a reactor's inline loop), is filled and returned instead of
// an Event from the library's pool, and cleared, not pooled, when Handle
// returns; the caller then passes it here again. The returned event is
// otherwise TakeEventAt's (it must be passed to Handle exactly once before
// ev is passed here again; Ack outside its handler is EINVAL), and ev is
// also cleared when no event is returned. This spares the pool's Get and
// Put per event, an eighth of an inline dispatch (BENCHMARKS.md, "What is
// slow and why", finding 19).
func TakeEventInto(src fabric.EventSource, raw *fabric.RawEvent, at journal.Stamp, ev *Event) (*Event, error) {
	for {
		if err := src.Next(context.Background(), false, raw); err != nil {
			return nil, err
		}
		if e := DeliverInto(src, raw, at, ev); e != nil {
			return e, nil
		}
	}
}

// DeliverInto delivers into ev, as TakeEventInto does, a raw event the
// caller took from src itself: with a fabric.GuardedSource's NextUnless,
// which a reactor uses so that a channel unregistered from another
// goroutine loses no event to it after Unregister returns. It returns ev
// filled, to be passed to Handle as TakeEventInto's, or nil when the event
// is dropped (its id is gone; a CONNECT_REQUEST's new endpoint is then
// rejected and destroyed), ev left clear: the caller takes the next one.
func DeliverInto(src fabric.EventSource, raw *fabric.RawEvent, at journal.Stamp, ev *Event) *Event {
	return keepIf(ev, deliverAt(reuse(ev, src), raw, at))
}

// dropChild rejects and destroys the new endpoint of a request nobody will
// see.
func dropChild(raw *fabric.RawEvent) {
	if raw.Child != nil {
		_ = raw.Child.Reject(nil)
		_ = raw.Child.Destroy()
		raw.Child = nil
	}
}

// Claim is an event taken from a source and counted against the id that
// owns it, whose delivery (the id's state, its journal record, the Event)
// a runtime completes later, on another goroutine: TakeClaim makes it,
// DeliverClaimed completes it. A claimed event counts as reported (Destroy,
// Migrate and LeaveMulticast wait for its acknowledgement) from the
// moment it is claimed, as an event taken with TakeEvent does, so that an
// id migrated or destroyed in between keeps the order and the accounting
// of its events. Every Claim must be passed to DeliverClaimed exactly once.
type Claim struct {
	owner *ID        // whose event count it is
	mc    *multicast // the join of a MULTICAST_* event
}

// Owner returns the id the claimed event is for: the events of one owner
// must be delivered in the order they were claimed, one at a time.
func (c Claim) Owner() *ID { return c.owner }

// TakeClaim takes the next event from src without waiting, as TakeEventAt
// does, for a runtime that hands events to workers: the worker does the
// delivery (DeliverClaimed), so that the event, the id's lock and state
// and the journal record are touched on the worker's CPU only, and the
// taking goroutine copies the raw event into the work item and counts it.
// raw is the buffer the event is read into; it must stay the caller's,
// unchanged, until DeliverClaimed. A CONNECT_REQUEST is delivered at once
// and returned as an Event (its new id must exist before any event of it
// can be claimed): the caller hands it to Handle as TakeEvent's. Otherwise
// ev is nil and c is the claim. Events of ids that no longer exist are
// dropped, as TakeEvent drops them.
func TakeClaim(src fabric.EventSource, raw *fabric.RawEvent, at journal.Stamp) (ev *Event, c Claim, err error) {
	for {
		if err := src.Next(context.Background(), false, raw); err != nil {
			return nil, Claim{}, err
		}
		if raw.Type == EventConnectRequest {
			ev := newPooled(src)
			if ev = keepIf(ev, deliverAt(ev, raw, at)); ev != nil {
				return ev, Claim{}, nil
			}
			continue
		}
		if c, ok := claim(raw); ok {
			return nil, c, nil
		}
	}
}

// DeliverClaimed completes the delivery of a claimed event read from src
// into raw (TakeClaim): it returns the event, which belongs to the library
// as TakeEvent's does (it must be passed to Handle exactly once), or nil if
// the event is dropped: its id was destroyed since the claim. Claims of
// one owner must be delivered in the order they were made.
func DeliverClaimed(c Claim, src fabric.EventSource, raw *fabric.RawEvent, at journal.Stamp) *Event {
	ev := newPooled(src)
	return keepIf(ev, deliverClaimed(ev, c, raw, at))
}

// DeliverClaimedInto is DeliverClaimed with the event's memory the
// caller's, as TakeEventInto's: ev, made once with new(Event) by a runtime
// goroutine that delivers and handles one event at a time (a reactor's
// worker), is filled and returned instead of an Event from the library's
// pool, and cleared, not pooled, when Handle returns. The returned event
// must be passed to Handle before ev is passed here again; ev is left
// clear when the event is dropped. The pool's Get and Put (with their
// pinning to the P: 116 of a pool dispatch's 1 480 instructions in
// cachegrind) go, and the event stays in that goroutine's cache.
func DeliverClaimedInto(c Claim, src fabric.EventSource, raw *fabric.RawEvent, at journal.Stamp, ev *Event) *Event {
	return keepIf(ev, deliverClaimed(reuse(ev, src), c, raw, at))
}

// DeliverClaimedBriefInto is DeliverClaimedBrief into the caller's event,
// as DeliverClaimedInto.
func DeliverClaimedBriefInto(c Claim, src fabric.EventSource, typ EventType, status int32, arg uint64, at journal.Stamp, ev *Event) *Event {
	return deliverBrief(reuse(ev, src), c, typ, status, arg, at)
}

// Brief reports whether a raw event carries nothing but its uid, type,
// status and argument (most CM events: ESTABLISHED without private data,
// DISCONNECTED, ADDR_RESOLVED, USER, ...): DeliverClaimedBrief delivers a
// claimed one from those alone, so that a runtime handing it to another
// goroutine copies 16 bytes of it instead of the 376-byte raw event.
func Brief(raw *fabric.RawEvent) bool {
	// Beside the copy of a reactor's mailbox items, in internal/evq, which
	// guards both for every field of fabric.RawEvent (TestParamsEveryField;
	// here TestBriefEveryField).
	return evq.Brief(raw)
}

// DeliverClaimedBrief is DeliverClaimed for a claimed event whose raw event
// was Brief: typ, status and arg are its Type, Status and Arg. The event is
// the one DeliverClaimed would return for it.
func DeliverClaimedBrief(c Claim, src fabric.EventSource, typ EventType, status int32, arg uint64, at journal.Stamp) *Event {
	return deliverBrief(newPooled(src), c, typ, status, arg, at)
}

// deliverBrief fills ev, from the pool (newPooled) or the caller's
// (reuse), with a brief claimed event, or frees it and returns nil.
func deliverBrief(ev *Event, c Claim, typ EventType, status int32, arg uint64, at journal.Stamp) *Event {
	ev.owner, ev.mc = c.owner, c.mc
	// What fill sets from a brief raw event; a pooled event is clear
	// (Event.free) but for these.
	ev.Type, ev.Status, ev.Arg = typ, int(status), arg
	if c.mc != nil {
		ev.JoinContext = c.mc.context
	}
	return keepIf(ev, commitClaimed(ev, c, typ, status, at))
}

// newPooled takes an Event from the pool for an event of src, to be
// delivered into (keepIf).
func newPooled(src fabric.EventSource) *Event {
	ev := eventPool.Get().(*Event)
	ev.src, ev.pooled = src, true // its state in plain fields: see evAcked
	return ev
}

// reuse readies a runtime's own event (TakeEventInto,
// DeliverClaimedInto), which Handle cleared, for an event of src, to be
// delivered into (keepIf): free clears it again instead of pooling it.
func reuse(ev *Event, src fabric.EventSource) *Event {
	ev.src, ev.kept, ev.pooled = src, true, true // its state in plain fields: see evAcked
	return ev
}

// keepIf returns ev, the library's (Handle recycles it), if it was
// delivered, or puts it back in the pool and returns nil.
func keepIf(ev *Event, delivered bool) *Event {
	if !delivered {
		ev.free()
		return nil
	}
	return ev
}

// testHookLoaded, if set (by tests only), runs in deliver between the
// lookup of the event's uid and the count of the event.
var testHookLoaded func()

// deliver maps a raw event to its id and reports whether the user gets it.
// The uid is turned back into the id without a lock (handles); the event
// is counted against its owner, and then the uid is looked up again: if the
// owner's handle went in between, the event is dropped (and the count
// balanced), so that an event is either counted before Destroy (or
// LeaveMulticast) reads the count it waits for, or never reaches the user.
func deliver(ev *Event, raw *fabric.RawEvent) bool { return deliverAt(ev, raw, journal.Now()) }

// deliverAt is deliver with the time the event's journal record gets
// (journal.Journal.AddAt).
func deliverAt(ev *Event, raw *fabric.RawEvent, at journal.Stamp) bool {
	if raw.Type != EventConnectRequest {
		c, ok := claim(raw)
		if !ok {
			return false
		}
		// deliverClaimed, written out: a call fewer per event.
		ev.owner, ev.mc = c.owner, c.mc
		ev.fill(c.owner, raw)
		return commitClaimed(ev, c, raw.Type, raw.Status, at)
	}
	e := handles.Load(raw.UID)
	if e == nil || raw.Child == nil || e.id == nil {
		dropChild(raw)
		return false
	}
	if testHookLoaded != nil {
		testHookLoaded()
	}
	listener := e.id
	ev.owner = listener
	listener.reported.Add(1)
	if handles.Load(raw.UID) != e {
		ev.settle() // removed meanwhile: keep the counts balanced
		dropChild(raw)
		return false
	}
	child := &ID{
		fabric: listener.fabric, ps: listener.ps, qpType: listener.qpType,
		journal: listener.journal, ep: raw.Child, state: StateConnectRequest,
		parent: listener.uid,
	}
	child.ref.id = child
	uid, err := handles.Alloc(&child.ref)
	if err != nil {
		ev.settle()
		dropChild(raw)
		return false
	}
	child.uid = uid
	ev.fill(child, raw)
	raw.Child = nil
	seq, lsync := listener.adopt(child, raw, at)
	if seq == 0 {
		ev.settle() // dropped: keep the listener's counts balanced
		return false
	}
	if lsync && !child.makeSync() {
		ev.settle()
		return false
	}
	ev.ID, ev.ListenID, ev.Seq = child, listener, seq
	return true
}

// claim maps the raw event of anything but a CONNECT_REQUEST to the id
// that owns it and counts the event against it (deliver's first half),
// or reports false if the event is dropped.
func claim(raw *fabric.RawEvent) (Claim, bool) {
	e := handles.Load(raw.UID)
	if e == nil {
		return Claim{}, false
	}
	if testHookLoaded != nil {
		testHookLoaded()
	}
	c := Claim{owner: e.id}
	if e.mc != nil {
		c.owner, c.mc = e.mc.id, e.mc
		e.mc.reported.Add(1)
	}
	c.owner.reported.Add(1)
	if handles.Load(raw.UID) != e {
		c.release() // removed meanwhile: keep the counts balanced
		return Claim{}, false
	}
	return c, true
}

// release balances the counts of a claimed event that is dropped before
// it became an Event (Event.count does it for one).
func (c Claim) release() {
	if c.mc != nil {
		c.mc.completed.Add(1)
	}
	c.owner.eventCompleted(c.mc)
}

// deliverClaimed is deliver's second half for a claimed event: the event's
// fields, the id's state and the journal record. An event whose id was
// destroyed since the claim is dropped (its counts balanced). The record
// names the channel the id reports to when it is made, as every record
// does: for an event claimed before a Migrate and delivered after it, the
// new channel (the record follows the migrate's).
func deliverClaimed(ev *Event, c Claim, raw *fabric.RawEvent, at journal.Stamp) bool {
	ev.owner, ev.mc = c.owner, c.mc
	ev.fill(c.owner, raw)
	return commitClaimed(ev, c, raw.Type, raw.Status, at)
}

// commitClaimed is deliverClaimed once ev's fields are filled: the id's
// state and the journal record of an event of type typ and status status.
func commitClaimed(ev *Event, c Claim, typ EventType, status int32, at journal.Stamp) bool {
	id := c.owner
	ev.ID = id
	id.mu.Lock()
	if id.state == StateDestroyed {
		// Destroyed after the fabric queued the event: drop it, as the
		// kernel drops the events of a destroyed id (and so that nothing
		// follows the id's destroy in its journal).
		id.mu.Unlock()
		ev.settle()
		return false
	}
	id.state = journal.AfterEvent(id.state, typ, id.qpType)
	ev.Seq = id.journal.AddEventAt(id.uid, id.chNum, id.qpType, typ, status, id.state, at)
	id.mu.Unlock()
	return true
}

// fill copies a raw event's type, status and parameters into ev, for id
// (the new id of a CONNECT_REQUEST, else the owner); ev.mc is set.
func (ev *Event) fill(id *ID, raw *fabric.RawEvent) {
	ev.Type = raw.Type
	ev.Status = int(raw.Status)
	ev.Arg = raw.Arg
	switch {
	case ev.mc != nil:
		ev.UD.QPNum, ev.UD.QKey, ev.UD.AH = raw.QPNum, raw.QKey, raw.AH
		ev.JoinContext, ev.Group = ev.mc.context, raw.Group
	case id.qpType == UD:
		ev.UD.QPNum, ev.UD.QKey, ev.UD.AH = raw.QPNum, raw.QKey, raw.AH
		ev.UD.PrivateData = ownPrivateData(raw)
	default:
		c := &ev.Conn
		c.ResponderResources, c.InitiatorDepth = raw.ResponderResources, raw.InitiatorDepth
		c.FlowControl, c.RetryCount, c.RNRRetryCount, c.SRQ = raw.FlowControl, raw.RetryCount, raw.RNRRetryCount, raw.SRQ
		c.QPNum = raw.QPNum
		c.PrivateData = ownPrivateData(raw)
	}
}

// adopt gives the new id of a CONNECT_REQUEST the listener's channel and
// context and journals the request, or, when the listener is no longer
// listening (destroyed since the fabric queued the request, or a fabric
// reporting a request to an id that does not listen), rejects and destroys
// the new endpoint and returns 0. The request is journaled under the
// listener's lock, so that it never follows the listener's destroy; adopt
// returns its sequence number and whether the listener is synchronous (the
// new id then needs a private channel: makeSync).
func (l *ID) adopt(child *ID, raw *fabric.RawEvent, at journal.Stamp) (seq uint64, sync bool) {
	l.mu.Lock()
	if l.state != StateListen {
		l.mu.Unlock()
		removeHandle(child.uid)
		_ = child.ep.Reject(nil)
		_ = child.ep.Destroy()
		return 0, false
	}
	child.mu.Lock()
	child.userCtx, child.ch, child.src, child.chNum = l.userCtx, l.ch, l.src, l.chNum
	// Remember what the peer asked for: Accept(nil) answers with it.
	child.reqIRD, child.reqORD = raw.ResponderResources, raw.InitiatorDepth
	rec := journal.Record{ID: child.uid, Parent: l.uid, Channel: child.chNum, Kind: journal.KindEvent, QPType: child.qpType,
		Event: EventConnectRequest, Status: raw.Status, State: child.state}
	seq = child.journal.AddAt(rec, at)
	child.mu.Unlock()
	sync = l.sync
	l.mu.Unlock()
	return seq, sync
}

// makeSync gives a new id born from a synchronous listener's request a
// private channel, as librdmacm does. On failure the new id is rejected and
// destroyed, and the request dropped.
func (i *ID) makeSync() bool {
	src, err := i.fabric.Open()
	if err == nil {
		if err = src.Migrate(i.ep); err != nil {
			_ = src.Close()
		}
	}
	if err != nil {
		_ = i.ep.Reject(nil)
		_ = i.Destroy()
		return false
	}
	i.mu.Lock()
	i.src, i.sync = src, true
	i.chNum = sourceNumber(src)
	i.record(journal.CallMigrate, nil) // librdmacm's ucma_process_conn_req migrates it too
	i.mu.Unlock()
	return true
}

// ownPrivateData copies an event's private data into memory of its own.
// A reactor's events are recycled, so a slice of the event's buffer would
// let a program that keeps (or writes through) it see or corrupt another
// id's private data; the copy costs one allocation, on set-up events only,
// and lets every event's private data be kept after Ack.
func ownPrivateData(raw *fabric.RawEvent) []byte {
	if raw.PrivateDataLen == 0 {
		return nil
	}
	return append([]byte(nil), raw.PrivateData[:raw.PrivateDataLen]...)
}
