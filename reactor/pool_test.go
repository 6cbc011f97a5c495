package reactor_test

import (
	"bytes"
	"context"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/panjf2000/ants/v2"
	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
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

// TestPoolBlockedHandlerHoldsNoOtherID: a worker that starts takes one
// mailbox's items, not several (only after a batch of quick handlers does
// it take from several mailboxes at once): a handler that blocks in its
// first batch holds back no other id's event, which the other worker
// handles meanwhile.
func TestPoolBlockedHandlerHoldsNoOtherID(t *testing.T) {
	const nids = 16
	fx := newFixture(t, nids, reactor.WithWorkers(2))
	// Queued before the channel is registered: one batch, one mailbox per
	// id on the run queue, the blocking id's first.
	for _, cm := range fx.ids {
		ep(cm).Inject(id.EventUser, 0, nil)
	}
	var others atomic.Int32
	blocked, release := make(chan struct{}), make(chan struct{})
	var unblock sync.Once
	t.Cleanup(func() { unblock.Do(func() { close(release) }) }) // before the fixture's Close waits for the handler
	if err := fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
		if ev.ID == fx.ids[0] {
			close(blocked)
			<-release
			return nil
		}
		others.Add(1)
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	<-blocked
	waitFor(t, "the other ids' events while one handler blocks", func() bool { return others.Load() == nids-1 })
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

// TestPoolDestroyWithEventsClaimed: on a pool, the loop claims an event
// (counts it against its id) and a worker delivers it later. An id
// destroyed while its events wait in its mailbox, claimed and not yet
// delivered, has them dropped: Destroy waits for them (they count as
// reported, as an event a handler has not yet acknowledged), returns once
// the worker has dropped them, no handler of the id runs, and nothing is
// journaled for the id after its destroy.
func TestPoolDestroyWithEventsClaimed(t *testing.T) {
	fx := newFixture(t, 2, reactor.WithWorkers(1))
	a, b := fx.ids[0], fx.ids[1]
	started, release := make(chan struct{}), make(chan struct{})
	var ranB atomic.Int32
	h := handlers.Func(func(ev *id.Event) error {
		if ev.ID == a {
			close(started)
			<-release // the one worker is held: b's events wait in its mailbox
		} else {
			ranB.Add(1)
		}
		return nil
	})
	if err := fx.r.Register(fx.ch, h); err != nil {
		t.Fatal(err)
	}
	ep(a).Inject(id.EventUser, 0, nil)
	<-started
	for k := 0; k < 3; k++ {
		ep(b).Inject(id.EventUser, 0, nil)
	}
	waitFor(t, "the loop to take b's events", func() bool { return fx.r.Stats().Events == 4 })
	destroyed := make(chan error, 1)
	go func() { destroyed <- b.Destroy() }()
	select {
	case err := <-destroyed:
		t.Fatalf("Destroy returned (%v) before b's claimed events were dropped", err)
	case <-time.After(50 * time.Millisecond): // waiting for them, as it should
	}
	close(release)
	select {
	case err := <-destroyed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Destroy did not return once the worker was free")
	}
	select {
	case <-b.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("b's Done never closed")
	}
	if n := ranB.Load(); n != 0 {
		t.Fatalf("%d handlers ran for a destroyed id", n)
	}
	waitFor(t, "nothing pending", func() bool { return fx.r.Stats().Pending == 0 })
	recs := journal.Default().RecordsOf(b.Handle())
	for k, r := range recs {
		if r.Kind == journal.KindCall && r.Call == journal.CallDestroy {
			if rest := recs[k+1:]; len(rest) > 0 {
				t.Fatalf("recorded after b's destroy: %v", rest)
			}
		}
	}
}

// TestPoolMigrateWithEventsClaimed: an id migrated to another channel
// while events the loop claimed from the old one wait in its mailbox:
// Migrate waits for them (they count as reported), they are handled by
// the old channel's handler, in order, and journaled after the migrate,
// and the events after the move come from the new channel.
func TestPoolMigrateWithEventsClaimed(t *testing.T) {
	fx := newFixture(t, 2, reactor.WithWorkers(1))
	a, b := fx.ids[0], fx.ids[1]
	ch2, err := channel.New(channel.WithFabric(fx.f))
	if err != nil {
		t.Fatal(err)
	}
	defer ch2.Close()
	oldNum, newNum := id.ChannelNumber(fx.ch), id.ChannelNumber(ch2)
	started, release := make(chan struct{}), make(chan struct{})
	var args []uint64 // b's, in the order handled (one worker: no race)
	h := handlers.Func(func(ev *id.Event) error {
		if ev.ID == a {
			close(started)
			<-release
		} else {
			args = append(args, ev.Arg)
		}
		return nil
	})
	if err := fx.r.Register(fx.ch, h); err != nil {
		t.Fatal(err)
	}
	ep(a).Inject(id.EventUser, 0, nil)
	<-started
	for k := uint64(1); k <= 3; k++ {
		ep(b).InjectRaw(&fabric.RawEvent{Type: id.EventUser, Arg: k})
	}
	waitFor(t, "the loop to take b's events", func() bool { return fx.r.Stats().Events == 4 })
	migrated := make(chan error, 1)
	go func() { migrated <- b.Migrate(ch2) }()
	select {
	case err := <-migrated:
		t.Fatalf("Migrate returned (%v) before b's claimed events were handled", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	select {
	case err := <-migrated:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Migrate did not return once the worker was free")
	}
	if len(args) != 3 || args[0] != 1 || args[1] != 2 || args[2] != 3 {
		t.Fatalf("b's handled events %v, want [1 2 3]", args)
	}
	ep(b).InjectRaw(&fabric.RawEvent{Type: id.EventUser, Arg: 4})
	ev, err := ch2.GetEventContext(context.Background())
	if err != nil || ev.ID != b || ev.Arg != 4 {
		t.Fatalf("new channel: %v, %v", ev, err)
	}
	_ = ev.Ack()
	// The claimed events are journaled when the worker delivers them,
	// after the migrate (Migrate records itself, then waits for them): on
	// the channel the id reports to then, the new one, as the journal's
	// model wants of every record after a migrate.
	recs := journal.Default().RecordsOf(b.Handle())
	migratedAt, events := -1, 0
	for k, r := range recs {
		switch {
		case r.Kind == journal.KindCall && r.Call == journal.CallMigrate:
			migratedAt = k
		case r.Kind == journal.KindEvent:
			events++
			if migratedAt < 0 || r.Channel != newNum {
				t.Fatalf("event record %v before the migrate or off the new channel %d (old %d)", r, newNum, oldNum)
			}
		}
	}
	if events != 4 {
		t.Fatalf("%d event records for b, want 4: %v", events, recs)
	}
}

// eventView is what a handler sees of an event, for comparing deliveries.
type eventView struct {
	Type        id.EventType
	Status      int
	Arg         uint64
	Conn        id.ConnParam
	UD          id.UDParam
	PrivateData []byte
	State       id.State
}

// TestPoolEventsAsInline: the pool hands a worker only the type, status
// and argument of an event without parameters (id.Brief) and the whole raw
// event otherwise; either way its handler sees the event, and the id's
// state after it, exactly as an inline handler does, in order.
func TestPoolEventsAsInline(t *testing.T) {
	raws := []fabric.RawEvent{
		{Type: id.EventUser, Status: -5, Arg: 77}, // brief
		{Type: id.EventEstablished, ResponderResources: 3, InitiatorDepth: 2, FlowControl: 1, RetryCount: 7, RNRRetryCount: 6, SRQ: 1, QPNum: 0x1234},
		{Type: id.EventUser, Arg: 1 << 40},
		{Type: id.EventDisconnected}, // brief
	}
	raws[1].SetPrivateData([]byte("parameters"))
	run := func(workers int) []eventView {
		fx := newFixture(t, 1, reactor.WithWorkers(workers))
		cm := fx.ids[0]
		got := make(chan eventView, len(raws))
		h := handlers.Func(func(ev *id.Event) error {
			got <- eventView{ev.Type, ev.Status, ev.Arg, ev.Conn, ev.UD, ev.PrivateData(), ev.ID.State()}
			return nil
		})
		for k := range raws {
			r := raws[k]
			if !ep(cm).InjectRaw(&r) {
				t.Fatal("inject refused")
			}
		}
		if err := fx.r.Register(fx.ch, h); err != nil {
			t.Fatal(err)
		}
		var views []eventView
		for range raws {
			select {
			case v := <-got:
				views = append(views, v)
			case <-time.After(10 * time.Second):
				t.Fatalf("workers %d: %d of %d events handled", workers, len(views), len(raws))
			}
		}
		return views
	}
	inline, pool := run(0), run(2)
	if inline[0].Status != -5 || inline[0].Arg != 77 || !bytes.Equal(inline[1].PrivateData, []byte("parameters")) || inline[1].Conn.RetryCount != 7 {
		t.Fatalf("inline events %+v do not carry what was injected", inline)
	}
	for k := range inline {
		if !reflect.DeepEqual(pool[k], inline[k]) {
			t.Errorf("event %d: pool %+v, inline %+v", k, pool[k], inline[k])
		}
	}
}
