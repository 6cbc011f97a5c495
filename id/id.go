package id

import (
	"net/netip"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id/journal"
)

// Channel is an event channel: the queue an asynchronous id reports its
// events to. channel.Channel implements it.
type Channel interface {
	// Source returns the channel's fabric event source.
	Source() fabric.EventSource
}

// ID is a communication identifier, as struct rdma_cm_id. Its methods are
// safe for concurrent use, but as in librdmacm the operations of one id are
// meant to be issued in order by one owner.
type ID struct {
	uid     uint64
	fabric  fabric.Fabric
	journal *journal.Journal
	ref     entry // what the handle table points to: {id: the id itself}

	// The one-byte fields share a word (TestIDSize): spread between the
	// wider ones, their padding put an ID in the 288-byte class. ps and
	// qpType are set at creation; state to finalized are guarded by mu, as
	// are the fields after mu down to chNum.
	ps        PortSpace
	qpType    QPType
	state     State
	sync      bool
	reqIRD    uint8 // what the request asked for (responder resources)
	reqORD    uint8 // and initiator depth
	finalized bool

	mu      sync.Mutex
	cond    *sync.Cond         // on mu, signalled when completed grows; made by the first waiter (most ids have none)
	ch      Channel            // nil for a synchronous id
	src     fabric.EventSource // ch's source, or the private one
	ep      fabric.Endpoint
	userCtx any
	event   *Event // the current event of a synchronous id
	parent  uint64 // the listener's handle, for ids born from a request
	mcs     map[netip.Addr]*multicast
	qp      QP
	reqQP   *QPInitAttr   // a CreateEP listener's: the QP GetRequest gives each request's id
	done    chan struct{} // Done's channel, made on demand; closed (or closedChan) once finalized
	chNum   uint64        // src's channel number, stamped on journal records

	destroyed atomic.Bool
	deferWait atomic.Bool   // a destroy waits for completion in the background
	waiters   atomic.Int32  // goroutines waiting on cond
	handling  atomic.Int32  // handlers running for events this id owns (Event.Handle)
	reported  atomic.Uint64 // events delivered with this id as owner
	completed atomic.Uint64 // of those, acknowledged
	deferGoal atomic.Uint64
}

// Option configures Create.
type Option func(*createOptions)

type createOptions struct {
	qp      QPType
	fabric  fabric.Fabric
	journal *journal.Journal
}

// WithQPType selects the QP type of a PSIB id (RC or UD); other port spaces
// have a fixed type, and asking for another is EINVAL.
func WithQPType(t QPType) Option { return func(o *createOptions) { o.qp = t } }

// WithFabric selects the fabric of a synchronous id (one created without a
// channel); ids on a channel use the channel's fabric.
func WithFabric(f fabric.Fabric) Option { return func(o *createOptions) { o.fabric = f } }

// WithJournal records the id's calls and events in j instead of the default
// journal.
func WithJournal(j *journal.Journal) Option { return func(o *createOptions) { o.journal = j } }

// applyOptions returns o with opts applied. They are applied to a pooled
// copy: handed to the options' functions, o itself would be moved to the
// heap, one allocation per Create.
func applyOptions(o createOptions, opts []Option) createOptions {
	if len(opts) == 0 {
		return o
	}
	p := optionsPool.Get().(*createOptions)
	*p = o
	for _, opt := range opts {
		opt(p)
	}
	o = *p
	*p = createOptions{}
	optionsPool.Put(p)
	return o
}

var optionsPool = sync.Pool{New: func() any { return new(createOptions) }}

