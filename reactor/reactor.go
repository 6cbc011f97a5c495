package reactor

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/panjf2000/ants/v2"
	"github.com/rs/zerolog"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/goid"
	"github.com/cmrt/cmrt/poll"
)

// Channel is what the reactor multiplexes: an event channel with a
// pollable descriptor (channel.Channel).
type Channel interface {
	id.Channel
	Fd() int
}

// registration is a channel (or a completion queue) the loop reads.
// Loop-owned except removed.
type registration struct {
	key     uint64
	ch      Channel
	src     id.EventSource
	fd      int
	h       id.Handler
	cq      id.CQ
	ch2     CompletionHandler
	wcs     []id.WC // the loop's buffer for polling cq
	removed atomic.Bool
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
	opts   Options
	log    zerolog.Logger
	poller *poll.Poller
	waker  *poll.Waker
	pool   *ants.Pool
	done   chan struct{}
	loopG  uint64 // the loop goroutine's id (package internal/goid)

	state   atomic.Int32 // 0 open, 1 closing, 2 closed
	closeMu sync.Mutex

	taskMu sync.Mutex
	tasks  []func()

	regMu  sync.Mutex                // guards byCh, byCQ and nextKk (callers' side)
	byCh   map[Channel]*registration // registered channels
	byCQ   map[id.CQ]*registration   // registered completion queues
	nextKk uint64

	// loop-owned
	regs   map[uint64]*registration
	paused bool

	// mailboxes, shared by the loop and the workers
	mbMu     sync.Mutex
	mbCond   sync.Cond        // signalled when runq grows or workers must stop
	mboxes   map[any]*mailbox // by *id.ID, or by a completion queue's *registration
	runq     []*mailbox       // scheduled mailboxes no worker has taken yet
	spare    []*mailbox
	stopping bool // workers exit once runq is empty
	workers  sync.WaitGroup
	pending  atomic.Int64 // events taken and not yet handled
	idle     chan struct{}
	inline   atomic.Int32 // >0 while an inline handler runs on the loop

	stats counters
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

const wakerKey = 0

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
	p, err := poll.Open(128)
	if err != nil {
		return nil, err
	}
	w, err := poll.NewWaker()
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	if err := p.Add(w.Fd(), poll.In, wakerKey); err != nil {
		_ = p.Close()
		_ = w.Close()
		return nil, err
	}
	r := &Reactor{
		opts: o, log: o.Logger, poller: p, waker: w, done: make(chan struct{}),
		byCh: make(map[Channel]*registration), byCQ: make(map[id.CQ]*registration), regs: make(map[uint64]*registration),
		mboxes: make(map[any]*mailbox),
	}
	r.mbCond.L = &r.mbMu
	if o.Workers > 0 {
		// The pool hosts Workers long-lived workers that drain mailboxes, so
		// each learns its goroutine id once (Destroy needs it to tell a
		// handler destroying its own id from another goroutine).
		pool, err := ants.NewPool(o.Workers,
			ants.WithPanicHandler(func(v any) { r.panicked(nil, v) }),
			ants.WithLogger(&r.log),
		)
		if err != nil {
			_ = p.Close()
			_ = w.Close()
			return nil, fmt.Errorf("reactor: worker pool: %w", err)
		}
		r.pool = pool
		for k := 0; k < o.Workers; k++ {
			r.workers.Add(1)
			if err := pool.Submit(r.worker); err != nil {
				r.workers.Done()
				r.stopWorkers()
				pool.Release()
				_ = p.Close()
				_ = w.Close()
				return nil, fmt.Errorf("reactor: start worker: %w", err)
			}
		}
	}
	go r.loop()
	return r, nil
}

// post queues fn for the loop goroutine.
func (r *Reactor) post(fn func()) {
	r.taskMu.Lock()
	r.tasks = append(r.tasks, fn)
	r.taskMu.Unlock()
	if err := r.waker.Wake(); err != nil {
		r.log.Error().Err(err).Msg("reactor: wake")
	}
}

// call runs fn on the loop and waits, unless the caller is an inline
// handler (which runs on the loop: waiting would deadlock), in which case
// fn runs when the handler returns.
func (r *Reactor) call(fn func()) {
	if r.inline.Load() > 0 {
		r.post(fn)
		return
	}
	done := make(chan struct{})
	r.post(func() { fn(); close(done) })
	select {
	case <-done:
	case <-r.done:
	}
}

