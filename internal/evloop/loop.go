// Package evloop is the event loop the reactor and the software fabric run
// on: one goroutine that owns an epoll set, a task queue that other
// goroutines fill, and a table of registered descriptors whose readiness it
// hands to their handlers.
//
// The loop waits in the Go netpoller, not in a blocking epoll_wait: its
// epoll descriptor is non-blocking and watched by the runtime (see
// poll.Poller.Netpoll), and an idle loop parks like a goroutine reading a
// socket. A goroutine blocked in the epoll_wait system call holds its P
// until sysmon takes it back, and then needs a P again to run when it
// wakes: on a loaded machine that made the tail of every hop through a
// loop milliseconds long (BENCHMARKS.md, "What is slow and why").
//
// One goroutine runs a loop (Run); Post, Call, Modify, Add and Stop may be
// called from any goroutine, everything else (Register, Attach, Unregister,
// Range, and the handlers and tasks themselves) only on the loop goroutine.
package evloop

import (
	"errors"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/poll"
)

// wakerData is the epoll data of the waker's eventfd: descriptor -1 with
// generation 0, which no registration has (generations start at 1).
const wakerData = uint64(^uint32(0))

// Loop states.
const (
	stateNew int32 = iota
	stateRunning
	stateExited
)

// entry is a registered descriptor: gen tells a report for it from a stale
// report for a descriptor that had its number before.
type entry[H any] struct {
	gen uint32
	h   H
}

// Loop is one event loop, dispatching readiness to handlers of type H.
// Create it with New, run it with Run on its own goroutine, and stop it with
// Stop or Close.
type Loop[H any] struct {
	opts     options
	log      zerolog.Logger
	dispatch func(h H, events uint32)
	poller   *poll.Poller
	rc       syscall.RawConn // nil: wait in epoll_wait itself (the netpoller refused the descriptor)
	wake     *poll.EventFD   // registered edge-triggered: never read
	done     chan struct{}
	state    atomic.Int32
	gen      atomic.Uint32
	inline   atomic.Int32 // >0 while the loop runs a callback marked with InlineBegin
	queued   atomic.Int32 // tasks posted that have not begun (Alone)

	// pending is true while a wakeup is on its way or the loop is awake
	// and will look at its task queue before it parks: posts then need no
	// eventfd write. The loop clears it, under mu, only on its way to park.
	pending atomic.Bool
	wakes   atomic.Uint64 // eventfd writes, for tests

	mu    sync.Mutex
	tasks []func()
	spare []func() // the other task buffer, swapped with tasks by runTasks
	stop  bool     // Stop was called: exit once the queue is empty
	dead  bool     // exited or exiting: posts are refused

	// owned by the loop goroutine
	looks    uint64 // waits so far (Looks)
	attached int    // descriptors with a handler (Alone)
	// regs holds each attached descriptor's handler, indexed by the
	// descriptor (gen 0: none; Add never hands out 0). Descriptors are
	// small and dense, so a slice grown to the highest one attached costs
	// about what a map's slots would, and a report finds its handler with
	// one bounds check and no hashing (a map lookup per report was 0.7%
	// of the CPU of a connection set-up at 1000 in flight, its buckets
	// cold: BENCHMARKS.md, finding 32).
	regs    []entry[H]
	events  []poll.Event
	errs    int                                   // consecutive wait errors
	backoff [2]time.Duration                      // first and longest pause after a failed wait
	wait    func([]poll.Event, bool) (int, error) // l.poll, or a test's
	look    look
}

// New opens a loop's epoll set and waker; dispatch receives the readiness
// bits reported for a registered descriptor, with its handler. The loop
// does nothing until Run.
func New[H any](dispatch func(h H, events uint32), opts ...Option) (*Loop[H], error) {
	o := options{name: "loop", log: zerolog.Nop(), maxEvents: 128, taskBudget: 1024}
	for _, opt := range opts {
		opt(&o)
	}
	p, err := poll.Open(o.maxEvents)
	if err != nil {
		return nil, err
	}
	w, err := poll.NewEventFD()
	if err != nil {
		_ = p.Close()
		return nil, err
	}
	// Edge-triggered: every write is a new report, so the loop never reads
	// the counter (EventFD.Add drains it in the unlikely case it fills).
	if err := p.Add(w.Fd(), poll.In|poll.Edge, wakerData); err != nil {
		_ = p.Close()
		_ = w.Close()
		return nil, err
	}
	rc, ok, err := p.Netpoll()
	if err != nil {
		_ = p.Close()
		_ = w.Close()
		return nil, err
	}
	l := &Loop[H]{
		opts: o, log: o.log.With().Str("loop", o.name).Logger(), dispatch: dispatch,
		poller: p, wake: w, done: make(chan struct{}),
		events: make([]poll.Event, o.maxEvents),
	}
	if ok {
		l.rc = rc
	}
	l.look.fn = func(uintptr) bool {
		l.look.n, l.look.err = l.poller.Wait(l.look.out, 0)
		return l.look.n > 0 || l.look.err != nil
	}
	l.wait = l.poll
	l.backoff = [2]time.Duration{time.Millisecond, 100 * time.Millisecond}
	l.pending.Store(true) // awake until it first parks
	return l, nil
}

