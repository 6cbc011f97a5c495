package id_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// TestTakeEventIntoReusesAndClears: TakeEventInto fills the caller's
// event, the same memory every time, with what TakeEvent would return;
// Handle clears it (a stale Ack is EINVAL, the private data handed out
// stays the handler's), an event of a destroyed id is skipped with the
// memory left clear, the accounting is balanced (Destroy does not wait)
// and the journal has the events in order.
func TestTakeEventIntoReusesAndClears(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	j := journal.New(64)
	a := newID(t, ch, id.PSTCP, id.WithJournal(j))
	b := newID(t, ch, id.PSTCP, id.WithJournal(j))
	c := newID(t, ch, id.PSTCP, id.WithJournal(j))
	inject := func(i *id.ID, arg uint64, pd string) {
		r := fabric.RawEvent{Type: id.EventUser, Arg: arg}
		r.SetPrivateData([]byte(pd))
		if !ep(i).InjectRaw(&r) {
			t.Fatal("inject failed")
		}
	}
	inject(a, 1, "x")
	inject(c, 3, "")
	inject(b, 2, "")
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	var ev id.Event
	var raw fabric.RawEvent
	src := ch.Source()

	e1, err := id.TakeEventInto(src, &raw, journal.Now(), &ev)
	if err != nil || e1 != &ev {
		t.Fatalf("TakeEventInto = %p, %v; want %p", e1, err, &ev)
	}
	if e1.ID != a || e1.Type != id.EventUser || e1.Arg != 1 || string(e1.PrivateData()) != "x" {
		t.Fatalf("first event %v arg %d", e1, e1.Arg)
	}
	var kept []byte
	if err := e1.Handle(handlers.Func(func(ev *id.Event) error {
		kept = ev.PrivateData()
		return ev.Ack() // inside the handler: a no-op
	})); err != nil {
		t.Fatal(err)
	}
	if ev.ID != nil || ev.Arg != 0 || ev.Type != 0 || ev.PrivateData() != nil || ev.Seq != 0 {
		t.Fatalf("Handle left %+v", &ev)
	}
	if err := e1.Ack(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("stale Ack = %v, want EINVAL", err)
	}
	if string(kept) != "x" {
		t.Fatalf("private data kept by the handler = %q", kept)
	}

	// c's event is dropped (destroyed), b's comes in the same memory.
	e2, err := id.TakeEventInto(src, &raw, journal.Now(), &ev)
	if err != nil || e2 != &ev || e2.ID != b || e2.Arg != 2 {
		t.Fatalf("second take = %v, %v", e2, err)
	}
	if err := e2.Handle(handlers.Func(func(*id.Event) error { return nil })); err != nil {
		t.Fatal(err)
	}
	if _, err := id.TakeEventInto(src, &raw, journal.Now(), &ev); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("empty take = %v, want EAGAIN", err)
	}
	for _, i := range []*id.ID{a, b} {
		if blocked, _ := blocks(func() { _ = i.Destroy() }, 2*time.Second); blocked {
			t.Fatalf("Destroy of id %d waits: its event's acknowledgement was not counted", i.Handle())
		}
	}
	var got []uint64
	for _, r := range j.Records() {
		if r.Kind == journal.KindEvent {
			got = append(got, r.ID)
		}
	}
	if len(got) != 2 || got[0] != a.Handle() || got[1] != b.Handle() {
		t.Fatalf("journaled events of ids %v, want [%d %d]", got, a.Handle(), b.Handle())
	}
	if err := journal.Check(j.Records()); err != nil {
		t.Fatal(err)
	}
}

// TestDeliverClaimedIntoReusesAndClears: DeliverClaimedInto and its brief
// form fill the caller's event, the same memory every time, with what
// DeliverClaimed would return; Handle clears it (a stale Ack is EINVAL);
// a claim whose id was destroyed since is dropped (nil, the memory left
// clear); the accounting is balanced (Destroy does not wait).
func TestDeliverClaimedIntoReusesAndClears(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	a := newID(t, ch, id.PSTCP)
	b := newID(t, ch, id.PSTCP)
	r := fabric.RawEvent{Type: id.EventUser, Arg: 1}
	r.SetPrivateData([]byte("pd"))
	if !ep(a).InjectRaw(&r) || !ep(b).InjectRaw(&fabric.RawEvent{Type: id.EventUser, Arg: 2}) ||
		!ep(a).InjectRaw(&fabric.RawEvent{Type: id.EventUser, Arg: 3}) {
		t.Fatal("inject failed")
	}
	src := ch.Source()
	var raws [3]fabric.RawEvent
	var claims [3]id.Claim
	for k := range raws {
		ev, c, err := id.TakeClaim(src, &raws[k], journal.Now())
		if err != nil || ev != nil {
			t.Fatalf("TakeClaim %d = %v, %v", k, ev, err)
		}
		claims[k] = c
	}
	var own id.Event
	nop := handlers.Func(func(*id.Event) error { return nil })
	e1 := id.DeliverClaimedInto(claims[0], src, &raws[0], journal.Now(), &own)
	if e1 != &own || e1.ID != a || e1.Arg != 1 || string(e1.PrivateData()) != "pd" {
		t.Fatalf("first delivery %p %+v", e1, e1)
	}
	if err := e1.Handle(nop); err != nil {
		t.Fatal(err)
	}
	if own.ID != nil || own.Arg != 0 || own.PrivateData() != nil {
		t.Fatalf("Handle left %+v", &own)
	}
	if err := e1.Ack(); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("stale Ack = %v, want EINVAL", err)
	}
	if !id.Brief(&raws[1]) {
		t.Fatal("b's event not brief")
	}
	e2 := id.DeliverClaimedBriefInto(claims[1], src, raws[1].Type, raws[1].Status, raws[1].Arg, journal.Now(), &own)
	if e2 != &own || e2.ID != b || e2.Arg != 2 || e2.Type != id.EventUser {
		t.Fatalf("brief delivery %p %+v", e2, e2)
	}
	if err := e2.Handle(nop); err != nil {
		t.Fatal(err)
	}
	// a destroyed with its second event claimed: Destroy waits for it, so
	// from another goroutine, and the delivery drops it.
	destroyed := make(chan error, 1)
	go func() { destroyed <- a.Destroy() }()
	deadline := time.Now().Add(5 * time.Second)
	for a.State() != id.StateDestroyed && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if e3 := id.DeliverClaimedInto(claims[2], src, &raws[2], journal.Now(), &own); e3 != nil {
		t.Fatalf("delivery for a destroyed id = %+v, want nil", e3)
	}
	if own.ID != nil || own.Arg != 0 {
		t.Fatalf("a dropped delivery left %+v", &own)
	}
	select {
	case err := <-destroyed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Destroy still waits after the claimed event was dropped")
	}
	if blocked, _ := blocks(func() { _ = b.Destroy() }, 2*time.Second); blocked {
		t.Fatal("Destroy of b waits: its event's acknowledgement was not counted")
	}
}
