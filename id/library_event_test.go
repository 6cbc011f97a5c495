package id

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// HandlerFunc-like adapter for this package's tests (handlers imports id).
type handlerFunc func(*Event) error

func (f handlerFunc) HandleEvent(ev *Event) error { return f(ev) }

// TestLibraryEventAckAndAccounting: a library's event (TakeEvent,
// TakeEventInto, DeliverClaimed*) keeps its handling
// and counting in plain fields (finding 27) and behaves as with the atomic
// word: Ack before Handle and after it is EINVAL, Ack inside the handler
// (and from a goroutine the handler waits for) is a no-op, a second
// Handle is EINVAL, a panicking handler's event is acknowledged, and every
// event is counted exactly once (completed == reported, never more), also
// one dropped because its id was destroyed after the claim.
func TestLibraryEventAckAndAccounting(t *testing.T) {
	own := new(Event) // the *Into takes' event, reused across them
	takes := []struct {
		name string
		take func(src fabric.EventSource, raw *fabric.RawEvent) *Event
	}{
		{"TakeEvent", func(src fabric.EventSource, raw *fabric.RawEvent) *Event {
			ev, err := TakeEvent(src, raw)
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}},
		{"TakeEventInto", func(src fabric.EventSource, raw *fabric.RawEvent) *Event {
			ev, err := TakeEventInto(src, raw, journal.Now(), new(Event))
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}},
		{"DeliverClaimed", func(src fabric.EventSource, raw *fabric.RawEvent) *Event {
			_, c, err := TakeClaim(src, raw, journal.Now())
			if err != nil {
				t.Fatal(err)
			}
			return DeliverClaimed(c, src, raw, journal.Now())
		}},
		{"DeliverClaimedInto", func(src fabric.EventSource, raw *fabric.RawEvent) *Event {
			_, c, err := TakeClaim(src, raw, journal.Now())
			if err != nil {
				t.Fatal(err)
			}
			return DeliverClaimedInto(c, src, raw, journal.Now(), own)
		}},
		{"DeliverClaimedBriefInto", func(src fabric.EventSource, raw *fabric.RawEvent) *Event {
			_, c, err := TakeClaim(src, raw, journal.Now())
			if err != nil {
				t.Fatal(err)
			}
			return DeliverClaimedBriefInto(c, src, raw.Type, raw.Status, raw.Arg, journal.Now(), own)
		}},
		{"DeliverClaimedBrief", func(src fabric.EventSource, raw *fabric.RawEvent) *Event {
			_, c, err := TakeClaim(src, raw, journal.Now())
			if err != nil {
				t.Fatal(err)
			}
			return DeliverClaimedBrief(c, src, raw.Type, raw.Status, raw.Arg, journal.Now())
		}},
	}
	for _, tk := range takes {
		f := fakefab.New("fake", false)
		src, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		cm, err := Create(chanOf{src}, nil, PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		balanced := func(when string) {
			t.Helper()
			if r, c := cm.reported.Load(), cm.completed.Load(); r != c {
				t.Fatalf("%s, %s: reported %d, completed %d", tk.name, when, r, c)
			}
		}
		var raw fabric.RawEvent

		// A handler that acknowledges, itself and through another goroutine.
		ep := cm.Endpoint().(*fakefab.Endpoint)
		ep.Inject(EventUser, 1, nil)
		ev := tk.take(src, &raw)
		if ev == nil || ev.ID != cm || ev.Status != 1 {
			t.Fatalf("%s: took %v", tk.name, ev)
		}
		if err := ev.Ack(); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%s: Ack before Handle = %v, want EINVAL", tk.name, err)
		}
		if err := ev.Handle(handlerFunc(func(ev *Event) error {
			if err := ev.Ack(); err != nil {
				return err
			}
			done := make(chan error)
			go func() { done <- ev.Ack() }()
			return <-done
		})); err != nil {
			t.Fatalf("%s: Ack inside the handler: %v", tk.name, err)
		}
		if err := ev.Ack(); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%s: stale Ack = %v, want EINVAL", tk.name, err)
		}
		if err := ev.Handle(handlerFunc(func(*Event) error { t.Error("stale Handle ran its handler"); return nil })); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%s: stale Handle = %v, want EINVAL", tk.name, err)
		}
		balanced("after a handler")

		// A handler that hands its event to Handle again (nested): EINVAL,
		// the inner handler never runs, and the outer Handle acknowledges
		// and counts it once. Run, the inner Handle freed it under the
		// outer, which freed it again: a pooled event went back to the
		// pool twice, to be handed to two takers at once.
		ep.Inject(EventUser, 5, nil)
		ev = tk.take(src, &raw)
		var nested error
		if err := ev.Handle(handlerFunc(func(ev *Event) error {
			nested = ev.Handle(handlerFunc(func(*Event) error { t.Error("nested Handle ran its handler"); return nil }))
			if ev.ID != cm || ev.Status != 5 {
				t.Errorf("%s: the event changed under its handler: %v", tk.name, ev)
			}
			return nil
		})); err != nil {
			t.Fatalf("%s: outer Handle: %v", tk.name, err)
		}
		if !errors.Is(nested, syscall.EINVAL) {
			t.Fatalf("%s: nested Handle = %v, want EINVAL", tk.name, nested)
		}
		balanced("after a nested Handle")

		// A handler that panics.
		ep.Inject(EventUser, 2, nil)
		ev = tk.take(src, &raw)
		func() {
			defer func() {
				if v := recover(); v != "boom" {
					t.Fatalf("%s: recovered %v", tk.name, v)
				}
			}()
			_ = ev.Handle(handlerFunc(func(*Event) error { panic("boom") }))
		}()
		if err := ev.Ack(); !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("%s: Ack after a panic = %v, want EINVAL", tk.name, err)
		}
		balanced("after a panic")

		// An event whose id is destroyed between its claim and its
		// delivery (or, taken whole, before its handler): dropped or not
		// handled, counted once; Destroy waits for it.
		ep.Inject(EventUser, 3, nil)
		var claim Claim
		var taken *Event
		claimed := strings.HasPrefix(tk.name, "DeliverClaimed")
		if claimed {
			if _, claim, err = TakeClaim(src, &raw, journal.Now()); err != nil {
				t.Fatal(err)
			}
		} else {
			taken = tk.take(src, &raw)
		}
		destroyed := make(chan struct{})
		go func() { _ = cm.Destroy(); close(destroyed) }()
		deadline := time.Now().Add(5 * time.Second)
		for !cm.destroyed.Load() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: Destroy did not start", tk.name)
			}
			time.Sleep(time.Millisecond)
		}
		select {
		case <-destroyed:
			t.Fatalf("%s: Destroy returned with an event unacknowledged", tk.name)
		case <-time.After(20 * time.Millisecond):
		}
		if claimed {
			var ev *Event
			switch tk.name {
			case "DeliverClaimed":
				ev = DeliverClaimed(claim, src, &raw, journal.Now())
			case "DeliverClaimedInto":
				ev = DeliverClaimedInto(claim, src, &raw, journal.Now(), own)
			case "DeliverClaimedBriefInto":
				ev = DeliverClaimedBriefInto(claim, src, raw.Type, raw.Status, raw.Arg, journal.Now(), own)
			default:
				ev = DeliverClaimedBrief(claim, src, raw.Type, raw.Status, raw.Arg, journal.Now())
			}
			if ev != nil {
				t.Fatalf("%s: event of a destroyed id delivered", tk.name)
			}
		} else if err := taken.Handle(handlerFunc(func(*Event) error { t.Error("handler of a destroyed id's event ran"); return nil })); err != nil {
			t.Fatal(err)
		}
		select {
		case <-destroyed:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Destroy still waits: the event was not counted", tk.name)
		}
		balanced("after the drop")
		_ = src.Close()
	}
}
