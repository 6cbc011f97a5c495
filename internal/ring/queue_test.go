package ring

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// readable polls fd without waiting.
func readable(t interface{ Fatal(...any) }, fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	for err == unix.EINTR { // a signal (the runtime's preemption) is not an answer
		n, err = unix.Poll(fds, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestQueueFdLevel: once Fd is called, the descriptor is readable exactly
// while the queue holds entries, whatever filled or emptied it; entries
// queued before Fd was called make it readable at once.
func TestQueueFdLevel(t *testing.T) {
	q := NewQueue[int](2, nil)
	defer q.Close()
	v := 1
	_ = q.Push(&v)
	fd := q.Fd()
	if fd < 0 || !readable(t, fd) {
		t.Fatalf("fd %d not readable with an entry queued before Fd", fd)
	}
	if q.Fd() != fd {
		t.Fatal("Fd changed")
	}
	out := make([]int, 4)
	if n := q.PopN(out); n != 1 || readable(t, fd) {
		t.Fatalf("PopN = %d, readable %v", n, readable(t, fd))
	}
	if err := q.Pop(context.Background(), false, &v); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("empty Pop = %v", err)
	}
	_ = q.PushAll([]int{1, 2, 3})
	if !readable(t, fd) {
		t.Fatal("not readable after PushAll")
	}
	q.Extract(func(*int) bool { return true })
	if readable(t, fd) || q.Len() != 0 {
		t.Fatal("readable after everything was extracted")
	}
}

// TestQueueCloseMakesDuplicateReadable is the reactor's ownership
// contract: a poller holding a duplicate of the descriptor sees it
// readable once the queue closes, and Fd is -1 from then on.
func TestQueueCloseMakesDuplicateReadable(t *testing.T) {
	for _, queued := range []int{0, 3} {
		q := NewQueue[int](0, nil)
		dup, err := unix.FcntlInt(uintptr(q.Fd()), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		for k := 0; k < queued; k++ {
			_ = q.Push(&k)
		}
		rest := q.Close()
		if len(rest) != queued || !readable(t, dup) || q.Fd() != -1 || !q.Closed() {
			t.Fatalf("queued %d: rest %v, duplicate readable %v, Fd %d", queued, rest, readable(t, dup), q.Fd())
		}
		_ = unix.Close(dup)
		if q.Close() != nil {
			t.Fatal("second Close returned entries")
		}
		v := 0
		if err := q.Push(&v); !IsClosed(err) {
			t.Fatalf("Push after Close = %v", err)
		}
		if err := q.Pop(context.Background(), true, &v); !errors.Is(err, syscall.EBADF) {
			t.Fatalf("Pop after Close = %v", err)
		}
		if err := q.Wait(context.Background()); !errors.Is(err, syscall.EBADF) {
			t.Fatalf("Wait after Close = %v", err)
		}
	}
}

// TestQueueWithoutFdMakesNoDescriptor: a queue nobody polls opens no
// eventfd (so it makes no system call per entry).
func TestQueueWithoutFdMakesNoDescriptor(t *testing.T) {
	q := NewQueue[int](0, nil)
	for k := 0; k < 10; k++ {
		_ = q.Push(&k)
	}
	if q.efd != nil {
		t.Fatal("eventfd opened before Fd")
	}
	q.Close()
}

// waitBlocked waits (bounded) until n goroutines are blocked in q's Pop or
// Wait, so that a test pushes to a waiter rather than racing it.
func waitBlocked[T any](t *testing.T, q *Queue[T], n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		q.mu.Lock()
		w := q.waiters
		q.mu.Unlock()
		if w == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines blocked, want %d", w, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestQueueBlockingPopAndWait: a blocked Wait returns on a push, a blocked
// Pop gets the pushed entry, both give up at their context's end and both
// return the queue's own closed error across Close. (Wait and Pop are
// blocked one at a time: with both blocked on one push, a Pop that takes
// the entry first rightly leaves Wait waiting.)
func TestQueueBlockingPopAndWait(t *testing.T) {
	errOwn := errors.New("own closed error")
	q := NewQueue[int](0, errOwn)
	waited := make(chan error)
	go func() { waited <- q.Wait(context.Background()) }()
	waitBlocked(t, q, 1)
	v := 7
	_ = q.Push(&v)
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if err := q.Pop(context.Background(), false, &v); err != nil || v != 7 {
		t.Fatalf("Pop after Wait = %d, %v", v, err)
	}
	got := make(chan int)
	go func() {
		var v int
		if err := q.Pop(context.Background(), true, &v); err != nil {
			v = -1
		}
		got <- v
	}()
	waitBlocked(t, q, 1)
	v = 8
	_ = q.Push(&v)
	if v := <-got; v != 8 {
		t.Fatalf("blocked Pop got %d", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := q.Pop(ctx, true, &v); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Pop past deadline = %v", err)
	}
	if err := q.Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past deadline = %v", err)
	}
	go func() { waited <- q.Wait(context.Background()) }()
	waitBlocked(t, q, 1)
	q.Close()
	if err := <-waited; err != errOwn {
		t.Fatalf("Wait across Close = %v", err)
	}
}

// TestQueueBlockedPopAndWaitBothWake: with a Pop and a Wait blocked, two
// pushes reach both (the token is passed on while entries and waiters
// remain).
func TestQueueBlockedPopAndWaitBothWake(t *testing.T) {
	q := NewQueue[int](0, nil)
	defer q.Close()
	got := make(chan int, 1)
	go func() {
		var v int
		if err := q.Pop(context.Background(), true, &v); err != nil {
			v = -1
		}
		got <- v
	}()
	waited := make(chan error, 1)
	go func() { waited <- q.Wait(context.Background()) }()
	waitBlocked(t, q, 2)
	for v := range 2 {
		_ = q.Push(&v)
	}
	if err := <-waited; err != nil {
		t.Fatal(err)
	}
	if v := <-got; v != 0 {
		t.Fatalf("blocked Pop got %d", v)
	}
}

// TestQueuePushWithoutWaiterLeavesNoToken: pushes nobody waits for do not
// touch the wake channel (the common case costs no channel operation).
func TestQueuePushWithoutWaiterLeavesNoToken(t *testing.T) {
	q := NewQueue[int](0, nil)
	defer q.Close()
	for v := range 3 {
		_ = q.Push(&v)
	}
	if len(q.signal) != 0 {
		t.Fatal("a push with no waiter left a wake token")
	}
}

// TestQueueConcurrentFIFO: producers' entries come out in each producer's
// order, to consumers blocked in Pop.
func TestQueueConcurrentFIFO(t *testing.T) {
	q := NewQueue[[2]int](0, nil)
	defer q.Close()
	const producers, per = 4, 500
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < per; k++ {
				_ = q.Push(&[2]int{p, k})
			}
		}()
	}
	last := []int{-1, -1, -1, -1}
	for n := 0; n < producers*per; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var v [2]int
		err := q.Pop(ctx, true, &v)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if v[1] != last[v[0]]+1 {
			t.Fatalf("producer %d: %d after %d", v[0], v[1], last[v[0]])
		}
		last[v[0]] = v[1]
	}
	wg.Wait()
}

// TestQueueModel drives a queue with random operations against a slice
// and checks, after each, its content and that its descriptor is readable
// exactly while it is not empty (and after it closed).
func TestQueueModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		q := NewQueue[int](rapid.IntRange(0, 5).Draw(t, "size"), nil)
		defer q.Close()
		fd := -1
		var model []int
		next, closed := 0, false
		t.Repeat(map[string]func(*rapid.T){
			"push": func(t *rapid.T) {
				err := q.Push(&next)
				if closed != (err != nil) {
					t.Fatalf("push after close %v = %v", closed, err)
				}
				if !closed {
					model = append(model, next)
				}
				next++
			},
			"pushAll": func(t *rapid.T) {
				n := rapid.IntRange(0, 5).Draw(t, "n")
				vs := make([]int, n)
				for k := range vs {
					vs[k] = next
					next++
				}
				if err := q.PushAll(vs); err == nil {
					model = append(model, vs...)
				} else if !closed && n > 0 {
					t.Fatal(err)
				}
			},
			"pop": func(t *rapid.T) {
				var v int
				err := q.Pop(context.Background(), false, &v)
				switch {
				case closed:
					if !IsClosed(err) {
						t.Fatalf("pop of a closed queue = %v", err)
					}
				case len(model) == 0:
					if !errors.Is(err, ErrAgain) {
						t.Fatalf("pop of an empty queue = %v", err)
					}
				default:
					if err != nil || v != model[0] {
						t.Fatalf("pop = %d %v, want %d", v, err, model[0])
					}
					model = model[1:]
				}
			},
			"popN": func(t *rapid.T) {
				out := make([]int, rapid.IntRange(0, 6).Draw(t, "n"))
				n := q.PopN(out)
				want := min(len(out), len(model))
				if closed {
					want = 0
				}
				if n != want || !slices.Equal(out[:n], model[:n]) {
					t.Fatalf("popN = %v, model %v", out[:n], model)
				}
				model = model[n:]
			},
			"extract": func(t *rapid.T) {
				m := rapid.IntRange(2, 3).Draw(t, "mod")
				got := q.Extract(func(v *int) bool { return *v%m == 0 })
				var want []int
				model = slices.DeleteFunc(model, func(v int) bool {
					if v%m == 0 {
						want = append(want, v)
						return true
					}
					return false
				})
				if len(got) != len(want) || !slices.Equal(got, want) {
					t.Fatalf("extract = %v, want %v", got, want)
				}
			},
			"fd": func(t *rapid.T) {
				if fd < 0 && !closed {
					fd = q.Fd()
				}
			},
			"close": func(t *rapid.T) {
				if rapid.IntRange(0, 15).Draw(t, "rare") != 0 {
					return
				}
				var dup = -1
				if fd >= 0 && !closed {
					var err error
					if dup, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
						t.Fatal(err)
					}
				}
				rest := q.Close()
				if !closed && !slices.Equal(rest, model) {
					t.Fatalf("close returned %v, model %v", rest, model)
				}
				if dup >= 0 {
					if !readable(t, dup) {
						t.Fatal("duplicate not readable after close")
					}
					_ = unix.Close(dup)
				}
				closed, model, fd = true, nil, -1
			},
			"": func(t *rapid.T) {
				if q.Len() != len(model) {
					t.Fatalf("len %d, model %d", q.Len(), len(model))
				}
				if fd >= 0 && readable(t, fd) != (len(model) > 0) {
					t.Fatalf("fd readable %v with %d entries", readable(t, fd), len(model))
				}
			},
		})
	})
}