// Create creates an id, as rdma_create_id. With a nil channel the id is
// synchronous: it gets a private channel on the default fabric (or the one
// given with WithFabric), and calls that produce an event block until it
// arrives. context is the user's value, returned by Context and inherited by
// ids born from this id's connection requests. ps must be one of the four
// port spaces (EINVAL otherwise). A nil pointer held in a non-nil Channel
// (a nil *channel.Channel passed as an id.Channel) is EINVAL, not a
// synchronous id: only an untyped nil asks for one.
func Create(ch Channel, context any, ps PortSpace, opts ...Option) (*ID, error) {
	if !ps.Valid() {
		return nil, errorf("create_id", syscall.EINVAL, "port space %#x", uint16(ps))
	}
	if ch != nil && isNilPointer(ch) {
		return nil, errorf("create_id", syscall.EINVAL, "nil %T channel (pass an untyped nil for a synchronous id)", ch)
	}
	o := applyOptions(createOptions{qp: ps.DefaultQPType(), journal: journal.Default()}, opts)
	if o.qp != ps.DefaultQPType() && !(ps == PSIB && (o.qp == RC || o.qp == UD)) {
		return nil, errorf("create_id", syscall.EINVAL, "QP type %s in %s", o.qp, ps)
	}
	i := &ID{ps: ps, qpType: o.qp, journal: o.journal, userCtx: context, ch: ch, sync: ch == nil}
	if ch == nil {
		f := o.fabric
		if f == nil {
			var err error
			if f, err = fabric.Default(); err != nil {
				return nil, err
			}
		}
		src, err := f.Open()
		if err != nil {
			return nil, wrap("create_id", err)
		}
		i.src = src
	} else {
		i.src = ch.Source()
		if i.src == nil {
			return nil, errorf("create_id", syscall.EINVAL, "channel has no event source (closed?)")
		}
	}
	i.fabric = i.src.Fabric()
	i.ref.id = i
	uid, err := addHandle("create_id", &i.ref)
	if err != nil {
		if i.sync {
			_ = i.src.Close()
		}
		return nil, err
	}
	i.uid = uid
	ep, err := i.src.Create(i.uid, ps, o.qp)
	if err != nil {
		removeHandle(i.uid)
		if i.sync {
			_ = i.src.Close()
		}
		return nil, wrap("create_id", err)
	}
	i.ep = ep
	if i.sync {
		i.chNum = privateSourceNumber()
	} else {
		i.chNum = sourceNumber(i.src)
	}
	i.record(journal.CallCreate, nil)
	return i, nil
}

// isNilPointer reports whether v holds a nil pointer (a typed nil).
func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

// record journals a call and its outcome. It must be called with i.mu held
// or before the id is shared.
func (i *ID) record(c journal.Call, err error) {
	r := journal.Record{ID: i.uid, Parent: i.parent, Channel: i.chNum, Kind: journal.KindCall, QPType: i.qpType, Call: c, State: i.state}
	if err != nil {
		r.Status = int32(errnoOf(err))
	}
	i.journal.Add(r)
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if asErrno(err, &e) {
		return e
	}
	return syscall.EIO
}

// Handle returns the id's handle: a process-unique non-zero number that
// names the id in its journal and in logs.
func (i *ID) Handle() uint64 { return i.uid }

// Context returns the user's context given to Create (or SetContext).
func (i *ID) Context() any {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.userCtx
}

// SetContext replaces the user's context, as assigning id->context.
func (i *ID) SetContext(c any) {
	i.mu.Lock()
	i.userCtx = c
	i.mu.Unlock()
}

// PortSpace returns the id's port space.
func (i *ID) PortSpace() PortSpace { return i.ps }

// QPType returns the id's QP type.
func (i *ID) QPType() QPType { return i.qpType }

// Fabric returns the fabric the id lives on.
func (i *ID) Fabric() fabric.Fabric { return i.fabric }

// Channel returns the id's event channel, or nil for a synchronous id.
func (i *ID) Channel() Channel {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.ch
}

// Synchronous reports whether the id has no channel of its own.
func (i *ID) Synchronous() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.sync
}

// State returns the id's state.
func (i *ID) State() State {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.state
}

// Endpoint returns the fabric endpoint behind the id, for fabric-specific
// extensions (the data path). It is nil after Destroy.
func (i *ID) Endpoint() fabric.Endpoint {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.state == StateDestroyed {
		return nil
	}
	return i.ep
}