// Register adds a channel: its events go to h. A channel can be registered
// once. It may be called from a handler.
func (r *Reactor) Register(ch Channel, h id.Handler) error {
	if h == nil {
		return fmt.Errorf("reactor: nil handler: %w", syscall.EINVAL)
	}
	src := ch.Source()
	if src == nil {
		return fmt.Errorf("reactor: channel closed: %w", syscall.EBADF)
	}
	return r.add(&registration{ch: ch, src: src, fd: ch.Fd(), h: h}, func() bool {
		_, dup := r.byCh[ch]
		return !dup
	}, func(reg *registration) { r.byCh[ch] = reg })
}

// add registers reg: fresh reports whether its channel or queue is not yet
// registered and record files it (both under regMu). epoll_ctl is safe
// from any goroutine; the loop learns of the key through a task. A
// readiness report that comes first is ignored, and being level-triggered
// it comes again.
func (r *Reactor) add(reg *registration, fresh func() bool, record func(*registration)) error {
	if r.state.Load() != 0 {
		return ErrClosed
	}
	r.regMu.Lock()
	if !fresh() {
		r.regMu.Unlock()
		return ErrRegistered
	}
	r.nextKk++
	reg.key = r.nextKk
	if err := r.poller.Add(reg.fd, poll.In, reg.key); err != nil {
		r.regMu.Unlock()
		return err
	}
	record(reg)
	r.regMu.Unlock()
	r.call(func() {
		r.regs[reg.key] = reg
		if r.paused {
			_ = r.poller.Modify(reg.fd, 0, reg.key)
		}
	})
	return nil
}

// Unregister stops reading a channel: once it returns, the reactor takes no
// further event from the channel (events already taken are still handled).
// It may be called from a handler.
func (r *Reactor) Unregister(ch Channel) error {
	r.regMu.Lock()
	reg, ok := r.byCh[ch]
	if ok {
		delete(r.byCh, ch)
	}
	r.regMu.Unlock()
	if !ok {
		return ErrNotRegistered
	}
	// Marked here, not only in the loop's task: an inline handler cannot
	// wait for that task, and the loop checks the mark before every read.
	reg.removed.Store(true)
	r.call(func() { r.forget(reg.key) })
	return nil
}

// RegisterCQ adds a completion queue: whenever its descriptor is readable
// the reactor polls it and hands each work completion to h, in order (one
// completion of a queue at a time, also on the pool). It may be called from
// a handler.
func (r *Reactor) RegisterCQ(cq id.CQ, h CompletionHandler) error {
	if h == nil || cq == nil {
		return fmt.Errorf("reactor: nil completion queue or handler: %w", syscall.EINVAL)
	}
	fd := cq.Fd()
	if fd < 0 {
		return fmt.Errorf("reactor: completion queue has no descriptor (destroyed?): %w", syscall.EBADF)
	}
	return r.add(&registration{cq: cq, fd: fd, ch2: h, wcs: make([]id.WC, 32)}, func() bool {
		_, dup := r.byCQ[cq]
		return !dup
	}, func(reg *registration) { r.byCQ[cq] = reg })
}

// UnregisterCQ stops polling a completion queue. Completions already taken
// are still handled.
func (r *Reactor) UnregisterCQ(cq id.CQ) error {
	r.regMu.Lock()
	reg, ok := r.byCQ[cq]
	if ok {
		delete(r.byCQ, cq)
	}
	r.regMu.Unlock()
	if !ok {
		return ErrNotRegistered
	}
	reg.removed.Store(true)
	r.call(func() { r.forget(reg.key) })
	return nil
}

// forget drops a registration and its epoll entry. Loop only.
func (r *Reactor) forget(key uint64) {
	reg := r.regs[key]
	if reg == nil {
		return
	}
	reg.removed.Store(true)
	delete(r.regs, key)
	if err := r.poller.Delete(reg.fd); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EBADF) {
		r.log.Warn().Err(err).Int("fd", reg.fd).Msg("reactor: epoll delete")
	}
}

// loop is the reactor's goroutine.
func (r *Reactor) loop() {
	defer close(r.done)
	r.loopG = goid.ID()
	events := make([]poll.Event, 128)
	// After a busy batch, look again without blocking, and yield once before
	// sleeping in epoll_wait: the goroutine that will post the next piece of
	// work (a reply, an ack) often runs in that window, which saves a wakeup.
	timeout := -1
	for {
		n, err := r.poller.Wait(events, timeout)
		if err == nil && n == 0 && timeout == 0 {
			runtime.Gosched()
			timeout = -1
			continue
		}
		timeout = 0
		if err != nil {
			r.log.Error().Err(err).Msg("reactor: epoll wait")
			continue
		}
		for k := 0; k < n; k++ {
			key := events[k].Data
			if key == wakerKey {
				r.waker.Reset()
				if r.runTasks() {
					return
				}
				continue
			}
			if reg := r.regs[key]; reg != nil {
				r.drain(reg)
			}
		}
	}
}

