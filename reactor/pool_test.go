package reactor_test

import (
	"bytes"
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/panjf2000/ants/v2"
	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// antsIgnore are the goroutines of ants' default pool, which exists in this
// test binary because it imports ants (the reactor does not).
var antsIgnore = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).purgeStaleWorkers"),
	goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*poolCommon).ticktock"),
	goleak.IgnoreAnyFunction("github.com/panjf2000/ants/v2.(*goWorker).run.func1"), // idle until purged
}

// TestAntsDefaultPoolStillWorks: a program that imports reactor, and runs a
// reactor with workers, can still use ants' default pool (the reactor used
// to release it in an init function, and ants.Submit then failed with
// ErrPoolClosed).
func TestAntsDefaultPoolStillWorks(t *testing.T) {
	fx := newFixture(t, 1, reactor.WithWorkers(2))
	seen := make(chan struct{}, 1)
	if err := fx.r.Register(fx.ch, handlers.Func(func(*id.Event) error { seen <- struct{}{}; return nil })); err != nil {
		t.Fatal(err)
	}
	ep(fx.ids[0]).Inject(id.EventUser, 0, nil)
	<-seen
	ran := make(chan struct{})
	if err := ants.Submit(func() { close(ran) }); err != nil {
		t.Fatalf("ants.Submit = %v", err)
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the task submitted to ants' default pool never ran")
	}
}

// workerGoroutines counts the goroutines running a reactor worker.
func workerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return bytes.Count(buf, []byte("reactor.(*Reactor).work")) // work, or worker before
}

// TestPoolBoundsWorkersAndHoldsNoneWhenIdle: at most Options.Workers
// handlers run at once, a handler blocked on one id does not hold back the
// other ids beyond that bound, and once every event is handled no worker
// goroutine is left (workers start when a mailbox becomes runnable and exit
// when the run queue is empty).
func TestPoolBoundsWorkersAndHoldsNoneWhenIdle(t *testing.T) {
	const workers, nids = 2, 6
	fx := newFixture(t, nids, reactor.WithWorkers(workers))
	if n := workerGoroutines(); n != 0 {
		t.Fatalf("%d worker goroutines before any event", n)
	}
	var running, peak, total atomic.Int32
	release := make(chan struct{})
	h := handlers.Func(func(*id.Event) error {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		<-release
		running.Add(-1)
		total.Add(1)
		return nil
	})
	if err := fx.r.Register(fx.ch, h); err != nil {
		t.Fatal(err)
	}
	for _, cm := range fx.ids {
		ep(cm).Inject(id.EventUser, 0, nil)
	}
	waitFor(t, "two blocked handlers", func() bool { return running.Load() == workers })
	time.Sleep(20 * time.Millisecond) // a third would start now if it could
	if p := peak.Load(); p != workers {
		t.Fatalf("%d handlers ran at once with %d workers", p, workers)
	}
	close(release)
	waitFor(t, "every event", func() bool { return total.Load() == nids })
	waitFor(t, "workers to exit", func() bool { return workerGoroutines() == 0 })
	if s := fx.r.Stats(); s.Pending != 0 || s.Events != nids {
		t.Fatalf("stats %+v", s)
	}
}

// TestCloseDeadlineSkipsItemsAWorkerTook: when Close gives up on a blocked
// handler, the events of that id queued behind it (which the worker may
// already have taken from the mailbox) are acknowledged without their
// handlers, and are not handled once the blocked handler returns.
func TestCloseDeadlineSkipsItemsAWorkerTook(t *testing.T) {
	fx := newFixture(t, 1, reactor.WithWorkers(1))
	var calls atomic.Int32
	release := make(chan struct{})
	// Queued before the channel is registered, the four events are read in
	// one batch: the worker takes them together and blocks in the first.
	for k := 0; k < 4; k++ {
		ep(fx.ids[0]).Inject(id.EventUser, int32(k), nil)
	}
	if err := fx.r.Register(fx.ch, handlers.Func(func(*id.Event) error {
		if calls.Add(1) == 1 {
			<-release
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first handler", func() bool { return calls.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := fx.r.Close(ctx); err == nil {
		t.Fatal("Close returned nil with a handler blocked")
	}
	close(release)
	if err := fx.r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d handler calls, want 1 (the events behind it abandoned)", n)
	}
	if p := fx.r.Stats().Pending; p != 0 {
		t.Fatalf("%d events pending after Close", p)
	}
}