// Route returns what the fabric knows of the id's addresses, device and
// path; the zero Route after Destroy.
func (i *ID) Route() fabric.Route {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.state == StateDestroyed {
		return fabric.Route{}
	}
	r, _ := i.ep.Query()
	return r
}

// LocalAddr returns the bound or resolved local address, as
// rdma_get_local_addr.
func (i *ID) LocalAddr() netip.AddrPort { return i.Route().Src }

// RemoteAddr returns the peer's address, as rdma_get_peer_addr.
func (i *ID) RemoteAddr() netip.AddrPort { return i.Route().Dst }

// SrcPort returns the local port, as rdma_get_src_port.
func (i *ID) SrcPort() uint16 { return i.Route().Src.Port() }

// DstPort returns the remote port, as rdma_get_dst_port.
func (i *ID) DstPort() uint16 { return i.Route().Dst.Port() }

// DeviceName returns the name of the device the id is bound to, or "".
func (i *ID) DeviceName() string { return i.Route().Device }

// Event returns the current event of a synchronous id: the one its last
// blocking call returned (also when the call failed because of the event's
// status: Event().Err() names that status). The id's next CM call
// acknowledges it and makes another event current; the *Event returned
// here keeps its content (an ADDR_RESOLVED stays ADDR_RESOLVED). The user
// never acknowledges it (Ack is EINVAL).
func (i *ID) Event() *Event {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.event
}

// eventCompleted counts one acknowledged event of this id (and of join mc).
func (i *ID) eventCompleted(mc *multicast) {
	n := i.completed.Add(1)
	if i.waiters.Load() > 0 || (mc != nil && mc.waiters.Load() > 0) {
		i.mu.Lock()
		if i.cond != nil {
			i.cond.Broadcast()
		}
		i.mu.Unlock()
	}
	if i.deferWait.Load() && n >= i.deferGoal.Load() && i.deferWait.CompareAndSwap(true, false) {
		i.finalize()
	}
}

// waitCompleted blocks until done() holds, re-checking whenever an event of
// the id is acknowledged. The condition variable is made only when done()
// does not hold at once: a synchronous id acknowledges its events as it
// goes, so most waits (Destroy's) find nothing to wait for.
func (i *ID) waitCompleted(done func() bool) {
	i.mu.Lock()
	if !done() {
		if i.cond == nil {
			i.cond = sync.NewCond(&i.mu)
		}
		i.waiters.Add(1)
		for !done() {
			i.cond.Wait()
		}
		i.waiters.Add(-1)
	}
	i.mu.Unlock()
}

// waitAcked waits until goal events of the id are acknowledged (goal: a
// count of events reported, taken by the caller), unless a handler of one of
// the id's events is running (see handlerRunning). It reports whether it
// waited.
func (i *ID) waitAcked(goal uint64) bool {
	if i.handlerRunning() {
		return false
	}
	i.waitCompleted(func() bool { return i.completed.Load() >= goal })
	return true
}

// beginHandler and endHandler bracket a handler of an event this id owns
// (Event.Handle).
func (i *ID) beginHandler() { i.handling.Add(1) }

func (i *ID) endHandler() { i.handling.Add(-1) }

// handlerRunning reports whether a handler of an event this id owns is
// running. Destroy, Migrate and LeaveMulticast then do not wait for the
// acknowledgement of the id's events: the caller may be that handler, and
// waiting would be waiting for itself. Whether it is, they do not ask (a
// goroutine has no identity to ask by): a goroutine that must know that no
// handler of the id still runs waits on Done.
func (i *ID) handlerRunning() bool { return i.handling.Load() > 0 }

// takeEvent detaches the current event of a synchronous id, for the caller
// to acknowledge once i.mu is released.
func (i *ID) takeEvent() *Event {
	ev := i.event
	i.event = nil
	return ev
}

// ackTaken acknowledges an event detached by takeEvent. The event keeps
// its content (and syncOwned: a user's Ack of it stays EINVAL).
func ackTaken(ev *Event) {
	if ev != nil {
		ev.settle()
	}
}

