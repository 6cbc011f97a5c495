package reactor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/evloop"
	"github.com/cmrt/cmrt/internal/handle"
	"github.com/cmrt/cmrt/internal/ring"
	"github.com/cmrt/cmrt/poll"
)

// Channel is what the reactor multiplexes: an event channel with a
// pollable descriptor (channel.Channel).
type Channel interface {
	id.Channel
	Fd() int
}

// registration is a channel (or a completion queue) the loop reads.
//
// The reactor owns what it polls: epoll watches pfd, a duplicate of the
// owner's descriptor that the reactor closes itself, never the owner's fd
// number. So a channel or queue closed behind the reactor's back, whose
// number is then reused by another descriptor, cannot make the reactor act
// on the newcomer (epoll_ctl DEL takes a number); and an owner that closes
// makes pfd readable (soft queues do, see id.CQ) or calls its OnClose hook
// (channel.Channel, the kernel fabric's completion queues), so the loop
// drops the registration with its duplicate.
type registration struct {
	gen     uint32 // the loop's generation of pfd's entry
	ch      Channel
	src     fabric.EventSource
	fd      int // the owner's descriptor, for logs
	pfd     int // the reactor's duplicate of fd: what epoll watches
	h       id.Handler
	cq      id.CQ
	ch2     CompletionHandler
	wcs     []id.WC     // the loop's buffer for polling cq
	stop    func() bool // cancels the channel's OnClose hook (under regMu)
	removed atomic.Bool
	guarded fabric.GuardedSource // src, if it can stop its takes (see drop)
	taking  atomic.Bool          // the loop is in an inline take that src cannot stop (see drop)
	closed  atomic.Bool          // pfd is closed
}

// closeNotifier is implemented by channels and completion queues that say
// when they close (channel.Channel, the kernel fabric's queues): the
// reactor drops their registration before their descriptor goes.
type closeNotifier interface {
	OnClose(f func()) (stop func() bool)
}

// CompletionHandler handles work completions of a completion queue
// registered with RegisterCQ.
type CompletionHandler interface {
	// HandleCompletion handles one completion. wc is valid until it
	// returns; the error is reported through Options.OnError.
	HandleCompletion(wc *id.WC) error
}

// CompletionFunc adapts a function to CompletionHandler.
type CompletionFunc func(wc *id.WC) error

// HandleCompletion calls f(wc).
func (f CompletionFunc) HandleCompletion(wc *id.WC) error { return f(wc) }

// Reactor is an epoll loop over event channels. Create it with New; it is
// safe for concurrent use.
type Reactor struct {
	opts Options
	log  zerolog.Logger
	l    *evloop.Loop[*registration] // reports each readable registration to drain
	done <-chan struct{}             // the loop has exited

	state   atomic.Int32 // 0 open, 1 closing, 2 closed
	closeMu sync.Mutex

	regMu sync.Mutex                 // guards byCh, byCQ, live and the move to closing
	byCh  map[Channel]*registration  // registered channels
	byCQ  map[id.CQ]*registration    // registered completion queues
	live  map[*registration]struct{} // registrations whose pfd is open

	// loop-owned
	raw    fabric.RawEvent // id.TakeEvent's buffer
	ev     *id.Event       // the inline loop's event (id.TakeEventInto): one at a time, never pooled
	paused bool
	batch  []item // the items of one readiness report, handed to mailboxes at once

	// mailboxes, shared by the loop and the workers (see mailbox.go)
	mbMu       sync.Mutex
	mboxes     mailboxes           // by id, or by a completion queue's registration
	runq       ring.Ring[*mailbox] // scheduled mailboxes no worker has taken yet
	spare      []*mailbox
	idleBoxes  int  // idle mailboxes in mboxes (see mailbox)
	running    int  // workers started and not exited (at most Options.Workers)
	stopping   bool // Close: start no more workers
	workers    sync.WaitGroup
	workFn     func()       // r.work, made once so that starting a worker allocates nothing
	abandoning atomic.Bool  // Close gave up: items not yet started get no handler
	pending    atomic.Int64 // events taken and not yet handled
	idle       chan struct{}

	stats counters
	lat   latency // handler latency, sampled (stats.go)
}

type counters struct {
	events, overloads, panics, errors atomic.Uint64
}

