package evloop

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/poll"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// handler records the reports of one descriptor.
type handler struct {
	name string
	n    atomic.Int64
	on   func(events uint32) // loop goroutine
}

func dispatch(h *handler, events uint32) {
	h.n.Add(1)
	if h.on != nil {
		h.on(events)
	}
}

func newLoop(t testing.TB, opts ...Option) *Loop[*handler] {
	t.Helper()
	l, err := New(dispatch, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l
}

func startLoop(t testing.TB, opts ...Option) *Loop[*handler] {
	t.Helper()
	l := newLoop(t, opts...)
	go l.Run()
	return l
}

// waitFor polls cond until it holds, failing the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func mustCall(t testing.TB, l *Loop[*handler], fn func()) {
	t.Helper()
	if !l.Call(fn) {
		t.Fatal("Call refused on a running loop")
	}
}

func eventFD(t testing.TB) *poll.EventFD {
	t.Helper()
	e, err := poll.NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func fdCount(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestTasksRunInOrder: tasks run in the order they were posted, for one
// poster and per poster among many, and those a task posts run after it.
func TestTasksRunInOrder(t *testing.T) {
	l := startLoop(t)
	const posters, each = 4, 5000
	seen := make([][]int, posters) // loop-owned
	var wg sync.WaitGroup
	for p := range posters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range each {
				if !l.Post(func() { seen[p] = append(seen[p], k) }) {
					t.Error("Post refused")
					return
				}
			}
		}()
	}
	wg.Wait()
	var nested []string
	mustCall(t, l, func() {
		l.Post(func() { nested = append(nested, "posted by a task") })
		nested = append(nested, "task")
	})
	mustCall(t, l, func() {})
	for p, s := range seen {
		if len(s) != each {
			t.Fatalf("poster %d: %d tasks ran, want %d", p, len(s), each)
		}
		for k, v := range s {
			if v != k {
				t.Fatalf("poster %d: task %d ran in position %d", p, v, k)
			}
		}
	}
	if strings.Join(nested, ",") != "task,posted by a task" {
		t.Fatalf("nested order %q", nested)
	}
}

// TestWakeupsCoalesce: while the loop is awake (here, inside a task) posts
// cost no eventfd write; once it has parked, the first post writes once.
func TestWakeupsCoalesce(t *testing.T) {
	l := startLoop(t)
	entered, release := make(chan struct{}), make(chan struct{})
	l.Post(func() { close(entered); <-release })
	<-entered
	before := l.wakes.Load()
	var ran atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				l.Post(func() { ran.Add(1) })
			}
		}()
	}
	wg.Wait()
	if got := l.wakes.Load() - before; got != 0 {
		t.Fatalf("8000 posts to an awake loop wrote the eventfd %d times, want 0", got)
	}
	close(release)
	waitFor(t, 10*time.Second, "posted tasks did not run", func() bool { return ran.Load() == 8000 })
	// Parked (pending cleared) once it has caught up.
	waitFor(t, 10*time.Second, "the loop did not park", func() bool { return !l.pending.Load() })
	before = l.wakes.Load()
	mustCall(t, l, func() {})
	if got := l.wakes.Load() - before; got != 1 {
		t.Fatalf("a Call to a parked loop wrote the eventfd %d times, want 1", got)
	}
}