func BenchmarkQueuePushPop(b *testing.B) {
	for _, polled := range []bool{false, true} {
		name := "unpolled"
		if polled {
			name = "polled"
		}
		b.Run(name, func(b *testing.B) {
			q := NewQueue[big](0, nil)
			defer q.Close()
			if polled {
				q.Fd()
			}
			var v, out big
			b.ReportAllocs()
			for k := 0; k < b.N; k++ {
				_ = q.Push(&v)
				_ = q.Pop(context.Background(), false, &out)
			}
		})
	}
}

// BenchmarkQueueHandoff: two goroutines hand an entry back and forth
// through two queues, each blocked in Pop until the other pushes (a
// synchronous id's call and the fabric loop that answers it), with a
// context that never ends (no Done channel: a plain receive) and with one
// that can (a select on the token and Done).
func BenchmarkQueueHandoff(b *testing.B) {
	for _, cancelable := range []bool{false, true} {
		name := "ctx=background"
		if cancelable {
			name = "ctx=cancelable"
		}
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			if cancelable {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
			}
			ping, pong := NewQueue[int](1, nil), NewQueue[int](1, nil)
			defer ping.Close()
			defer pong.Close()
			done := make(chan struct{})
			go func() {
				defer close(done)
				var v int
				for k := 0; k < b.N; k++ {
					if ping.Pop(ctx, true, &v) != nil {
						return
					}
					_ = pong.Push(&v)
				}
			}()
			b.ReportAllocs()
			var v int
			for k := 0; k < b.N; k++ {
				_ = ping.Push(&k)
				if err := pong.Pop(ctx, true, &v); err != nil {
					b.Fatal(err)
				}
			}
			<-done
		})
	}
}