// Done is closed once the loop has exited and released its descriptors.
func (l *Loop[H]) Done() <-chan struct{} { return l.done }

// Post queues fn to run on the loop goroutine, after the tasks queued
// before it. It reports false, and fn does not run, once the loop has
// stopped; a task it accepts always runs.
func (l *Loop[H]) Post(fn func()) bool {
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return false
	}
	l.tasks = append(l.tasks, fn)
	l.queued.Add(1)
	l.wakeLocked()
	l.mu.Unlock()
	return true
}

// wakeLocked makes sure the loop looks at its queue: it writes the eventfd
// unless a wakeup is pending or the loop is awake. Under mu, so that the
// write never reaches a descriptor the exiting loop has closed.
func (l *Loop[H]) wakeLocked() {
	if l.pending.Load() || l.pending.Swap(true) {
		return
	}
	l.wakes.Add(1)
	if err := l.wake.Add(1); err != nil {
		l.log.Error().Err(err).Msg("wake")
	}
}

// Call runs fn on the loop goroutine and waits for it to return; it
// reports false, and fn does not run, once the loop has stopped. It must
// not be called from the loop goroutine, except from a callback marked with
// InlineBegin: Call then queues fn, to run after that callback, and returns
// at once (so does a Call from any goroutine while such a callback runs:
// callers that need fn done by the time Call returns must not depend on it
// while the loop runs inline callbacks).
func (l *Loop[H]) Call(fn func()) bool {
	if l.inline.Load() > 0 {
		return l.Post(fn)
	}
	done := make(chan struct{})
	if !l.Post(func() { fn(); close(done) }) {
		return false
	}
	select {
	case <-done:
	case <-l.done:
	}
	return true
}

// InlineBegin marks the start of a callback that may call Call on the loop
// goroutine (a user's handler run inline); InlineEnd marks its end.
func (l *Loop[H]) InlineBegin() { l.inline.Add(1) }

// InlineEnd ends what InlineBegin began.
func (l *Loop[H]) InlineEnd() { l.inline.Add(-1) }

// Add puts fd in the epoll set for events and returns the generation that
// its reports carry. It may be called from any goroutine; the reports are
// dropped until the loop goroutine attaches a handler (Attach), and being
// level-triggered they come again at once: the loop would spin on them.
// From another goroutine, add with events 0 and Modify once attached.
func (l *Loop[H]) Add(fd int, events uint32) (uint32, error) {
	gen := l.gen.Add(1)
	if gen == 0 {
		gen = l.gen.Add(1)
	}
	if err := l.poller.Add(fd, events, pack(fd, gen)); err != nil {
		return 0, err
	}
	return gen, nil
}

// Attach starts handing fd's reports of generation gen to h. Loop only.
func (l *Loop[H]) Attach(fd int, gen uint32, h H) {
	if fd < 0 {
		return
	}
	if fd >= len(l.regs) {
		// append's growth: doubling while small, a quarter more once
		// large, so that a table of many descriptors holds little spare.
		l.regs = slices.Grow(l.regs, max(fd+1, 16)-len(l.regs))
		l.regs = l.regs[:cap(l.regs)]
	}
	if l.regs[fd].gen == 0 {
		l.attached++
	}
	l.regs[fd] = entry[H]{gen: gen, h: h}
}

// drop forgets fd's handler. Loop only.
func (l *Loop[H]) drop(fd int) {
	if fd >= 0 && fd < len(l.regs) && l.regs[fd].gen != 0 {
		l.regs[fd] = entry[H]{}
		l.attached--
	}
}

// Register adds fd for events with handler h (Add and Attach). Loop only.
func (l *Loop[H]) Register(fd int, events uint32, h H) (uint32, error) {
	gen, err := l.Add(fd, events)
	if err != nil {
		return 0, err
	}
	l.Attach(fd, gen, h)
	return gen, nil
}