// TestStaleGenerationDropped: a report carrying an old generation for a
// descriptor number reaches no handler, neither the one that had it nor
// the one that has the number now.
func TestStaleGenerationDropped(t *testing.T) {
	t.Run("forged reports", func(t *testing.T) {
		l := newLoop(t) // driven by hand: never run
		e := eventFD(t)
		old, cur := &handler{name: "old"}, &handler{name: "new"}
		g1, err := l.Register(e.Fd(), poll.In, old)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Unregister(e.Fd()); err != nil {
			t.Fatal(err)
		}
		g2, err := l.Register(e.Fd(), poll.In, cur)
		if err != nil {
			t.Fatal(err)
		}
		if g1 == g2 {
			t.Fatalf("a new registration reused generation %d", g1)
		}
		l.handle([]poll.Event{{Data: pack(e.Fd(), g1), Events: poll.In}})
		if old.n.Load() != 0 || cur.n.Load() != 0 {
			t.Fatalf("stale report dispatched: old %d, new %d", old.n.Load(), cur.n.Load())
		}
		l.handle([]poll.Event{{Data: pack(e.Fd(), g2), Events: poll.In}, {Data: wakerData, Events: poll.In}})
		if cur.n.Load() != 1 || old.n.Load() != 0 {
			t.Fatalf("current report: old %d, new %d; want 0, 1", old.n.Load(), cur.n.Load())
		}
		if err := l.Unregister(e.Fd()); err != nil {
			t.Fatal(err)
		}
		if err := l.Unregister(e.Fd()); !IsNotRegistered(err) || !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("second Unregister = %v, want ENOENT", err)
		}
	})
	t.Run("descriptor replaced within a batch", func(t *testing.T) {
		// Two readable descriptors reported in one batch; whichever
		// handler runs first closes the other and puts a fresh, idle
		// eventfd at its number: the other's report in the batch is stale
		// and must not reach the newcomer's handler.
		l := startLoop(t)
		for round := range 50 {
			a, b := eventFD(t), eventFD(t)
			newcomer := &handler{name: "newcomer"}
			var swapped atomic.Bool
			var fresh *poll.EventFD
			swap := func(victim *poll.EventFD) {
				if swapped.Swap(true) {
					return
				}
				num := victim.Fd()
				_ = l.Unregister(num)
				f := eventFD(t)
				if err := unix.Dup3(f.Fd(), num, unix.O_CLOEXEC); err != nil {
					t.Error(err)
					return
				}
				_ = f.Close()
				fresh = f
				if _, err := l.Register(num, poll.In, newcomer); err != nil {
					t.Error(err)
				}
			}
			ha := &handler{name: "a", on: func(uint32) { _, _ = a.Read(); swap(b) }}
			hb := &handler{name: "b", on: func(uint32) { _, _ = b.Read(); swap(a) }}
			mustCall(t, l, func() {
				_ = a.Add(1)
				_ = b.Add(1)
				if _, err := l.Register(a.Fd(), poll.In, ha); err != nil {
					t.Error(err)
				}
				if _, err := l.Register(b.Fd(), poll.In, hb); err != nil {
					t.Error(err)
				}
			})
			waitFor(t, 5*time.Second, "no handler ran", swapped.Load)
			mustCall(t, l, func() {}) // a round after the batch
			mustCall(t, l, func() {
				// The replaced number (a dup of an idle eventfd) is never
				// readable: any report for it is stale.
				if n := newcomer.n.Load(); n != 0 {
					t.Errorf("round %d: the newcomer got %d reports meant for its predecessor", round, n)
				}
				_ = fresh
				for _, e := range []*poll.EventFD{a, b} {
					_ = l.Unregister(e.Fd())
				}
			})
		}
	})
}