// Stats is a snapshot of a reactor's counters.
type Stats struct {
	// Channels (and completion queues) registered.
	Channels int
	// Events (and work completions) dispatched since New.
	Events uint64
	// Pending events taken from channels and not yet handled.
	Pending int64
	// Overloads counts the times reading paused because of MaxPending.
	Overloads uint64
	// Panics recovered from handlers.
	Panics uint64
	// Errors returned by handlers.
	Errors uint64
}

// New starts a reactor.
func New(opts ...Option) (*Reactor, error) {
	o := defaults()
	for _, opt := range opts {
		opt(&o)
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 4096
	}
	if o.Batch <= 0 {
		o.Batch = 64
	}
	r := &Reactor{
		opts: o, log: o.Logger.With().Str("component", "reactor").Logger(),
		byCh: make(map[Channel]*registration), byCQ: make(map[id.CQ]*registration),
		live:   make(map[*registration]struct{}),
		mboxes: mailboxes{byID: make(map[*id.ID]*mailbox), byCQ: make(map[*registration]*mailbox)},
		lat:    latency{base: time.Now()}, ev: new(id.Event),
	}
	r.workFn = r.work
	if o.Workers > 0 {
		r.batch = make([]item, 0, max(o.Batch, 32))
		r.runq = ring.New[*mailbox](64, 0)
	}
	l, err := evloop.New(func(reg *registration, _ uint32) { _ = r.drain(reg) },
		evloop.WithName("reactor"), evloop.WithLogger(o.Logger), evloop.WithOnExit(r.exit))
	if err != nil {
		return nil, err
	}
	r.l, r.done = l, l.Done()
	go l.Run()
	return r, nil
}

// post queues fn for the loop goroutine; once the loop has exited it does
// nothing (the loop's exit released what tasks would have).
func (r *Reactor) post(fn func()) { r.l.Post(fn) }

// call runs fn on the loop and waits, unless the caller is an inline
// handler (which runs on the loop: waiting would deadlock), in which case
// fn runs when the handler returns (dispatch marks inline handlers for the
// loop's Call).
func (r *Reactor) call(fn func()) { r.l.Call(fn) }

// Register adds a channel: its events go to h. A channel can be registered
// once. It may be called from a handler. A nil channel or handler (also a
// nil func or pointer in a non-nil interface) is EINVAL, and so is a
// handler whose Err method reports a refused registration (a handlers.Mux
// that was given a nil handler): its error is returned.
//
// The reactor polls a duplicate of the channel's descriptor, which it
// closes itself. When a channel.Channel is closed its registration is
// dropped first, through its OnClose hook (Close waits for that, except
// from an inline handler, where it happens when the handler returns). A
// channel of another type is dropped when its source reads as closed: the
// software fabric's sources make their descriptor readable when they close;
// a source that does not (the kernel fabric's rdma_cm file) stays
// registered, its file held open by the duplicate, until Unregister.
// Events an id brings when it is migrated to the channel are read although
// the descriptor does not report them (the kernel fabric's: see
// fabric.MigrateNotifier).
func (r *Reactor) Register(ch Channel, h id.Handler) error {
	if isNil(h) || ch == nil {
		return fmt.Errorf("reactor: nil channel or handler: %w", syscall.EINVAL)
	}
	if e, ok := h.(interface{ Err() error }); ok {
		if err := e.Err(); err != nil {
			return fmt.Errorf("reactor: handler: %w", err)
		}
	}
	src := ch.Source()
	if src == nil {
		return fmt.Errorf("reactor: channel closed: %w", syscall.EBADF)
	}
	reg := &registration{ch: ch, src: src, fd: ch.Fd(), h: h}
	reg.guarded, _ = src.(fabric.GuardedSource)
	return r.add(reg, func() bool { return ch.Source() != nil }, func() bool {
		_, dup := r.byCh[ch]
		return !dup
	}, func() {
		r.byCh[ch] = reg
		if cn, ok := ch.(closeNotifier); ok {
			reg.stop = cn.OnClose(func() { r.ownerClosed(reg) })
		}
		r.watchMigrate(reg)
	})
}