// Modify changes the events fd (of generation gen) is polled for. It may be
// called from any goroutine.
func (l *Loop[H]) Modify(fd int, gen uint32, events uint32) error {
	return l.poller.Modify(fd, events, pack(fd, gen))
}

// Unregister takes fd out of the epoll set, before it is closed, and
// forgets its handler; the error wraps ENOENT if fd was not in the set.
// Loop only.
func (l *Loop[H]) Unregister(fd int) error {
	l.drop(fd)
	return l.poller.Delete(fd)
}

// Forget drops fd's handler without taking fd out of the epoll set, for a
// descriptor about to be closed whose open file no other descriptor
// refers to (never duplicated, never passed on): the kernel takes an item
// out of an epoll set when the last descriptor of its open file is
// closed, so the close does what Unregister's EPOLL_CTL_DEL would, one
// system call fewer. A descriptor that has, or had, a duplicate must be
// Unregistered instead: a duplicate still open at the close keeps the
// item in the set, reporting for a descriptor the loop no longer knows
// (its reports are dropped as stale, but a level-triggered one comes
// back on every look). Loop only.
func (l *Loop[H]) Forget(fd int) {
	l.drop(fd)
}

// Range calls f for every attached descriptor. Loop only; f must not
// register or unregister.
func (l *Loop[H]) Range(f func(fd int, gen uint32, h H)) {
	for fd := range l.regs {
		if e := &l.regs[fd]; e.gen != 0 {
			f(fd, e.gen, e.h)
		}
	}
}

// Alone reports whether the loop has nothing to do but serve one
// descriptor: exactly one has a handler attached, and no posted task waits
// (a task counts from its Post until it begins). A handler that finds a
// full batch to read may then read the next at once instead of waiting for
// another readiness report: there is no one to share the loop with (an
// epoll_wait per batch was a twentieth of an inline dispatch:
// BENCHMARKS.md, finding 31). Loop only.
func (l *Loop[H]) Alone() bool { return l.attached == 1 && l.queued.Load() == 0 }

// Looks counts the loop's looks at its epoll set so far (a park counts
// one). A handler that sees it one above its last report's knows that it
// was reported again by the very next look: its descriptor stayed ready
// through a round of the loop, with no empty look nor park in between.
// Loop only.
func (l *Loop[H]) Looks() uint64 { return l.looks }

// Stop makes the loop exit once its queued tasks (and those they queue)
// have run. It does not wait; it may be called from the loop goroutine.
func (l *Loop[H]) Stop() {
	l.mu.Lock()
	if !l.dead {
		l.stop = true
		l.wakeLocked()
	}
	l.mu.Unlock()
}

// Close stops the loop and waits until it has exited; a loop that never ran
// releases its descriptors at once. It is idempotent, and must not be
// called from the loop goroutine (use Stop there).
func (l *Loop[H]) Close() {
	if l.state.CompareAndSwap(stateNew, stateExited) {
		l.mu.Lock()
		l.dead = true
		l.tasks, l.spare = nil, nil
		l.mu.Unlock()
		l.release()
		return
	}
	l.Stop()
	<-l.done
}

// release closes the descriptors and marks the loop done.
func (l *Loop[H]) release() {
	l.regs = nil
	_ = l.poller.Close()
	_ = l.wake.Close()
	close(l.done)
}

func pack(fd int, gen uint32) uint64 { return uint64(uint32(fd)) | uint64(gen)<<32 }

// Run is the loop goroutine: it returns after Stop (or Close), once every
// queued task has run, having called the OnExit function and closed the
// loop's descriptors. Run on a loop that runs or has run returns at once.
func (l *Loop[H]) Run() {
	if !l.state.CompareAndSwap(stateNew, stateRunning) {
		return
	}
	defer l.exit()
	for {
		l.looks++
		n, err := l.wait(l.events, false)
		if err == nil && n == 0 {
			// The loop has caught up: yield once (the goroutine that posts
			// the next piece of work, a reply or an ack, often runs in
			// that window, which saves a wakeup), then park unless
			// something came meanwhile.
			runtime.Gosched()
			n, err = l.park()
		}
		if err != nil {
			l.failed(err)
		} else if l.errs > 0 {
			l.log.Info().Int("errors", l.errs).Msg("epoll wait works again")
			l.errs = 0
		}
		l.handle(l.events[:n])
		if l.runTasks() {
			return
		}
	}
}