// TestNoLostWakeup: posts and calls from many goroutines, each waiting for
// the loop in turn so that the loop parks between them most of the time,
// all complete in bounded time.
func TestNoLostWakeup(t *testing.T) {
	l := startLoop(t)
	const goroutines = 8
	rounds := 5000
	if testing.Short() {
		rounds = 500
	}
	var ran atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ack := make(chan struct{}, 1)
			for k := range rounds {
				switch (g + k) % 3 {
				case 0: // post and wait for the task itself
					l.Post(func() { ran.Add(1); ack <- struct{}{} })
					select {
					case <-ack:
					case <-time.After(10 * time.Second):
						errc <- errors.New("a posted task did not run within 10s (lost wakeup)")
						return
					}
				case 1:
					if !l.Call(func() { ran.Add(1) }) {
						errc <- errors.New("Call refused")
						return
					}
				default: // fire and forget, sometimes after a pause that lets the loop park
					l.Post(func() { ran.Add(1) })
					if k%16 == 0 {
						time.Sleep(20 * time.Microsecond)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "fire-and-forget posts did not all run", func() bool {
		return ran.Load() == int64(goroutines*rounds)
	})
}

// TestDescriptorLeftReady: a handler that takes part of what is ready (a
// budget-limited read) is called again without a new edge, until the
// descriptor is drained.
func TestDescriptorLeftReady(t *testing.T) {
	l := startLoop(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	const size = 300
	var got atomic.Int64
	h := &handler{on: func(uint32) {
		var b [1]byte
		if n, _ := unix.Read(fds[0], b[:]); n == 1 {
			got.Add(1)
		}
	}}
	mustCall(t, l, func() {
		if _, err := l.Register(fds[0], poll.In, h); err != nil {
			t.Error(err)
		}
	})
	if n, err := unix.Write(fds[1], make([]byte, size)); err != nil || n != size {
		t.Fatalf("write %d, %v", n, err)
	}
	waitFor(t, 10*time.Second, "bytes left unread after one write", func() bool { return got.Load() == size })
	mustCall(t, l, func() { _ = l.Unregister(fds[0]) })
}

// TestModifyAndRange: Modify to no events stops reports and back to In
// resumes them; Range lists the attached descriptors.
func TestModifyAndRange(t *testing.T) {
	l := startLoop(t)
	e := eventFD(t)
	h := &handler{}
	var gen uint32
	mustCall(t, l, func() {
		var err error
		if gen, err = l.Register(e.Fd(), poll.In, h); err != nil {
			t.Error(err)
		}
		if err := l.Modify(e.Fd(), gen, 0); err != nil {
			t.Error(err)
		}
	})
	_ = e.Add(1) // readable, and stays so: nothing reads it
	mustCall(t, l, func() {})
	mustCall(t, l, func() {})
	if n := h.n.Load(); n != 0 {
		t.Fatalf("%d reports while polled for no events", n)
	}
	if err := l.Modify(e.Fd(), gen, poll.In); err != nil { // from another goroutine
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "no report after Modify back to In", func() bool { return h.n.Load() > 0 })
	mustCall(t, l, func() {
		var fds []int
		l.Range(func(fd int, g uint32, hh *handler) {
			if g != gen || hh != h {
				t.Errorf("Range gave gen %d handler %p, want %d %p", g, hh, gen, h)
			}
			fds = append(fds, fd)
		})
		if len(fds) != 1 || fds[0] != e.Fd() {
			t.Errorf("Range listed %v, want [%d]", fds, e.Fd())
		}
		_ = l.Unregister(e.Fd())
	})
}

// TestAddFromAnotherGoroutine: a descriptor added off the loop is reported
// only once its handler is attached, and its earlier reports are dropped
// without keeping the loop busy.
func TestAddFromAnotherGoroutine(t *testing.T) {
	l := startLoop(t)
	e := eventFD(t)
	_ = e.Add(1)
	gen, err := l.Add(e.Fd(), poll.In)
	if err != nil {
		t.Fatal(err)
	}
	h := &handler{on: func(uint32) { _, _ = e.Read() }}
	mustCall(t, l, func() {})
	if h.n.Load() != 0 {
		t.Fatal("reported before Attach")
	}
	l.Post(func() { l.Attach(e.Fd(), gen, h) })
	waitFor(t, 5*time.Second, "no report after Attach", func() bool { return h.n.Load() == 1 })
	mustCall(t, l, func() { _ = l.Unregister(e.Fd()) })
}

// TestCallInline: a Call from a callback marked inline does not wait (it
// would deadlock): the function runs after the callback. A Call from
// another goroutine waits for its function.
func TestCallInline(t *testing.T) {
	l := startLoop(t)
	var order []string
	done := make(chan bool, 1)
	l.Post(func() {
		l.InlineBegin()
		ok := l.Call(func() { order = append(order, "called") })
		order = append(order, "handler returns")
		l.InlineEnd()
		done <- ok
	})
	select {
	case ok := <-done:
		if !ok {
			t.Fatal("inline Call refused")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a Call from an inline callback deadlocked")
	}
	var ran bool
	mustCall(t, l, func() { ran = true })
	if !ran {
		t.Fatal("Call returned before its function ran")
	}
	if got := strings.Join(order, ","); got != "handler returns,called" {
		t.Fatalf("order %q", got)
	}
}

// TestCloseIdempotentAndWaits: Close waits for the running task, runs the
// queued ones, calls OnExit before the descriptors close, and releases
// them; a second (or concurrent) Close returns; later posts are refused.
func TestCloseIdempotentAndWaits(t *testing.T) {
	base := fdCount(t)
	var exitSawTasks atomic.Int64
	var ran atomic.Int64
	var l *Loop[*handler]
	var err error
	l, err = New(dispatch, WithOnExit(func() {
		exitSawTasks.Store(ran.Load())
		if _, err := unix.FcntlInt(uintptr(l.poller.Fd()), unix.F_GETFD, 0); err != nil {
			t.Errorf("epoll descriptor closed before OnExit: %v", err)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if n := fdCount(t); n != base+2 {
		t.Fatalf("a loop holds %d descriptors, want 2", n-base)
	}
	go l.Run()
	entered, release := make(chan struct{}), make(chan struct{})
	l.Post(func() { close(entered); <-release })
	<-entered
	for range 100 {
		l.Post(func() { ran.Add(1) })
	}
	closed := make(chan struct{})
	for range 3 {
		go func() { l.Close(); closed <- struct{}{} }()
	}
	select {
	case <-closed:
		t.Fatal("Close returned while a task was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	for range 3 {
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return after the task did")
		}
	}
	l.Close()
	if ran.Load() != 100 || exitSawTasks.Load() != 100 {
		t.Fatalf("%d of 100 queued tasks ran, %d before OnExit", ran.Load(), exitSawTasks.Load())
	}
	if l.Post(func() {}) || l.Call(func() {}) {
		t.Fatal("a closed loop accepted work")
	}
	if n := fdCount(t); n != base {
		t.Fatalf("%d descriptors left after Close", n-base)
	}
	l.Run() // returns at once
}

// TestCloseNeverRun: a loop that never ran releases its descriptors on
// Close, and Run afterwards returns at once.
func TestCloseNeverRun(t *testing.T) {
	base := fdCount(t)
	l, err := New(dispatch)
	if err != nil {
		t.Fatal(err)
	}
	l.Post(func() { t.Error("a task of a loop that never ran") })
	l.Close()
	l.Close()
	l.Run()
	if n := fdCount(t); n != base {
		t.Fatalf("%d descriptors left after Close", n-base)
	}
	select {
	case <-l.Done():
	default:
		t.Fatal("Done open after Close")
	}
}

// TestStopFromTheLoop: Stop from a task lets the queued tasks run, and
// the loop exits.
func TestStopFromTheLoop(t *testing.T) {
	l := newLoop(t)
	var ran []int
	l.Post(func() {
		l.Stop()
		l.Post(func() { ran = append(ran, 2) })
	})
	l.Post(func() { ran = append(ran, 1) })
	exited := make(chan struct{})
	go func() { l.Run(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not exit after Stop")
	}
	if len(ran) != 2 || ran[0] != 1 || ran[1] != 2 {
		t.Fatalf("tasks after Stop ran %v, want [1 2]", ran)
	}
}

// syncBuffer is a log sink read by the test while the loop writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBackoffOnWaitErrors: a persistently failing epoll_wait neither spins
// nor logs a line per failure, tasks still run meanwhile, and the loop says
// once when waits work again.
func TestBackoffOnWaitErrors(t *testing.T) {
	var logs syncBuffer
	l := newLoop(t, WithLogger(zerolog.New(&logs)))
	var failures atomic.Int64
	var healed atomic.Bool
	l.wait = func(out []poll.Event, block bool) (int, error) {
		if !healed.Load() {
			failures.Add(1)
			return 0, os.NewSyscallError("epoll_wait", unix.EBADF)
		}
		return l.poll(out, block)
	}
	l.backoff = [2]time.Duration{50 * time.Microsecond, time.Millisecond}
	start := time.Now()
	go l.Run()
	mustCall(t, l, func() {}) // tasks run between the failures
	waitFor(t, 20*time.Second, "too few failures", func() bool { return failures.Load() >= 200 })
	took := time.Since(start)
	healed.Store(true)
	// The next wakeup finds the wait working.
	waitFor(t, 10*time.Second, "no recovery line", func() bool {
		mustCall(t, l, func() {})
		return strings.Contains(logs.String(), "works again")
	})
	n := failures.Load()
	// 1 + 2 + 4 + ... + 16 times 50µs, then 1ms per failure: a spin
	// would take microseconds.
	if took < 150*time.Millisecond {
		t.Fatalf("200 failed waits took %v: no backoff", took)
	}
	out := logs.String()
	if w := strings.Count(out, "backing off"); w != int(1+n/64) {
		t.Fatalf("%d warnings for %d failures, want %d:\n%s", w, n, 1+n/64, out)
	}
	if n := strings.Count(out, "works again"); n != 1 {
		t.Fatalf("%d recovery lines, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, `"loop":"loop"`) || !strings.Contains(out, "bad file descriptor") {
		t.Fatalf("log lacks the loop's name or the error:\n%s", out)
	}
}

// TestBlockingFallback: without the netpoller (a descriptor the runtime
// refused) the loop blocks in epoll_wait and still works.
func TestBlockingFallback(t *testing.T) {
	l := newLoop(t)
	l.rc = nil
	go l.Run()
	e := eventFD(t)
	// Count what the handler reads, not its calls: a call counted before
	// its read can read the next Add too (it did: "no report" at the next
	// Add, which the earlier call had drained).
	var read atomic.Int64
	h := &handler{on: func(uint32) {
		v, _ := e.Read()
		read.Add(int64(v))
	}}
	mustCall(t, l, func() {
		if _, err := l.Register(e.Fd(), poll.In, h); err != nil {
			t.Error(err)
		}
	})
	for k := int64(1); k <= 100; k++ {
		_ = e.Add(1)
		waitFor(t, 5*time.Second, "no report", func() bool { return read.Load() >= k })
		runtime.Gosched()
	}
	mustCall(t, l, func() { _ = l.Unregister(e.Fd()) })
}

// TestParkWakeDoesNotAllocate: a post to a parked loop, its wakeup in the
// netpoller and the task's run allocate nothing.
func TestParkWakeDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	l := startLoop(t)
	ack := make(chan struct{}, 1)
	task := func() { ack <- struct{}{} }
	for range 100 { // grow the task buffers
		l.Post(task)
		<-ack
	}
	if a := testing.AllocsPerRun(1000, func() {
		l.Post(task)
		<-ack
	}); a != 0 {
		t.Fatalf("%.2f allocations per post and wakeup", a)
	}
}

// TestTaskBudget: tasks that keep queueing more do not starve the
// descriptors: readiness is dispatched between bounded batches of tasks.
func TestTaskBudget(t *testing.T) {
	l := startLoop(t, WithTaskBudget(16))
	e := eventFD(t)
	h := &handler{on: func(uint32) { _, _ = e.Read() }}
	mustCall(t, l, func() {
		if _, err := l.Register(e.Fd(), poll.In, h); err != nil {
			t.Error(err)
		}
	})
	var stop atomic.Bool
	t.Cleanup(func() { stop.Store(true) }) // before the loop's Close
	var spins atomic.Int64
	var spin func()
	spin = func() { // re-queues itself for ever
		spins.Add(1)
		if !stop.Load() {
			l.Post(spin)
		}
	}
	l.Post(spin)
	waitFor(t, 5*time.Second, "the spinning task did not start", func() bool { return spins.Load() > 100 })
	_ = e.Add(1)
	waitFor(t, 5*time.Second, "a readable descriptor starved by re-queued tasks", func() bool { return h.n.Load() > 0 })
	stop.Store(true)
	mustCall(t, l, func() { _ = l.Unregister(e.Fd()) })
}

// TestFullBatchLooksAgain: a wait that fills the event buffer is followed
// by another look without parking (the netpoller would not report what is
// left in the set), and every report is dispatched.
func TestFullBatchLooksAgain(t *testing.T) {
	l := newLoop(t, WithMaxEvents(1))
	type call struct {
		block bool
		n     int
	}
	var calls []call // loop goroutine; read after Close
	l.wait = func(out []poll.Event, block bool) (int, error) {
		n, err := l.poll(out, block)
		calls = append(calls, call{block, n})
		return n, err
	}
	go l.Run()
	const fds = 4
	var es [fds]*poll.EventFD
	var hs [fds]*handler
	for k := range es {
		e := eventFD(t)
		es[k] = e
		hs[k] = &handler{on: func(uint32) { _, _ = e.Read() }}
	}
	mustCall(t, l, func() {
		for k, e := range es {
			if _, err := l.Register(e.Fd(), poll.In, hs[k]); err != nil {
				t.Error(err)
			}
		}
	})
	for round := range 20 {
		mustCall(t, l, func() { // all ready before the loop's next look
			for _, e := range es {
				_ = e.Add(1)
			}
		})
		waitFor(t, 10*time.Second, "a report was not dispatched", func() bool {
			for _, h := range hs {
				if h.n.Load() < int64(round+1) {
					return false
				}
			}
			return true
		})
	}
	mustCall(t, l, func() {
		for _, e := range es {
			_ = l.Unregister(e.Fd())
		}
	})
	l.Close()
	full := 0
	for k := 0; k+1 < len(calls); k++ {
		if calls[k].n == 1 {
			full++
			if calls[k+1].block {
				t.Fatalf("call %d filled the buffer and call %d parked: %v", k, k+1, calls[max(0, k-4):k+2])
			}
		}
	}
	if full < 20*fds {
		t.Fatalf("%d full batches for %d reports", full, 20*fds)
	}
}

// inEpollSet reports whether the epoll set epfd holds an item for
// descriptor number fd (/proc/self/fdinfo).
func inEpollSet(t testing.TB, epfd, fd int) bool {
	t.Helper()
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", epfd))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(info), "\n") {
		var tfd int
		if n, _ := fmt.Sscanf(line, "tfd: %d", &tfd); n == 1 && tfd == fd {
			return true
		}
	}
	return false
}

// TestForget: Forget drops a descriptor's handler without EPOLL_CTL_DEL,
// and closing a descriptor never duplicated takes it out of the set (the
// kernel drops the item with the open file's last descriptor). A
// duplicate open at the close keeps the item in the set, which is why a
// duplicated descriptor is Unregistered instead (the software fabric's
// direct receive duplicates its sockets).
func TestForget(t *testing.T) {
	l := startLoop(t)
	epfd := l.poller.Fd()
	pair := func() (int, int) {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return fds[0], fds[1]
	}
	register := func(fd int, h *handler) {
		mustCall(t, l, func() {
			if _, err := l.Register(fd, poll.In, h); err != nil {
				t.Error(err)
			}
		})
		if !inEpollSet(t, epfd, fd) {
			t.Fatalf("fd %d registered but not in the set", fd)
		}
	}

	// Never duplicated: forgotten, closed, gone from the set; the peer's
	// bytes reach no handler.
	a, b := pair()
	defer unix.Close(b)
	ha := &handler{}
	register(a, ha)
	mustCall(t, l, func() {
		l.Forget(a)
		_ = unix.Close(a)
	})
	if inEpollSet(t, epfd, a) {
		t.Fatal("a forgotten descriptor, closed, is still in the set")
	}
	if _, err := unix.Write(b, []byte{1}); err == nil {
		t.Fatal("write to a closed peer succeeded")
	}

	// Duplicated: forgetting and closing leaves the item in the set
	// until the duplicate is closed too.
	c, d := pair()
	defer unix.Close(d)
	hc := &handler{}
	register(c, hc)
	dup, err := unix.Dup(c)
	if err != nil {
		t.Fatal(err)
	}
	mustCall(t, l, func() {
		l.Forget(c)
		_ = unix.Close(c)
	})
	if !inEpollSet(t, epfd, c) {
		t.Fatal("the item of a closed descriptor with an open duplicate left the set")
	}
	// Its reports reach no handler: they are stale.
	if _, err := unix.Write(d, []byte{1}); err != nil {
		t.Fatal(err)
	}
	mustCall(t, l, func() {})
	mustCall(t, l, func() {})
	if n := hc.n.Load(); n != 0 {
		t.Fatalf("a forgotten descriptor's handler ran %d times", n)
	}
	_ = unix.Close(dup)
	if inEpollSet(t, epfd, c) {
		t.Fatal("still in the set once the duplicate is closed")
	}

	// Duplicated and Unregistered: out of the set at once.
	e, f := pair()
	defer unix.Close(f)
	register(e, &handler{})
	dup, err = unix.Dup(e)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dup)
	mustCall(t, l, func() {
		if err := l.Unregister(e); err != nil {
			t.Error(err)
		}
		_ = unix.Close(e)
	})
	if inEpollSet(t, epfd, e) {
		t.Fatal("an unregistered descriptor is still in the set")
	}
}

// TestLooks: a descriptor that stays ready is reported by consecutive
// looks (Looks one apart), and one reported again after the loop went
// quiet (an empty look, a park) sees a gap of at least two.
func TestLooks(t *testing.T) {
	l := startLoop(t)
	e := eventFD(t)
	var seen []uint64 // loop goroutine
	done := make(chan struct{})
	h := &handler{}
	h.on = func(uint32) {
		seen = append(seen, l.Looks())
		switch len(seen) {
		case 3:
			_, _ = e.Read() // quiet from now on
		case 4:
			close(done)
		}
	}
	_ = e.Add(1)
	mustCall(t, l, func() {
		if _, err := l.Register(e.Fd(), poll.In, h); err != nil {
			t.Error(err)
		}
	})
	waitFor(t, 5*time.Second, "three reports of a ready descriptor", func() bool { return h.n.Load() >= 3 })
	waitFor(t, 5*time.Second, "the loop did not park", func() bool { return !l.pending.Load() })
	_ = e.Add(1)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("no report after the quiet spell")
	}
	mustCall(t, l, func() {
		if seen[1] != seen[0]+1 || seen[2] != seen[1]+1 {
			t.Errorf("a descriptor left ready was reported at looks %v, want consecutive", seen[:3])
		}
		if seen[3] < seen[2]+2 {
			t.Errorf("reported at look %d after a quiet spell, the last report at %d: want a gap of 2 or more", seen[3], seen[2])
		}
		_ = l.Unregister(e.Fd())
	})
}

// TestAlone: Alone holds while exactly one descriptor has a handler and no
// posted task waits. A task counts from its Post until it begins (the task
// asking, and those before it, do not count; those after it do); attaching
// the same descriptor again, for a new generation, still counts it once;
// Forget and Unregister uncount it once, however often called.
func TestAlone(t *testing.T) {
	l := startLoop(t)
	a, b := eventFD(t), eventFD(t)
	steps := []struct {
		name string
		do   func() // on the loop
		want bool
	}{
		{"nothing attached", func() {}, false},
		{"one registered", func() { _, _ = l.Register(a.Fd(), 0, &handler{}) }, true},
		{"a task posted", func() { l.Post(func() {}) }, false},
		{"the task ran", func() {}, true},
		{"a second registered", func() { _, _ = l.Register(b.Fd(), 0, &handler{}) }, false},
		{"the second forgotten", func() { l.Forget(b.Fd()); l.Forget(b.Fd()) }, true},
		{"the first attached again", func() { l.Attach(a.Fd(), 1<<20, &handler{}) }, true},
		{"the first unregistered", func() { _ = l.Unregister(a.Fd()); _ = l.Unregister(a.Fd()) }, false},
	}
	for _, s := range steps {
		var got bool
		mustCall(t, l, func() { s.do(); got = l.Alone() })
		if got != s.want {
			t.Fatalf("%s: Alone = %v, want %v", s.name, got, s.want)
		}
	}
}