// runTasks runs queued tasks; it reports true when the loop must stop.
func (r *Reactor) runTasks() (stop bool) {
	for {
		r.taskMu.Lock()
		tasks := r.tasks
		r.tasks = nil
		r.taskMu.Unlock()
		if len(tasks) == 0 {
			return r.state.Load() != 0
		}
		for _, fn := range tasks {
			fn()
		}
	}
}

// drain takes up to Batch events from a readable channel and dispatches
// them, pausing when MaxPending is reached.
func (r *Reactor) drain(reg *registration) {
	if reg.cq != nil {
		r.drainCQ(reg)
		return
	}
	for k := 0; k < r.opts.Batch && !reg.removed.Load(); k++ {
		if r.pending.Load() >= int64(r.opts.MaxPending) {
			r.pause()
			return
		}
		ev, err := id.TakeEvent(reg.src)
		if err != nil {
			if !errors.Is(err, syscall.EAGAIN) {
				// A closed channel: stop polling it instead of spinning.
				r.log.Warn().Err(err).Int("fd", reg.fd).Msg("reactor: channel unreadable, unregistering")
				reg.removed.Store(true)
				delete(r.regs, reg.key)
				_ = r.poller.Delete(reg.fd)
			}
			return
		}
		r.stats.events.Add(1)
		r.pending.Add(1)
		r.dispatch(ev, reg.h)
	}
}

// drainCQ polls up to Batch completions from a readable completion queue
// and dispatches them.
func (r *Reactor) drainCQ(reg *registration) {
	if reg.removed.Load() {
		return
	}
	room := int64(r.opts.MaxPending) - r.pending.Load()
	if room <= 0 {
		r.pause()
		return
	}
	wcs := reg.wcs[:min(int64(len(reg.wcs)), int64(r.opts.Batch), room)]
	n := reg.cq.Poll(wcs)
	for k := 0; k < n; k++ {
		r.stats.events.Add(1)
		r.pending.Add(1)
		r.dispatchWC(reg, &wcs[k])
	}
}

// dispatchWC hands one completion to its handler, in order per queue.
func (r *Reactor) dispatchWC(reg *registration, wc *id.WC) {
	if r.pool == nil {
		r.inline.Add(1)
		r.handleWC(reg, wc)
		r.inline.Add(-1)
		return
	}
	r.enqueue(reg, item{wc: *wc, reg: reg})
}

