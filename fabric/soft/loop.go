package soft

import (
	"runtime"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmrt/cmrt/poll"
)

// pollable is something a loop polls: a connection, a listener or a
// datagram socket. Its methods run on the loop goroutine only.
type pollable interface {
	// onEvents handles readiness bits reported for the descriptor.
	onEvents(events uint32)
}

// regEntry is a registered descriptor. gen tells a stale epoll report (for a
// descriptor closed and reused meanwhile) from a live one.
type regEntry struct {
	gen uint32
	p   pollable
}

// loop is one epoll loop. Only its goroutine touches regs, the epoll set and
// the pollables' state; other goroutines hand it work with post or call.
type loop struct {
	eng    *engine
	log    zerolog.Logger
	poller *poll.Poller
	waker  *poll.Waker
	done   chan struct{}

	mu    sync.Mutex
	tasks []func()
	spare []func() // the other task buffer, swapped with tasks by runTasks
	dead  bool

	// owned by the loop goroutine
	regs     map[int32]regEntry
	gen      uint32
	stopping bool
}

const wakerData = ^uint64(0)

func newLoop(e *engine) (*loop, error) {
	p, err := poll.Open(256)
	if err != nil {
		return nil, err
	}
	w, err := poll.NewWaker()
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	if err := p.Add(w.Fd(), poll.In, wakerData); err != nil {
		_ = p.Close()
		_ = w.Close()
		return nil, err
	}
	return &loop{eng: e, log: e.log, poller: p, waker: w, done: make(chan struct{}), regs: make(map[int32]regEntry)}, nil
}

// post queues fn to run on the loop goroutine. It reports false, and fn does
// not run, once the loop has stopped.
func (l *loop) post(fn func()) bool {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return false
	}
	l.tasks = append(l.tasks, fn)
	l.mu.Unlock()
	if err := l.waker.Wake(); err != nil {
		l.log.Error().Err(err).Msg("wake loop")
	}
	return true
}

// call runs fn on the loop goroutine and waits for it. It must not be called
// from the loop goroutine.
func (l *loop) call(fn func()) {
	done := make(chan struct{})
	if l.post(func() { fn(); close(done) }) {
		<-done
	}
}

// register adds fd to the epoll set for events, reporting to p. Loop only.
func (l *loop) register(fd int, events uint32, p pollable) (uint32, error) {
	l.gen++
	if err := l.poller.Add(fd, events, uint64(uint32(fd))|uint64(l.gen)<<32); err != nil {
		return 0, err
	}
	l.regs[int32(fd)] = regEntry{gen: l.gen, p: p}
	return l.gen, nil
}

// modify changes the events fd is polled for. Loop only.
func (l *loop) modify(fd int, gen uint32, events uint32) error {
	return l.poller.Modify(fd, events, uint64(uint32(fd))|uint64(gen)<<32)
}

// unregister removes fd from the epoll set before it is closed. Loop only.
func (l *loop) unregister(fd int) {
	if _, ok := l.regs[int32(fd)]; !ok {
		return
	}
	delete(l.regs, int32(fd))
	if err := l.poller.Delete(fd); err != nil {
		l.log.Warn().Err(err).Int("fd", fd).Msg("epoll delete")
	}
}

// run is the loop goroutine.
func (l *loop) run() {
	defer close(l.done)
	events := make([]poll.Event, 256)
	// After a busy batch, look again without blocking, and yield once before
	// sleeping in epoll_wait: the goroutine that will post the next piece of
	// work (a reply, an ack) often runs in that window, which saves a wakeup.
	timeout := -1
	for {
		n, err := l.poller.Wait(events, timeout)
		if err == nil && n == 0 && timeout == 0 {
			runtime.Gosched()
			timeout = -1
			continue
		}
		timeout = 0
		if err != nil {
			l.log.Error().Err(err).Msg("epoll wait")
			continue
		}
		for k := 0; k < n; k++ {
			ev := events[k]
			if ev.Data == wakerData {
				l.waker.Reset()
				l.runTasks()
				continue
			}
			fd, gen := int32(uint32(ev.Data)), uint32(ev.Data>>32)
			r, ok := l.regs[fd]
			if !ok || r.gen != gen {
				continue // stale: the descriptor was closed after epoll reported it
			}
			r.p.onEvents(ev.Events)
		}
		if l.stopping && l.finish() {
			return
		}
	}
}

// runTasks runs the queued tasks, including those they queue. The two task
// slices are swapped rather than reallocated.
func (l *loop) runTasks() {
	for {
		l.mu.Lock()
		tasks := l.tasks
		l.tasks = l.spare[:0]
		l.mu.Unlock()
		if len(tasks) == 0 {
			l.mu.Lock()
			l.spare = tasks
			l.mu.Unlock()
			return
		}
		for k, fn := range tasks {
			fn()
			tasks[k] = nil
		}
		l.mu.Lock()
		l.spare = tasks[:0]
		l.mu.Unlock()
	}
}

// finish stops the loop once no task is queued: it marks the loop dead so
// later posts are refused, and closes its descriptors.
func (l *loop) finish() bool {
	l.mu.Lock()
	if len(l.tasks) > 0 {
		l.mu.Unlock()
		return false
	}
	l.dead = true
	l.mu.Unlock()
	_ = l.poller.Close()
	_ = l.waker.Close()
	return true
}

// engine runs the loops of a fabric. A loop starts with the first socket
// that needs it and stops once its last socket has been closed for the
// grace period (WithIdleGrace), so a client making one connection at a
// time keeps its loop, and an idle fabric holds no goroutine.
type engine struct {
	log   zerolog.Logger
	grace time.Duration

	mu   sync.Mutex
	cur  *loop
	refs int
	idle idleTimer // armed while cur has no reference
	all  sync.WaitGroup
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
			l.run()
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
	case e.grace <= 0:
		stop = e.detachLocked()
	default:
		e.idle.arm(e.grace, func(gen uint64) { e.expire(l, gen) })
	}
	e.mu.Unlock()
	stopLoop(stop)
}

// expire stops l when the grace timer of generation gen fires and l is
// still idle.
func (e *engine) expire(l *loop, gen uint64) {
	e.mu.Lock()
	var stop *loop
	if e.idle.current(gen) && e.cur == l && e.refs == 0 {
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
	e.idle.disarm()
	return l
}

// stopLoop asks l (if any) to stop once its queued tasks have run.
func stopLoop(l *loop) {
	if l != nil {
		l.post(func() { l.stopping = true })
	}
}

// wait stops an idle loop at once, then blocks until every loop has
// stopped.
func (e *engine) wait() {
	e.mu.Lock()
	var stop *loop
	if e.cur != nil && e.refs == 0 {
		stop = e.detachLocked()
	}
	e.mu.Unlock()
	stopLoop(stop)
	e.all.Wait()
}