// add registers reg: it duplicates reg.fd (open reports, after the
// duplicate is made, that reg.fd was still the owner's), and fresh reports
// whether the channel or queue is not yet registered and record files it
// (both under regMu). epoll_ctl is safe from any goroutine: the
// descriptor joins the epoll set here, polled for nothing, and the loop
// attaches the registration to the descriptor's generation and arms it in
// a task, so that no report comes before the loop can hand it over.
func (r *Reactor) add(reg *registration, open, fresh func() bool, record func()) error {
	r.regMu.Lock()
	defer r.regMu.Unlock()
	if r.state.Load() != 0 {
		return ErrClosed
	}
	if !fresh() {
		return ErrRegistered
	}
	pfd, err := unix.FcntlInt(uintptr(reg.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("reactor: duplicate descriptor %d: %w", reg.fd, err)
	}
	if !open() {
		// Closed before the duplicate was made: pfd may be another's.
		_ = unix.Close(pfd)
		return fmt.Errorf("reactor: closed while registering: %w", syscall.EBADF)
	}
	// Added polled for nothing, and armed by the loop once it has attached
	// the registration: armed at once, a channel with events queued is
	// reported before the Attach task runs, and the loop, finding no
	// handler, would call epoll_wait again and again, each time with the
	// same report, until the task is posted (thousands of spins per
	// Register in BenchmarkDispatchInline, whose channel is full when it
	// registers it).
	gen, err := r.l.Add(pfd, 0)
	if err != nil {
		_ = unix.Close(pfd)
		return err
	}
	reg.gen, reg.pfd = gen, pfd
	r.live[reg] = struct{}{}
	record()
	if reg.ch != nil && reg.ch.Source() == nil {
		// Closed since open(): its OnClose hook was not kept.
		reg.removed.Store(true)
		delete(r.byCh, reg.ch)
	}
	r.post(func() {
		if !reg.removed.Load() {
			r.l.Attach(reg.pfd, reg.gen, reg)
			if !r.paused { // resume arms it otherwise
				if err := r.l.Modify(reg.pfd, reg.gen, poll.In); err != nil {
					r.log.Warn().Err(err).Int("fd", reg.fd).Msg("epoll arm")
				}
			}
		} else {
			r.forget(reg)
		}
	})
	return nil
}

// Unregister stops reading a channel: once it returns, the reactor takes no
// further event from the channel (events already taken are still handled).
// It may be called from a handler. Unregistering a channel that is closed
// returns nil: its registration went when it closed.
func (r *Reactor) Unregister(ch Channel) error {
	r.regMu.Lock()
	reg, ok := r.byCh[ch]
	if ok {
		delete(r.byCh, ch)
	}
	r.regMu.Unlock()
	if !ok {
		if ch != nil && ch.Source() == nil {
			return nil
		}
		return ErrNotRegistered
	}
	r.drop(reg)
	return nil
}

// RegisterCQ adds a completion queue: whenever its descriptor is readable
// the reactor polls it and hands each work completion to h, in order (one
// completion of a queue at a time, also on the pool). It may be called from
// a handler.
//
// The reactor polls a duplicate of the queue's descriptor. When the queue
// is destroyed (DestroyQP, or Destroy of its id) the registration is
// dropped by itself, shortly after: UnregisterCQ is then optional.
func (r *Reactor) RegisterCQ(cq id.CQ, h CompletionHandler) error {
	if isNil(h) || cq == nil {
		return fmt.Errorf("reactor: nil completion queue or handler: %w", syscall.EINVAL)
	}
	fd := cq.Fd()
	if fd < 0 {
		return fmt.Errorf("reactor: completion queue has no descriptor (destroyed?): %w", syscall.EBADF)
	}
	reg := &registration{cq: cq, fd: fd, ch2: h, wcs: make([]id.WC, 32)}
	return r.add(reg, func() bool { return cq.Fd() == fd }, func() bool {
		_, dup := r.byCQ[cq]
		return !dup
	}, func() {
		r.byCQ[cq] = reg
		if cn, ok := cq.(closeNotifier); ok {
			reg.stop = cn.OnClose(func() { r.ownerClosed(reg) })
		}
	})
}

// UnregisterCQ stops polling a completion queue. Completions already taken
// are still handled. Unregistering a destroyed queue returns nil: its
// registration goes with it.
func (r *Reactor) UnregisterCQ(cq id.CQ) error {
	r.regMu.Lock()
	reg, ok := r.byCQ[cq]
	if ok {
		delete(r.byCQ, cq)
	}
	r.regMu.Unlock()
	if !ok {
		if cq != nil && cq.Fd() < 0 {
			return nil
		}
		return ErrNotRegistered
	}
	r.drop(reg)
	return nil
}

// drop ends a registration already removed from byCh or byCQ: no read
// after it returns, and the loop deletes its epoll entry and closes its
// duplicate.
func (r *Reactor) drop(reg *registration) {
	r.regMu.Lock()
	stop := reg.stop
	r.regMu.Unlock()
	if stop != nil {
		stop()
	}
	// Marked here, not only in the loop's task: an inline handler cannot
	// wait for that task, and the loop checks the mark before every read.
	reg.removed.Store(true)
	// The loop's call does not wait while the loop runs inline handlers
	// (the caller may be one of them), so the mark alone would let a take
	// that began before it run on after Unregister returns, into events
	// queued since. A source that can stop its takes reads the mark under
	// its own lock, which Fence passes through: a take either sees the
	// mark or is over when Fence returns. The loop marks its takes from
	// other sources (taking), and one in progress is waited for here.
	// Neither runs a handler, so a handler unregistering finds none in
	// progress. (With workers the loop runs no handler, and a completion
	// queue is polled outside InlineBegin: call waits then.)
	if reg.guarded != nil {
		reg.guarded.Fence()
	}
	for reg.taking.Load() {
		runtime.Gosched()
	}
	r.call(func() { r.forget(reg) })
}

// ownerClosed is a channel's or completion queue's OnClose hook: the owner
// is closing, its descriptor still open.
func (r *Reactor) ownerClosed(reg *registration) {
	r.regMu.Lock()
	if reg.cq != nil {
		if r.byCQ[reg.cq] == reg {
			delete(r.byCQ, reg.cq)
		}
	} else if r.byCh[reg.ch] == reg {
		delete(r.byCh, reg.ch)
	}
	r.regMu.Unlock()
	reg.removed.Store(true)
	r.call(func() { r.forget(reg) })
}

// dropClosed drops a registration whose owner the loop found closed (a
// channel that reads EBADF, a queue whose Fd is -1). Loop only.
func (r *Reactor) dropClosed(reg *registration) {
	r.regMu.Lock()
	if reg.cq != nil {
		if r.byCQ[reg.cq] == reg {
			delete(r.byCQ, reg.cq)
		}
	} else if r.byCh[reg.ch] == reg {
		delete(r.byCh, reg.ch)
	}
	stop := reg.stop
	r.regMu.Unlock()
	if stop != nil {
		stop()
	}
	r.forget(reg)
}

// forget drops a registration: its epoll entry and its duplicate
// descriptor. Loop only (or once the loop has exited, which closed every
// duplicate).
func (r *Reactor) forget(reg *registration) {
	reg.removed.Store(true)
	if reg.closed.Load() {
		return
	}
	// pfd is open until below, so its number is still reg's.
	if err := r.l.Unregister(reg.pfd); err != nil && !evloop.IsNotRegistered(err) {
		r.log.Warn().Err(err).Int("fd", reg.fd).Msg("epoll delete")
	}
	r.regMu.Lock()
	r.closePfdLocked(reg)
	r.regMu.Unlock()
}

// closePfdLocked closes reg's duplicate descriptor once. regMu is held.
func (r *Reactor) closePfdLocked(reg *registration) {
	if reg.closed.CompareAndSwap(false, true) {
		delete(r.live, reg)
		_ = unix.Close(reg.pfd)
	}
}

// exit is the loop's OnExit: it releases every duplicate descriptor, also
// when Close gave up waiting for the loop (a handler that blocked past
// Close's deadline). The loop closes its own descriptors after it, and
// runs no task posted from here on.
func (r *Reactor) exit() {
	r.regMu.Lock()
	for reg := range r.live {
		reg.removed.Store(true)
		r.closePfdLocked(reg)
	}
	r.regMu.Unlock()
}

// drain takes up to Batch events from a readable channel and dispatches
// them, pausing when MaxPending is reached. With workers, the batch goes to
// the mailboxes under one hold of mbMu. A full batch is followed by the
// next, without a wait, while the loop is alone with the channel. It
// returns how many it took.
func (r *Reactor) drain(reg *registration) int {
	if reg.cq != nil {
		return r.drainCQ(reg)
	}
	if r.opts.Workers == 0 {
		return r.drainInline(reg)
	}
	n := 0
	for {
		k := r.drainBatch(reg)
		n += k
		if k < r.opts.Batch || r.paused || !r.l.Alone() {
			return n
		}
	}
}

// drainBatch is drain's one batch with workers: up to Batch events taken,
// claimed and handed to the mailboxes. It returns how many it took.
func (r *Reactor) drainBatch(reg *registration) int {
	// The batch is counted pending once, before the workers can see it:
	// one atomic operation on a counter the workers write too, instead of
	// one per event. seen is pending as last read (only workers change it
	// meanwhile, and they lower it), taken-counted the events taken and
	// not yet added.
	limit := int64(r.opts.MaxPending)
	taken, counted, seen := 0, 0, r.pending.Load()
	at := journal.Now() // one clock reading for the batch's journal records
	for ; taken < r.opts.Batch && !reg.removed.Load(); taken++ {
		if seen+int64(taken-counted) >= limit {
			r.pending.Add(int64(taken - counted))
			counted = taken
			if seen = r.pending.Load(); seen >= limit {
				r.pause()
				break
			}
		}
		// Taken into the batch's item in place, and claimed: the worker
		// delivers it (id.TakeClaim).
		it := r.nextItem()
		ev, c, err := id.TakeClaim(reg.src, &it.raw, at)
		if err != nil {
			r.batch = r.batch[:len(r.batch)-1]
			if !errors.Is(err, syscall.EAGAIN) {
				// A closed channel: stop polling it instead of spinning.
				if !errors.Is(err, id.ErrClosed) {
					r.log.Warn().Err(err).Int("fd", reg.fd).Msg("channel unreadable, unregistering")
				}
				r.dropClosed(reg)
			}
			break
		}
		if ev != nil {
			it.ev, it.reg, it.kind = ev, reg, itemEvent // a CONNECT_REQUEST, delivered already
			it.slot = uint32(handle.Index(it.raw.UID))
		} else {
			it.setClaim(c, reg, at)
		}
	}
	r.pending.Add(int64(taken - counted))
	r.stats.events.Add(uint64(taken))
	r.enqueue()
	return taken
}

// drainInline takes up to Batch events from a readable channel and runs
// their handlers on the loop, one after the other, and another Batch
// while the last was full and the loop is alone with the channel. The
// call counts as one pending event (inline, no more than one is ever taken
// and not handled), and is marked inline once: per event, that is four
// atomic operations fewer than counting and marking each (BENCHMARKS.md,
// "What is slow and why"). MaxPending does not apply: nothing waits. The
// journal's clock is read once per batch too: its events' records share
// that time, or a later record's (journal.Journal.AddAt), so a record's
// time may precede the event's by the batch's earlier handlers.
func (r *Reactor) drainInline(reg *registration) int {
	r.pending.Add(1)
	r.l.InlineBegin()
	n := 0
	for {
		k, at := 0, journal.Now()
		for more := true; more; {
			var j int
			j, more = r.handleInline(reg, at, r.opts.Batch-k)
			k += j
		}
		n += k
		r.stats.events.Add(uint64(k))
		if k < r.opts.Batch || !r.l.Alone() {
			break
		}
	}
	r.l.InlineEnd()
	r.handled(1)
	return n
}

// handleInline takes up to max events from reg and runs their handlers,
// all under one deferred recover rather than one per event (its defers
// were a tenth of an inline dispatch: BENCHMARKS.md, "What is slow and
// why", finding 27). It returns how many events it took; more reports
// that a handler panicked (its event is counted in n, and acknowledged by
// Event.Handle) and that the caller goes on with the batch's next event,
// as it would have after a handler that returned.
func (r *Reactor) handleInline(reg *registration, at journal.Stamp, max int) (n int, more bool) {
	var cur running
	defer func() {
		if cur.in {
			if v := recover(); v != nil {
				r.recovered(&cur, v)
				n, more = n+1, true
			}
		}
	}()
	for ; n < max && !reg.removed.Load(); n++ {
		ev, err := r.takeInline(reg, at)
		if err != nil {
			if !errors.Is(err, syscall.EAGAIN) {
				if !errors.Is(err, id.ErrClosed) {
					r.log.Warn().Err(err).Int("fd", reg.fd).Msg("channel unreadable, unregistering")
				}
				r.dropClosed(reg)
			}
			break
		}
		r.handle(ev, reg.h, &cur)
	}
	return n, false
}

// takeInline takes reg's next event for an inline handler, unless reg was
// unregistered: with the mark read under the source's lock when the source
// can (fabric.GuardedSource: no fence of the loop's own per event, a tenth
// of an inline dispatch), else with the take marked (takeMarked; see
// drop).
func (r *Reactor) takeInline(reg *registration, at journal.Stamp) (*id.Event, error) {
	g := reg.guarded
	if g == nil {
		return r.takeMarked(reg, at)
	}
	if testHookTake != nil {
		testHookTake()
	}
	for {
		if err := g.NextUnless(&reg.removed, &r.raw); err != nil {
			return nil, err
		}
		if ev := id.DeliverInto(reg.src, &r.raw, at, r.ev); ev != nil {
			return ev, nil
		}
	}
}

// takeMarked is takeInline from a source that cannot stop its takes: the
// take is marked while it runs (taking), and the mark checked after the
// loop's own; drop waits for a marked take.
func (r *Reactor) takeMarked(reg *registration, at journal.Stamp) (*id.Event, error) {
	reg.taking.Store(true)
	defer reg.taking.Store(false)
	if reg.removed.Load() {
		return nil, errStopped
	}
	if testHookTake != nil {
		testHookTake()
	}
	return id.TakeEventInto(reg.src, &r.raw, at, r.ev)
}

// errStopped is takeInline's error for a registration unregistered before
// the take: EAGAIN, as the guarded sources' (nothing more to take).
var errStopped = fmt.Errorf("reactor: unregistered: %w", syscall.EAGAIN)

// testHookTake, if set (by tests only), runs in takeInline between the
// loop's check of the registration's mark (a source's is under its lock,
// later) and the take.
var testHookTake func()

// drainCQ polls up to Batch completions from a readable completion queue
// and dispatches them. It returns how many it polled.
func (r *Reactor) drainCQ(reg *registration) int {
	if reg.removed.Load() {
		return 0
	}
	room := int64(r.opts.MaxPending) - r.pending.Load()
	if room <= 0 {
		r.pause()
		return 0
	}
	wcs := reg.wcs[:min(int64(len(reg.wcs)), int64(r.opts.Batch), room)]
	if testHookTake != nil {
		testHookTake()
	}
	// Polled before InlineBegin: an UnregisterCQ meanwhile waits for the
	// loop's task, which runs after this drain (see drop).
	n := reg.cq.Poll(wcs)
	if n == 0 && reg.cq.Fd() < 0 {
		// Destroyed (with its QP): it made its descriptor readable so
		// that we would learn of it here.
		r.dropClosed(reg)
		return 0
	}
	if r.opts.Workers == 0 {
		// As drainInline: one pending count and one inline mark a batch.
		r.pending.Add(1)
		r.l.InlineBegin()
		for k := 0; k < n; k++ {
			r.handleWC(reg, &wcs[k])
		}
		r.l.InlineEnd()
		r.stats.events.Add(uint64(n))
		r.handled(1)
		return n
	}
	r.stats.events.Add(uint64(n))
	r.pending.Add(int64(n))
	for k := 0; k < n; k++ {
		it := r.nextItem()
		it.wc, it.reg, it.kind = wcs[k], reg, itemWC
	}
	r.enqueue()
	return n
}

// nextItem appends an item to the loop's batch and returns it. It reuses
// the slot of an earlier batch as clearItem left it (no pointer, stale
// bytes the caller overwrites: Next fills the whole raw event) rather than
// zeroing 560 bytes per event, and the whole batch again in enqueue.
// Loop only.
func (r *Reactor) nextItem() *item {
	if n := len(r.batch); n < cap(r.batch) {
		r.batch = r.batch[:n+1]
	} else {
		r.batch = append(r.batch, item{})
	}
	return &r.batch[len(r.batch)-1]
}

// enqueue hands the loop's batch to the mailboxes, under one hold of mbMu,
// and starts workers for the mailboxes that became runnable, up to
// Options.Workers running. Loop only.
func (r *Reactor) enqueue() {
	if len(r.batch) == 0 {
		return
	}
	r.mbMu.Lock()
	runnable := 0
	for k := range r.batch {
		it := &r.batch[k]
		var key mboxKey
		switch it.kind {
		case itemWC:
			key.reg = it.reg
		case itemEvent:
			key.id = it.ev.ID
		default:
			key.id = it.claim.Owner()
		}
		if r.enqueueLocked(key, it) {
			runnable++
		}
	}
	start := r.startWorkersLocked(runnable)
	if r.idleBoxes > maxIdleMailboxes {
		r.sweepIdleLocked()
	}
	r.mbMu.Unlock()
	for k := range r.batch {
		clearItem(&r.batch[k])
	}
	r.batch = r.batch[:0]
	r.startWorkers(start)
}

// handleWC runs one completion handler; the caller counts it handled.
func (r *Reactor) handleWC(reg *registration, wc *id.WC) {
	defer r.lat.end(r.lat.beginWC())
	defer func() {
		if v := recover(); v != nil {
			r.panicked(&PanicError{Value: v}, v)
		}
	}()
	if err := reg.ch2.HandleCompletion(wc); err != nil {
		r.stats.errors.Add(1)
		r.report(&CompletionError{WC: *wc, Err: err})
	}
}

// pause stops reading every channel until resume.
func (r *Reactor) pause() {
	if r.paused {
		return
	}
	r.paused = true
	r.l.Range(func(fd int, gen uint32, _ *registration) { _ = r.l.Modify(fd, gen, 0) })
	r.stats.overloads.Add(1)
	r.log.Warn().Int64("pending", r.pending.Load()).Msg("overload, reading paused")
	if r.opts.OnOverload != nil {
		r.opts.OnOverload()
	} else {
		r.report(ErrOverload)
	}
	// A worker may have brought pending down already.
	if r.pending.Load() <= int64(r.opts.MaxPending/2) {
		r.resume()
	}
}

// resume re-arms every channel. Loop only.
func (r *Reactor) resume() {
	if !r.paused {
		return
	}
	r.paused = false
	r.l.Range(func(fd int, gen uint32, _ *registration) { _ = r.l.Modify(fd, gen, poll.In) })
}

// stopWorkers makes the workers start no more (they exit once the run
// queue is empty).
func (r *Reactor) stopWorkers() {
	r.mbMu.Lock()
	r.stopping = true
	r.mbMu.Unlock()
}

// running is what a recover needs of the handler that panicked: the
// event's id and type, and when the handler began (the latency sample).
// One goroutine's (the loop's, a worker's), on its stack.
type running struct {
	handle uint64
	typ    id.EventType
	t0     int64
	in     bool // a handler runs: a panic now is its
}

// handle runs one handler; Event.Handle acknowledges the event, also when
// the handler panics. The caller counts it handled, and recovers a panic
// of the handler in a deferred call that asks cur whether a handler ran
// (cur.in) and calls recovered: one defer for a batch of events instead
// of two per event. A panic elsewhere (cur.in false) is not recovered, as
// before.
func (r *Reactor) handle(ev *id.Event, h id.Handler, cur *running) {
	cur.handle, cur.typ, cur.t0 = ev.ID.Handle(), ev.Type, r.lat.begin(ev.Seq)
	cur.in = true
	err := ev.Handle(h)
	cur.in = false
	r.lat.end(cur.t0)
	if err != nil {
		r.stats.errors.Add(1)
		r.report(&HandlerError{ID: cur.handle, Type: cur.typ, Err: err})
	}
}

// recovered ends a handler that panicked with v (cur.in): its latency
// sample, the count and the report, as for one that returned an error.
func (r *Reactor) recovered(cur *running, v any) {
	cur.in = false
	r.lat.end(cur.t0)
	r.panicked(&PanicError{ID: cur.handle, Type: cur.typ, Value: v}, v)
}

// handled counts n finished events: resume reading past an overload, and
// wake Close when nothing is pending.
func (r *Reactor) handled(n int) {
	left := r.pending.Add(-int64(n))
	half := int64(r.opts.MaxPending / 2)
	if left <= half && left+int64(n) > half && r.opts.Workers > 0 && r.state.Load() == 0 {
		r.post(r.resume)
	}
	if left == 0 && r.state.Load() == 1 {
		r.mbMu.Lock()
		if r.idle != nil {
			select {
			case r.idle <- struct{}{}:
			default:
			}
		}
		r.mbMu.Unlock()
	}
}

func (r *Reactor) panicked(pe *PanicError, v any) {
	r.stats.panics.Add(1)
	r.log.Error().Interface("panic", v).Msg("handler panicked")
	if pe != nil {
		r.report(pe)
	}
}

func (r *Reactor) report(err error) {
	if r.opts.OnError != nil {
		r.opts.OnError(err)
	}
}

// Stats returns the reactor's counters.
func (r *Reactor) Stats() Stats {
	r.regMu.Lock()
	n := len(r.byCh) + len(r.byCQ)
	r.regMu.Unlock()
	return Stats{
		Channels: n, Events: r.stats.events.Load(), Pending: r.pending.Load(),
		Overloads: r.stats.overloads.Load(), Panics: r.stats.panics.Load(), Errors: r.stats.errors.Load(),
	}
}

// Close stops the reactor: it stops reading channels (the channels stay
// open and keep their queued events), waits until the events already taken
// have been handled, running handlers returned and the workers exited, then
// releases the loop's descriptors.
//
// If ctx ends first, Close returns its error at once, with workers and
// inline alike: events no handler has started are then acknowledged
// without their handlers (connection requests among them are rejected and
// their new ids destroyed), and a handler still running is left to return.
// Nothing leaks: the loop releases its descriptors when it exits, after
// that handler, and the workers exit when their handlers return. A
// later Close waits again, with its own context, for all of that to end,
// and returns nil once it has. Closing a closed reactor is a no-op; Close
// must not be called from a handler.
func (r *Reactor) Close(ctx context.Context) error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	switch r.state.Load() {
	case 2:
		return nil
	case 0:
		r.beginClose()
	}
	err := r.settle(ctx)
	if r.opts.Workers > 0 {
		if err != nil {
			r.abandon()
		}
		r.stopWorkers()
		if err == nil {
			r.workers.Wait() // prompt: no handler is running
		}
	}
	if err != nil {
		return err
	}
	r.state.Store(2)
	return nil
}