// TestQueueReady: Ready is true exactly while a Wait would return at once.
func TestQueueReady(t *testing.T) {
	q := NewQueue[int](2, nil)
	steps := []struct {
		name string
		do   func()
		want bool
	}{
		{"empty", func() {}, false},
		{"pushed", func() { v := 1; _ = q.Push(&v) }, true},
		{"popped", func() { var v int; _ = q.Pop(context.Background(), false, &v) }, false},
		{"pushed again", func() { v := 2; _ = q.Push(&v) }, true},
		{"closed with an entry", func() { _ = q.Close() }, true},
	}
	for _, s := range steps {
		s.do()
		if got := q.Ready(); got != s.want {
			t.Fatalf("%s: Ready() = %v, want %v", s.name, got, s.want)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		err := q.Wait(ctx)
		cancel()
		if returned := !errors.Is(err, context.DeadlineExceeded); returned != s.want {
			t.Fatalf("%s: Wait returned %v, Ready() %v", s.name, err, s.want)
		}
	}
}

// TestQueueCloseWakesEveryWaiter: Close wakes every blocked Pop and Wait
// (each woken one passes the wake token on), with the queue's closed
// error, also when a stale token was left in the channel; and a queue
// costs two allocations and its ring's buffer, with no channel for Close
// (three before, finding 25 in BENCHMARKS.md).
func TestQueueCloseWakesEveryWaiter(t *testing.T) {
	for _, stale := range []bool{false, true} {
		q := NewQueue[int](0, nil)
		if stale {
			q.signal <- struct{}{} // as a push to a waiter gone meanwhile leaves it
		}
		const pops, waits = 5, 4
		errs := make(chan error, pops+waits)
		for range pops {
			go func() {
				var v int
				errs <- q.Pop(context.Background(), true, &v)
			}()
		}
		for range waits {
			go func() { errs <- q.Wait(context.Background()) }()
		}
		// With a stale token one of them may take it and block again:
		// all are blocked once the count settles.
		waitBlocked(t, q, pops+waits)
		q.Close()
		timeout := time.After(10 * time.Second)
		for k := 0; k < pops+waits; k++ {
			select {
			case err := <-errs:
				if !errors.Is(err, ErrClosed) {
					t.Fatalf("stale %v: waiter %d returned %v", stale, k, err)
				}
			case <-timeout:
				t.Fatalf("stale %v: %d of %d waiters woken by Close", stale, k, pops+waits)
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { NewQueue[int](0, nil).Close() }); n > 2 {
		t.Errorf("%.0f allocations per queue, want 2", n)
	}
}

// TestQueueMovePops: a queue given a move by Init pops (Pop, PopN)
// through its move function, in order, and leaves each slot as move left
// it rather than zeroed; Close hands back what is left, whole.
func TestQueueMovePops(t *testing.T) {
	type entry struct {
		p    *int // cleared by move
		a, b int  // left in the slot
	}
	moves := 0
	q := new(Queue[entry])
	q.Init(4, nil, func(d, s *entry) {
		moves++
		*d = *s
		s.p = nil
	})
	x := 7
	for k := 1; k <= 6; k++ {
		if err := q.Push(&entry{p: &x, a: k, b: 10 * k}); err != nil {
			t.Fatal(err)
		}
	}
	var e entry
	if err := q.Pop(context.Background(), false, &e); err != nil || e != (entry{p: &x, a: 1, b: 10}) {
		t.Fatalf("Pop = %+v, %v", e, err)
	}
	out := make([]entry, 2)
	if n := q.PopN(out); n != 2 || out[0] != (entry{p: &x, a: 2, b: 20}) || out[1] != (entry{p: &x, a: 3, b: 30}) {
		t.Fatalf("PopN = %d %+v", n, out)
	}
	if moves != 3 {
		t.Fatalf("%d moves for 3 pops", moves)
	}
	q.mu.Lock()
	left := 0
	for k := range q.r.buf {
		s := q.r.buf[k]
		if s.p == nil && s.a != 0 {
			left++ // popped: its pointer cleared, its other fields as they were
		}
	}
	q.mu.Unlock()
	if left != 3 {
		t.Fatalf("%d popped slots kept their bytes, want 3 (buffer %+v)", left, q.r.buf)
	}
	rest := q.Close()
	if len(rest) != 3 || rest[0] != (entry{p: &x, a: 4, b: 40}) || rest[2] != (entry{p: &x, a: 6, b: 60}) {
		t.Fatalf("Close = %+v", rest)
	}
	if moves != 3 {
		t.Fatalf("Close moved (%d moves)", moves)
	}
}

// TestQueuePopUnless: PopUnless takes the oldest entry while stop is
// clear; with stop set it takes nothing and returns ErrAgain (the entry
// stays, and the descriptor stays readable), as it does on an empty queue;
// a closed queue returns the closed error. Once stop is set and Fence has
// returned, a PopUnless racing with them has either taken its entry
// before or takes none (the goroutine below pops until stopped; every
// entry is then either popped or still queued, none lost or doubled).
func TestQueuePopUnless(t *testing.T) {
	q := NewQueue[int](4, nil)
	fd := q.Fd()
	var stop atomic.Bool
	var v int
	for _, k := range []int{1, 2} {
		if err := q.Push(&k); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.PopUnless(&stop, &v); err != nil || v != 1 {
		t.Fatalf("PopUnless = %d, %v; want 1, nil", v, err)
	}
	stop.Store(true)
	if err := q.PopUnless(&stop, &v); !errors.Is(err, ErrAgain) || !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("PopUnless with stop set: %v, want ErrAgain", err)
	}
	if q.Len() != 1 || !readable(t, fd) {
		t.Fatalf("stopped PopUnless took an entry: len %d, readable %v", q.Len(), readable(t, fd))
	}
	stop.Store(false)
	if err := q.PopUnless(&stop, &v); err != nil || v != 2 {
		t.Fatalf("PopUnless = %d, %v; want 2, nil", v, err)
	}
	if err := q.PopUnless(&stop, &v); !errors.Is(err, ErrAgain) {
		t.Fatalf("PopUnless on an empty queue: %v, want ErrAgain", err)
	}
	if readable(t, fd) {
		t.Fatal("empty queue readable")
	}

	const n = 10000
	var popped []int // the goroutine's, read once it is done
	done := make(chan struct{})
	go func() {
		defer close(done)
		var x int
		for {
			err := q.PopUnless(&stop, &x)
			if err == nil {
				popped = append(popped, x)
				continue
			}
			if stop.Load() {
				return
			}
		}
	}()
	for k := 0; k < n/2; k++ {
		_ = q.Push(&k)
	}
	stop.Store(true)
	q.Fence()
	for k := n / 2; k < n; k++ { // pushed after stop and Fence: none may be taken
		_ = q.Push(&k)
	}
	<-done
	for _, x := range popped {
		if x >= n/2 {
			t.Fatalf("entry %d, pushed after stop and Fence, was popped", x)
		}
	}
	if len(popped)+q.Len() != n {
		t.Fatalf("popped %d + queued %d != pushed %d", len(popped), q.Len(), n)
	}
	q.Close()
	if err := q.PopUnless(&stop, &v); !IsClosed(err) {
		t.Fatalf("PopUnless on a closed queue: %v", err)
	}
}