// handleWC runs one completion handler.
func (r *Reactor) handleWC(reg *registration, wc *id.WC) {
	defer func() {
		if v := recover(); v != nil {
			r.panicked(&PanicError{Value: v}, v)
		}
		r.handled()
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
	for _, reg := range r.regs {
		_ = r.poller.Modify(reg.fd, 0, reg.key)
	}
	r.stats.overloads.Add(1)
	r.log.Warn().Int64("pending", r.pending.Load()).Msg("reactor: overload, reading paused")
	r.report(ErrOverload)
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
	for _, reg := range r.regs {
		_ = r.poller.Modify(reg.fd, poll.In, reg.key)
	}
}

// dispatch hands one event to its handler.
func (r *Reactor) dispatch(ev *id.Event, h id.Handler) {
	if r.pool == nil {
		r.inline.Add(1)
		r.handle(ev, h, r.loopG)
		r.inline.Add(-1)
		return
	}
	r.enqueue(ev.ID, item{ev: ev, h: h})
}

// enqueue appends an item to key's mailbox and schedules the mailbox.
func (r *Reactor) enqueue(key any, it item) {
	r.mbMu.Lock()
	mb := r.mboxes[key]
	if mb == nil {
		if n := len(r.spare); n > 0 {
			mb, r.spare = r.spare[n-1], r.spare[:n-1]
		} else {
			mb = new(mailbox)
		}
		mb.key = key
		r.mboxes[key] = mb
	}
	mb.push(it)
	if !mb.scheduled {
		mb.scheduled = true
		r.runq = append(r.runq, mb)
		r.mbCond.Signal()
	}
	r.mbMu.Unlock()
}

// worker takes scheduled mailboxes and drains them, one at a time, until
// the reactor stops.
func (r *Reactor) worker() {
	defer r.workers.Done()
	g := goid.ID()
	wc := new(id.WC) // handed to completion handlers: one per worker, not per item
	r.mbMu.Lock()
	for {
		for len(r.runq) == 0 && !r.stopping {
			r.mbCond.Wait()
		}
		if len(r.runq) == 0 {
			r.mbMu.Unlock()
			return
		}
		mb := r.runq[0]
		copy(r.runq, r.runq[1:])
		r.runq[len(r.runq)-1] = nil
		r.runq = r.runq[:len(r.runq)-1]
		for {
			it, ok := mb.pop()
			if !ok {
				mb.scheduled = false
				delete(r.mboxes, mb.key)
				mb.key = nil
				r.spare = append(r.spare, mb)
				break
			}
			r.mbMu.Unlock()
			if it.reg != nil {
				*wc = it.wc
				r.handleWC(it.reg, wc)
			} else {
				r.handle(it.ev, it.h, g)
			}
			r.mbMu.Lock()
		}
	}
}

// stopWorkers makes the workers exit once the run queue is empty.
func (r *Reactor) stopWorkers() {
	r.mbMu.Lock()
	r.stopping = true
	r.mbCond.Broadcast()
	r.mbMu.Unlock()
}

// handle runs one handler; Event.Handle acknowledges the event.
func (r *Reactor) handle(ev *id.Event, h id.Handler, g uint64) {
	handle, typ := ev.ID.Handle(), ev.Type
	defer func() {
		if v := recover(); v != nil {
			r.panicked(&PanicError{ID: handle, Type: typ, Value: v}, v)
		}
		r.handled()
	}()
	if err := ev.HandleOn(h, g); err != nil {
		r.stats.errors.Add(1)
		r.report(&HandlerError{ID: handle, Type: typ, Err: err})
	}
}

// handled counts a finished event: resume reading past an overload, and
// wake Close when nothing is pending.
func (r *Reactor) handled() {
	n := r.pending.Add(-1)
	if n == int64(r.opts.MaxPending/2) && r.pool != nil && r.state.Load() == 0 {
		r.post(r.resume)
	}
	if n == 0 && r.state.Load() == 1 {
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
	r.log.Error().Interface("panic", v).Msg("reactor: handler panicked")
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
// have been handled and running handlers returned, then releases the worker
// pool and the loop's descriptors. If ctx ends first, Close returns its
// error; events still pending are then acknowledged without their handlers
// (connection requests among them are rejected).
// Closing twice is a no-op; Close must not be called from a handler.
func (r *Reactor) Close(ctx context.Context) error {
	r.closeMu.Lock()
	defer r.closeMu.Unlock()
	if !r.state.CompareAndSwap(0, 1) {
		return nil
	}
	r.mbMu.Lock()
	r.idle = make(chan struct{}, 1)
	r.mbMu.Unlock()
	r.post(func() {
		for key, reg := range r.regs {
			reg.removed.Store(true)
			_ = r.poller.Delete(reg.fd)
			delete(r.regs, key)
		}
	})
	var err error
	select {
	case <-r.done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	for err == nil && r.pending.Load() > 0 {
		select {
		case <-r.idle:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if r.pool != nil {
		if err != nil {
			r.abandon()
		}
		r.stopWorkers()
		if err == nil {
			r.workers.Wait()
		}
		r.pool.Release()
	}
	<-r.done
	r.state.Store(2)
	_ = r.poller.Close()
	_ = r.waker.Close()
	r.regMu.Lock()
	r.byCh = make(map[Channel]*registration)
	r.byCQ = make(map[id.CQ]*registration)
	r.regMu.Unlock()
	return err
}

// abandon acknowledges the events no handler has started, without their
// handlers, when Close gives up waiting; connection requests among them
// are rejected and their new ids destroyed (Event.HandleOn does that for a
// request whose handler fails without answering it).
func (r *Reactor) abandon() {
	r.mbMu.Lock()
	var evs []*id.Event
	n := 0
	// Every mailbox: those waiting in the run queue and those a worker is
	// draining (its handler blocked past the deadline), whose next items
	// have not started either.
	for _, mb := range r.mboxes {
		for it, ok := mb.pop(); ok; it, ok = mb.pop() {
			if it.ev != nil {
				evs = append(evs, it.ev)
			}
			n++
		}
	}
	for _, mb := range r.runq {
		mb.scheduled = false
		delete(r.mboxes, mb.key)
	}
	r.runq = nil
	r.mbMu.Unlock()
	for _, ev := range evs {
		_ = ev.HandleOn(abandoned{}, 0)
	}
	for ; n > 0; n-- {
		r.handled()
	}
}

// abandoned is the handler of events Close gave up on: it fails, so that an
// unanswered CONNECT_REQUEST is rejected and its new id destroyed.
type abandoned struct{}

var errAbandoned = errors.New("reactor: closed before the event's handler ran")

func (abandoned) HandleEvent(*id.Event) error { return errAbandoned }