// park waits in the netpoller until the epoll set has something to report
// or a task is posted, and returns what the last look found. Posts write
// the eventfd from now until the loop is awake again.
func (l *Loop[H]) park() (int, error) {
	l.mu.Lock()
	if len(l.tasks) > 0 || l.stop {
		l.mu.Unlock()
		l.looks++
		return l.wait(l.events, false)
	}
	l.pending.Store(false)
	l.mu.Unlock()
	l.looks++
	n, err := l.wait(l.events, true)
	l.pending.Store(true)
	return n, err
}

// poll is the loop's wait: with block unset, epoll_wait with a zero
// timeout; with block set, the same in a RawConn.Read callback, so that the
// goroutine parks in the netpoller until the epoll descriptor is readable.
// The runtime resets the descriptor's readiness before the first callback,
// so a report that comes after that callback's look wakes the park: no lost
// wakeup. Without the netpoller (rc nil) it blocks in epoll_wait.
func (l *Loop[H]) poll(out []poll.Event, block bool) (int, error) {
	if !block {
		return l.poller.Wait(out, 0)
	}
	if l.rc == nil {
		return l.poller.Wait(out, -1)
	}
	l.look.out = out
	err := l.rc.Read(l.look.fn)
	n, werr := l.look.n, l.look.err
	l.look.out, l.look.err = nil, nil
	if err == nil {
		err = werr
	}
	return n, err
}

// look is the RawConn.Read callback of a parked loop, made once (a
// closure made per park would allocate).
type look struct {
	fn  func(uintptr) bool
	out []poll.Event
	n   int
	err error
}

// failed handles a failed wait: a warning for the first failure and then
// for every 64th in a row, and a pause that doubles from 1 ms to 100 ms, so
// that a broken epoll set neither spins nor floods the log. Tasks still
// run between the pauses, so Stop still works.
func (l *Loop[H]) failed(err error) {
	l.errs++
	if l.errs == 1 || l.errs%64 == 0 {
		l.log.Warn().Err(err).Int("errors", l.errs).Msg("epoll wait failing; backing off")
	}
	d := l.backoff[0] << min(l.errs-1, 16)
	time.Sleep(min(d, l.backoff[1]))
}

// handle dispatches reports to their handlers, dropping the waker's (the
// tasks run next anyway) and stale ones.
func (l *Loop[H]) handle(evs []poll.Event) {
	for k := range evs {
		ev := &evs[k]
		if ev.Data == wakerData {
			continue
		}
		fd, gen := int(int32(uint32(ev.Data))), uint32(ev.Data>>32)
		if fd < 0 || fd >= len(l.regs) || l.regs[fd].gen != gen {
			// Stale: the descriptor went after epoll reported it, or its
			// Attach task has not run yet (a level-triggered report comes
			// again).
			continue
		}
		l.dispatch(l.regs[fd].h, ev.Events)
	}
}

// runTasks runs the queued tasks, and those they queue, up to the task
// budget (checked between batches). The two task slices are swapped rather
// than reallocated; what the budget leaves waits for the next round (park
// does not park while tasks are queued). It reports whether the loop must
// exit: Stop was called and the queue is empty (the loop is then marked
// dead, under the same lock).
func (l *Loop[H]) runTasks() (exit bool) {
	ran := 0
	l.mu.Lock()
	for {
		tasks := l.tasks
		if len(tasks) == 0 {
			exit = l.stop
			if exit {
				l.dead = true
			}
			l.mu.Unlock()
			return exit
		}
		if ran >= l.opts.taskBudget {
			l.mu.Unlock()
			return false
		}
		l.tasks, l.spare = l.spare[:0], nil
		l.mu.Unlock()
		for k, fn := range tasks {
			l.queued.Add(-1)
			fn()
			tasks[k] = nil
		}
		ran += len(tasks)
		l.mu.Lock()
		l.spare = tasks[:0]
	}
}

// exit releases what the loop owned, after the owner's OnExit function.
func (l *Loop[H]) exit() {
	l.mu.Lock()
	l.dead = true // also when a callback panicked
	l.mu.Unlock()
	if l.opts.onExit != nil {
		l.opts.onExit()
	}
	l.state.Store(stateExited)
	l.release()
}

// IsNotRegistered reports whether err is Unregister's error for a
// descriptor that was not in the epoll set.
func IsNotRegistered(err error) bool { return errors.Is(err, unix.ENOENT) }
