package soft

import (
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmrt/cmrt/internal/evloop"
	"github.com/cmrt/cmrt/internal/ring"
)

// pollable is something a loop polls: a connection, a listener or a
// datagram socket. Its methods run on the loop goroutine only.
type pollable interface {
	// onEvents handles readiness bits reported for the descriptor.
	onEvents(events uint32)
}

// loop is one event loop (internal/evloop) of the fabric. Only its
// goroutine touches the epoll set's table and the pollables' state; other
// goroutines hand it work with post or call.
type loop struct {
	*evloop.Loop[pollable]
	eng *engine
	log zerolog.Logger
	// hs is where the loop parses an MPA Request or Reply that came
	// whole in one read (conn.received): made by the first, loop only.
	hs []byte
	// rb is the buffer the loop reads connections' sockets into
	// (conn.readable), made by the first read: a stack buffer of 16 KiB,
	// zeroed per read, cost more than the reads' own user-space work.
	// Loop only; nothing of it is kept past a read's handling.
	rb []byte

	// The connections' tasks posted without a closure (postConn).
	ctMu  sync.Mutex
	ctq   ring.Ring[connTask]
	ctRun func() // runConnTask, made once

	// pt holds the data paths' timers (loop_timers.go).
	pt pathTimers
}

func dispatch(p pollable, events uint32) { p.onEvents(events) }

// readBuf returns the loop's read buffer (rb). Loop only.
func (l *loop) readBuf() []byte {
	if l.rb == nil {
		l.rb = make([]byte, connReadSize)
	}
	return l.rb
}

func newLoop(e *engine) (*loop, error) {
	opts := []evloop.Option{evloop.WithName("soft"), evloop.WithLogger(e.log), evloop.WithMaxEvents(256)}
	if e.testTaskBudget > 0 {
		opts = append(opts, evloop.WithTaskBudget(e.testTaskBudget))
	}
	l, err := evloop.New(dispatch, opts...)
	if err != nil {
		return nil, err
	}
	lp := &loop{Loop: l, eng: e, log: e.log}
	lp.ctRun = lp.runConnTask
	lp.pt.init(lp)
	return lp, nil
}

// post queues fn to run on the loop goroutine. It reports false, and fn does
// not run, once the loop has stopped.
func (l *loop) post(fn func()) bool { return l.Post(fn) }

// call runs fn on the loop goroutine and waits for it. It must not be called
// from the loop goroutine.
func (l *loop) call(fn func()) { l.Call(fn) }

// register adds fd to the epoll set for events, reporting to p. Loop only.
func (l *loop) register(fd int, events uint32, p pollable) (uint32, error) {
	return l.Register(fd, events, p)
}

// modify changes the events fd is polled for. Loop only.
func (l *loop) modify(fd int, gen uint32, events uint32) error {
	return l.Modify(fd, gen, events)
}

// unregister removes fd from the epoll set before it is closed. Loop only.
func (l *loop) unregister(fd int) {
	if err := l.Unregister(fd); err != nil && !evloop.IsNotRegistered(err) {
		l.log.Warn().Err(err).Int("fd", fd).Msg("epoll delete")
	}
}

// engine runs the loops of a fabric. A loop starts with the first socket
// that needs it and stops once its last socket has been closed for the
// grace period (WithIdleGrace), so a client making one connection at a
// time keeps its loop, and an idle fabric holds no goroutine.
type engine struct {
	f     *Fabric // the fabric the engine runs (its connections reach it here)
	log   zerolog.Logger
	grace time.Duration
	// testTaskBudget, set by tests only, bounds the tasks a loop runs
	// between two looks at its descriptors.
	testTaskBudget int

	mu   sync.Mutex
	cur  *loop
	refs int
	idle idleTimer // armed while cur has no reference
	// waiters counts the wait calls in progress: while there is one, a
	// loop whose last reference goes stops at once, with no grace period
	// (a connection a Destroy handed to its loop releases it after wait
	// began).
	waiters int
	all     sync.WaitGroup
}

// acquire returns the running loop, starting one if needed, and counts a
// reference to it. Every acquire is matched by a release on that loop.
func (e *engine) acquire() (*loop, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.idle.disarm()
	if e.cur == nil {
		l, err := newLoop(e)
		if err != nil {
			return nil, err
		}
		e.cur, e.refs = l, 0
		e.all.Add(1)
		go func() {
			defer e.all.Done()
			l.Run()
		}()
	}
	e.refs++
	return e.cur, nil
}

// release drops a reference to l; after the last one, l stops once the
// grace period passes without a new reference.
func (e *engine) release(l *loop) {
	e.mu.Lock()
	if e.cur != l {
		e.mu.Unlock()
		return
	}
	e.refs--
	var stop *loop
	switch {
	case e.refs > 0:
	case e.grace <= 0 || e.waiters > 0:
		stop = e.detachLocked()
	default:
		e.idle.arm(e.grace, e)
	}
	e.mu.Unlock()
	stopLoop(stop)
}

// idleFired implements idleOwner: the current loop stops once its grace
// period is over and it is still idle (an acquire disarms the period, and
// a loop replaced since went through detachLocked, which stops it).
func (e *engine) idleFired() {
	e.mu.Lock()
	var stop *loop
	if e.idle.due() && e.cur != nil && e.refs == 0 {
		stop = e.detachLocked()
	}
	e.mu.Unlock()
	stopLoop(stop)
}

// detachLocked forgets the current loop, which has no reference, and
// returns it for stopLoop. e.mu is held.
func (e *engine) detachLocked() *loop {
	l := e.cur
	e.cur = nil
	e.idle.stop()
	return l
}

// stopLoop asks l (if any) to stop once its queued tasks have run.
func stopLoop(l *loop) {
	if l != nil {
		l.Stop()
	}
}

// wait stops an idle loop at once, then blocks until every loop has
// stopped; a loop whose last reference goes meanwhile stops at once too.
func (e *engine) wait() {
	e.mu.Lock()
	e.waiters++
	var stop *loop
	if e.cur != nil && e.refs == 0 {
		stop = e.detachLocked()
	}
	e.mu.Unlock()
	stopLoop(stop)
	e.all.Wait()
	e.mu.Lock()
	e.waiters--
	e.mu.Unlock()
}