// beginClose stops reading: every registration is marked (the loop checks
// the mark before every read, also between the events of a batch) and the
// loop is told to drop them and exit.
func (r *Reactor) beginClose() {
	r.regMu.Lock()
	r.state.Store(1)
	regs := make([]*registration, 0, len(r.byCh)+len(r.byCQ))
	for _, reg := range r.byCh {
		regs = append(regs, reg)
	}
	for _, reg := range r.byCQ {
		regs = append(regs, reg)
	}
	clear(r.byCh)
	clear(r.byCQ)
	r.regMu.Unlock()
	for _, reg := range regs {
		reg.removed.Store(true)
		if reg.stop != nil {
			reg.stop()
		}
	}
	r.mbMu.Lock()
	r.idle = make(chan struct{}, 1)
	r.mbMu.Unlock()
	r.post(func() {
		var regs []*registration
		r.l.Range(func(_ int, _ uint32, reg *registration) { regs = append(regs, reg) })
		for _, reg := range regs {
			r.forget(reg)
		}
	})
	r.l.Stop()
}

// settle waits until the loop has exited and no event is pending, or ctx
// ends.
func (r *Reactor) settle(ctx context.Context) error {
	select {
	case <-r.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	for r.pending.Load() > 0 {
		select {
		case <-r.idle:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// abandon acknowledges the events no handler has started, without their
// handlers, when Close gives up waiting; connection requests among them
// are rejected and their new ids destroyed (Event.Handle does that for a
// request whose handler fails without answering it).
func (r *Reactor) abandon() {
	r.abandoning.Store(true) // and a worker's items taken but not started
	r.mbMu.Lock()
	var evs []*id.Event
	var claimed []item
	n := 0
	// Every mailbox: those waiting in the run queue and those a worker is
	// draining (its handler blocked past the deadline), whose next items
	// have not started either.
	r.mboxes.all(func(mb *mailbox) {
		for it, ok := mb.items.Pop(); ok; it, ok = mb.items.Pop() {
			if it.claimed() {
				claimed = append(claimed, it) // delivered below, without mbMu
			} else if it.ev != nil {
				evs = append(evs, it.ev)
			}
			n++
		}
	})
	for mb, ok := r.runq.Pop(); ok; mb, ok = r.runq.Pop() {
		mb.scheduled = false
		r.mboxes.del(mb.key)
		mb.key = mboxKey{}
	}
	r.sweepIdleLocked()
	r.mbMu.Unlock()
	for k := range claimed {
		if ev := claimed[k].deliver(); ev != nil {
			evs = append(evs, ev)
		}
	}
	for _, ev := range evs {
		_ = ev.Handle(abandoned{})
	}
	if n > 0 {
		r.handled(n)
	}
}

// abandoned is the handler of events Close gave up on: it fails, so that an
// unanswered CONNECT_REQUEST is rejected and its new id destroyed.
type abandoned struct{}

var errAbandoned = errors.New("reactor: closed before the event's handler ran")

func (abandoned) HandleEvent(*id.Event) error { return errAbandoned }