// Destroy destroys the id, as rdma_destroy_id: the fabric endpoint is
// released at once (queued events for it are dropped, pending connection
// requests on a listener are rejected) and no event is reported for the id
// afterwards. The id's QP, if CreateQP made one, is destroyed with it, as
// rdma_destroy_ep does (a C program calls rdma_destroy_qp first).
// Destroying twice fails with EINVAL.
//
// Then, as librdmacm's rdma_destroy_id, Destroy waits until every event
// reported for the id has been acknowledged (CONNECT_REQUEST events count
// against the listener) — unless a handler of one of the id's events is
// running (a reactor's, or any h given to Event.Handle), whoever calls:
// then it returns at once, without waiting for the events being handled
// nor for those queued behind them, and the id is finalized when the last
// of them is acknowledged. A handler may so destroy its own id. A
// goroutine that must know that no handler of the id still runs (to free
// what the handlers use) waits on Done, which is closed when the id is
// finalized; a handler must not wait on Done (it would wait for itself).
// An id used with GetEvent and Ack only (no handler) keeps librdmacm's
// blocking Destroy: when it returns, Done is closed.
func (i *ID) Destroy() error {
	i.mu.Lock()
	if i.state == StateDestroyed {
		i.mu.Unlock()
		return errorf("destroy_id", syscall.EINVAL, "id %d already destroyed", i.uid)
	}
	i.state = StateDestroyed
	i.destroyed.Store(true)
	i.record(journal.CallDestroy, nil)
	old := i.takeEvent()
	mcs := i.mcs
	i.mcs = nil
	qp := i.qp
	i.qp = nil
	i.mu.Unlock()

	if qp != nil {
		_ = qp.Destroy()
	}
	for _, mc := range mcs {
		removeHandle(mc.uid)
	}
	removeHandle(i.uid) // from here on no event is reported for the id
	err := i.ep.Destroy()
	ackTaken(old)

	goal := i.reported.Load()
	if i.handlerRunning() {
		i.deferGoal.Store(goal)
		i.deferWait.Store(true)
		if i.completed.Load() >= goal && i.deferWait.CompareAndSwap(true, false) {
			i.finalize()
		}
		return wrap("destroy_id", err)
	}
	i.waitCompleted(func() bool { return i.completed.Load() >= goal })
	i.finalize()
	return wrap("destroy_id", err)
}

// finalize releases what outlives the endpoint (the private channel), then
// closes Done's channel.
func (i *ID) finalize() {
	i.mu.Lock()
	if i.finalized {
		i.mu.Unlock()
		return
	}
	i.finalized = true
	src, sync := i.src, i.sync
	i.mu.Unlock()
	if sync {
		_ = src.Close()
	}
	i.mu.Lock()
	if i.done != nil {
		close(i.done)
	} else {
		i.done = closedChan
	}
	i.mu.Unlock()
}

// closedChan is Done's channel of an id finalized before anyone asked.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done returns a channel that is closed when the destroyed id is finalized:
// every event reported for it has been acknowledged (so no handler of the
// id's events runs any more, and none will) and its private channel, if it
// is synchronous, is closed. It is never closed for an id that is not
// destroyed. Destroy called with a handler of the id running returns before
// that (see Destroy); a goroutine that must know the handlers are done
// waits on Done. A handler of the id's events must not: it would wait for
// itself.
func (i *ID) Done() <-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.done == nil {
		i.done = make(chan struct{})
	}
	return i.done
}

// checkCall checks call c against the id's state (journal.CallAllowed) and
// returns the state a successful call moves the id to, or EINVAL: for an id
// the call is not allowed in, destroyed, or abandoned by a canceled call.
func (i *ID) checkCall(c journal.Call) (State, error) {
	next, ok := journal.CallAllowed(i.state, c, i.qpType)
	if ok {
		return next, nil
	}
	if i.state == StateCanceled {
		return i.state, errorf(c.String(), syscall.EINVAL, "id %d abandoned by a canceled call: destroy it", i.uid)
	}
	return i.state, errorf(c.String(), syscall.EINVAL, "not allowed in state %s", i.state)
}
