package evq

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func readable(t *testing.T, q *Queue) bool {
	t.Helper()
	fds := []unix.PollFd{{Fd: int32(q.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	for err == unix.EINTR { // a signal (the runtime's preemption) is not an answer
		n, err = unix.Poll(fds, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

func ev(uid uint64, status int32) *fabric.RawEvent { return &fabric.RawEvent{UID: uid, Status: status} }

func TestFIFOAndFdLevel(t *testing.T) {
	q, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	var out fabric.RawEvent
	if err := q.Pop(context.Background(), false, &out); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("empty Pop = %v", err)
	}
	if readable(t, q) {
		t.Fatal("empty queue's fd is readable")
	}
	for k := int32(0); k < 100; k++ { // past the initial ring size
		if err := q.Push(ev(1, k)); err != nil {
			t.Fatal(err)
		}
	}
	if !readable(t, q) || q.Len() != 100 {
		t.Fatalf("fd readable %v, len %d", readable(t, q), q.Len())
	}
	for k := int32(0); k < 100; k++ {
		if err := q.Pop(context.Background(), false, &out); err != nil || out.Status != k {
			t.Fatalf("pop %d: %v status %d", k, err, out.Status)
		}
		if want := k < 99; readable(t, q) != want {
			t.Fatalf("after %d pops readable = %v", k+1, !want)
		}
	}
}

func TestBlockingPopWakesAndHonoursContext(t *testing.T) {
	q, _ := New()
	defer q.Close()
	got := make(chan int32)
	go func() {
		var out fabric.RawEvent
		if err := q.Pop(context.Background(), true, &out); err != nil {
			got <- -1
			return
		}
		got <- out.Status
	}()
	time.Sleep(10 * time.Millisecond)
	_ = q.Push(ev(1, 7))
	if s := <-got; s != 7 {
		t.Fatalf("blocked Pop got %d", s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var out fabric.RawEvent
	if err := q.Pop(ctx, true, &out); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Pop with deadline = %v", err)
	}
}

func TestCloseWakesWaitersAndReturnsTheRest(t *testing.T) {
	q, _ := New()
	errc := make(chan error)
	go func() {
		var out fabric.RawEvent
		errc <- q.Pop(context.Background(), true, &out)
	}()
	time.Sleep(10 * time.Millisecond)
	rest := q.Close()
	if err := <-errc; !IsClosed(err) || !errors.Is(err, syscall.EBADF) {
		t.Fatalf("waiter got %v", err)
	}
	if len(rest) != 0 {
		t.Fatalf("rest %v", rest)
	}
	q2, _ := New()
	_ = q2.Push(ev(1, 1))
	_ = q2.Push(ev(2, 2))
	if rest := q2.Close(); len(rest) != 2 || rest[0].Status != 1 || rest[1].Status != 2 {
		t.Fatalf("Close returned %v", rest)
	}
	if q2.Close() != nil {
		t.Fatal("second Close returned events")
	}
	if err := q2.Push(ev(1, 3)); !IsClosed(err) {
		t.Fatalf("Push after Close = %v", err)
	}
}

func TestExtractKeepsOrderAndLevel(t *testing.T) {
	q, _ := New()
	defer q.Close()
	for k := int32(0); k < 10; k++ {
		_ = q.Push(ev(uint64(k%2+1), k))
	}
	odd := q.Extract(func(r *fabric.RawEvent) bool { return r.UID == 2 })
	if len(odd) != 5 || q.Len() != 5 {
		t.Fatalf("extracted %d, left %d", len(odd), q.Len())
	}
	for k, r := range odd {
		if r.Status != int32(2*k+1) {
			t.Fatalf("extracted out of order: %v", odd)
		}
	}
	var out fabric.RawEvent
	for k := int32(0); k < 10; k += 2 {
		if err := q.Pop(context.Background(), false, &out); err != nil || out.Status != k {
			t.Fatalf("kept out of order at %d: %d", k, out.Status)
		}
	}
	_ = q.Push(ev(3, 0))
	_ = q.Extract(func(*fabric.RawEvent) bool { return true })
	if readable(t, q) {
		t.Fatal("fd readable after everything was extracted")
	}
	if err := q.PushAll(odd); err != nil || q.Len() != 5 || !readable(t, q) {
		t.Fatalf("PushAll: %v len %d", err, q.Len())
	}
}

func TestConcurrentProducersConsumers(t *testing.T) {
	q, _ := New()
	defer q.Close()
	const producers, per = 4, 500
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			for k := 0; k < per; k++ {
				_ = q.Push(ev(uint64(p), int32(k)))
			}
		}(p)
	}
	last := make([]int32, producers)
	for k := range last {
		last[k] = -1
	}
	var out fabric.RawEvent
	for n := 0; n < producers*per; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := q.Pop(ctx, true, &out)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if out.Status != last[out.UID]+1 {
			t.Fatalf("producer %d: %d after %d", out.UID, out.Status, last[out.UID])
		}
		last[out.UID] = out.Status
	}
	wg.Wait()
}

// TestQueuesMove: every constructor's queue pops with Move, not a copy
// and a clear of the whole slot.
func TestQueuesMove(t *testing.T) {
	q8, _ := New()
	for name, q := range map[string]*Queue{"New": q8, "NewSize(1)": NewSize(1), "NewSize(64)": NewSize(64)} {
		if !q.Moves() {
			t.Errorf("%s: the queue copies and clears each slot whole, want Move", name)
		}
		q.Close()
	}
}
