package poll

import (
	"errors"
	"sync"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mustPoller(t *testing.T) *Poller {
	t.Helper()
	p, err := Open(8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func mustEventFD(t *testing.T) *EventFD {
	t.Helper()
	e, err := NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func TestEventFDCounter(t *testing.T) {
	e := mustEventFD(t)
	if _, err := e.Read(); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("read of empty eventfd: got %v, want EAGAIN", err)
	}
	for _, n := range []uint64{1, 2, 39} {
		if err := e.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	got, err := e.Read()
	if err != nil || got != 42 {
		t.Fatalf("Read = %d, %v; want 42, nil", got, err)
	}
	if _, err := e.Read(); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("counter not reset: %v", err)
	}
}

func TestEventFDOverflowKeepsReadable(t *testing.T) {
	e := mustEventFD(t)
	if err := e.Add(1<<64 - 2); err != nil { // the maximum counter value
		t.Fatal(err)
	}
	if err := e.Add(5); err != nil { // would overflow: drained then written
		t.Fatal(err)
	}
	got, err := e.Read()
	if err != nil || got != 5 {
		t.Fatalf("after overflow Read = %d, %v; want 5", got, err)
	}
}

func TestPollerReportsDataAndBits(t *testing.T) {
	p := mustPoller(t)
	a, b := mustEventFD(t), mustEventFD(t)
	const da, db = uint64(0xdeadbeef_00000001), uint64(7 << 32)
	if err := p.Add(a.Fd(), In, da); err != nil {
		t.Fatal(err)
	}
	if err := p.Add(b.Fd(), In, db); err != nil {
		t.Fatal(err)
	}
	evs := make([]Event, 8)
	if n, err := p.Wait(evs, 0); err != nil || n != 0 {
		t.Fatalf("Wait on idle set = %d, %v; want 0", n, err)
	}
	if err := b.Add(1); err != nil {
		t.Fatal(err)
	}
	n, err := p.Wait(evs, 1000)
	if err != nil || n != 1 {
		t.Fatalf("Wait = %d, %v; want 1", n, err)
	}
	if evs[0].Data != db || evs[0].Events&In == 0 {
		t.Fatalf("event = %+v; want data %#x with In", evs[0], db)
	}
	// Level-triggered: still readable until drained.
	if n, _ := p.Wait(evs, 0); n != 1 {
		t.Fatalf("level-triggered fd not reported again: n=%d", n)
	}
	if _, err := b.Read(); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.Wait(evs, 0); n != 0 {
		t.Fatalf("drained fd still reported: n=%d", n)
	}
	// Modify changes the data.
	if err := a.Add(1); err != nil {
		t.Fatal(err)
	}
	if err := p.Modify(a.Fd(), In, 99); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.Wait(evs, 1000); n != 1 || evs[0].Data != 99 {
		t.Fatalf("after Modify got %+v", evs[:n])
	}
	if err := p.Delete(a.Fd()); err != nil {
		t.Fatal(err)
	}
	if n, _ := p.Wait(evs, 0); n != 0 {
		t.Fatalf("deleted fd reported: %+v", evs[:n])
	}
	if err := p.Delete(a.Fd()); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("second Delete = %v; want ENOENT", err)
	}
}

func TestPollerWaitBoundedByOut(t *testing.T) {
	p := mustPoller(t)
	for i := 0; i < 4; i++ {
		e := mustEventFD(t)
		_ = e.Add(1)
		if err := p.Add(e.Fd(), In, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	evs := make([]Event, 2)
	if n, err := p.Wait(evs, 0); err != nil || n != 2 {
		t.Fatalf("Wait with 2-slot buffer = %d, %v", n, err)
	}
}

func TestCloseIdempotentAndCloexec(t *testing.T) {
	p, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range []int{p.Fd(), e.Fd()} {
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC == 0 {
			t.Fatalf("fd %d not close-on-exec: %#x %v", fd, flags, err)
		}
	}
	fl, _ := unix.FcntlInt(uintptr(e.Fd()), unix.F_GETFL, 0)
	if fl&unix.O_NONBLOCK == 0 {
		t.Fatal("eventfd is blocking")
	}
	for i := 0; i < 2; i++ {
		if err := p.Close(); err != nil {
			t.Fatalf("Poller.Close #%d: %v", i, err)
		}
		if err := e.Close(); err != nil {
			t.Fatalf("EventFD.Close #%d: %v", i, err)
		}
	}
}

func TestWakerCoalesces(t *testing.T) {
	w, err := NewWaker()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Wake() }()
	}
	wg.Wait()
	var b [8]byte
	n, err := unix.Read(w.Fd(), b[:])
	if err != nil || n != 8 {
		t.Fatalf("read waker: %d %v", n, err)
	}
	if got := b[0]; got != 1 {
		t.Fatalf("64 wakes wrote counter %d; want 1 (coalesced)", got)
	}
	w.pending.Store(false)
	// After Reset a new Wake must write again.
	_ = w.Wake()
	w.Reset()
	if w.pending.Load() {
		t.Fatal("Reset left pending set")
	}
	if _, err := unix.Read(w.Fd(), b[:]); err != unix.EAGAIN {
		t.Fatalf("Reset did not drain the eventfd: %v", err)
	}
	_ = w.Wake()
	if _, err := unix.Read(w.Fd(), b[:]); err != nil {
		t.Fatalf("Wake after Reset wrote nothing: %v", err)
	}
}

func BenchmarkWakeReset(b *testing.B) {
	w, err := NewWaker()
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = w.Wake()
		_ = w.Wake()
		w.Reset()
	}
}

func TestModifyDoesNotAllocate(t *testing.T) {
	p := mustPoller(t)
	e := mustEventFD(t)
	if err := p.Add(e.Fd(), In, 1); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := p.Modify(e.Fd(), In|Out, 2); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Modify allocates %.1f times", allocs)
	}
}

// TestNetpollParksUntilReady: after Netpoll the epoll descriptor is
// non-blocking and a RawConn.Read whose callback polls the set returns once
// a registered descriptor becomes ready; Close closes the descriptor once.
func TestNetpollParksUntilReady(t *testing.T) {
	p, err := Open(4)
	if err != nil {
		t.Fatal(err)
	}
	e := mustEventFD(t)
	if err := p.Add(e.Fd(), In, 7); err != nil {
		t.Fatal(err)
	}
	rc, ok, err := p.Netpoll()
	if err != nil || !ok {
		t.Fatalf("Netpoll = %v, %v", ok, err)
	}
	if _, _, err := p.Netpoll(); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second Netpoll = %v, want EBUSY", err)
	}
	fl, _ := unix.FcntlInt(uintptr(p.Fd()), unix.F_GETFL, 0)
	if fl&unix.O_NONBLOCK == 0 {
		t.Fatal("epoll descriptor still blocking")
	}
	evs := make([]Event, 4)
	done := make(chan error, 1)
	go func() {
		var n int
		err := rc.Read(func(uintptr) bool {
			n, _ = p.Wait(evs, 0)
			return n > 0
		})
		if err == nil && (n != 1 || evs[0].Data != 7) {
			err = errors.New("woke without the report")
		}
		done <- err
	}()
	_ = e.Add(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	fd := p.Fd()
	for range 2 {
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != unix.EBADF {
		t.Fatalf("epoll descriptor open after Close: %v", err)
	}
}
