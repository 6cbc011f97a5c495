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

// sink is a test ClaimSink: it takes up to room events into bufs, and
// records each claim.
type sink struct {
	room    int
	bufs    [8]fabric.RawEvent
	n       int // buffers handed out
	claims  []id.Claim
	args    []uint64
	dropped int
}

func (s *sink) ClaimInto() *fabric.RawEvent {
	if s.room == 0 {
		return nil
	}
	s.room--
	s.n++
	return &s.bufs[s.n-1]
}

func (s *sink) Claimed(raw *fabric.RawEvent, c id.Claim, ok bool) {
	if raw != &s.bufs[s.n-1] {
		panic("Claimed with another buffer than ClaimInto's last")
	}
	if !ok {
		s.dropped++
		s.n-- // the buffer is ours again
		return
	}
	s.claims = append(s.claims, c)
	s.args = append(s.args, raw.Arg)
}

// TestClaimerBatch: a Claimer moves a fakefab source's events in order
// into its sink's buffers and claims each, stops at its sink's refusal and before
// a CONNECT_REQUEST (left for TakeClaim), and reports a source without a
// batch method; every claim delivered and handled leaves the ids'
// accounting balanced (Destroy does not wait).
func TestClaimerBatch(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	a := newID(t, ch, id.PSTCP)
	b := newID(t, ch, id.PSTCP)
	c := newID(t, ch, id.PSTCP)
	l := newID(t, ch, id.PSTCP)
	if err := l.Listen(1); err != nil {
		t.Fatal(err)
	}
	user := func(i *id.ID, arg uint64) {
		if !ep(i).InjectRaw(&fabric.RawEvent{Type: id.EventUser, Arg: arg}) {
			t.Fatal("inject failed")
		}
	}
	user(a, 1)
	user(c, 2)
	user(b, 3)
	user(a, 4)
	ep(l).InjectRequest(nil)
	user(b, 5)
	if err := c.Destroy(); err != nil {
		t.Fatal(err)
	}
	s := &sink{room: 2}
	cl := id.NewClaimer(s)
	src := ch.Source()
	// c's event went with its endpoint (fakefab drops a destroyed
	// endpoint's queued events).
	if n, batch := cl.Claim(src, 8); !batch || n != 2 || s.dropped != 0 || len(s.claims) != 2 {
		t.Fatalf("Claim with room for 2 = %d, %v; %d dropped, %d claimed; want 2 moved and claimed", n, batch, s.dropped, len(s.claims))
	}
	s.room = 8
	if n, _ := cl.Claim(src, 8); n != 1 || len(s.claims) != 3 {
		t.Fatalf("Claim up to the request = %d, %d claimed; want 1, 3", n, len(s.claims))
	}
	if n, _ := cl.Claim(src, 8); n != 0 {
		t.Fatalf("Claim with a CONNECT_REQUEST first = %d, want 0", n)
	}
	var raw fabric.RawEvent
	ev, _, err := id.TakeClaim(src, &raw, journal.Now())
	if err != nil || ev == nil || ev.Type != id.EventConnectRequest {
		t.Fatalf("TakeClaim after the batch = %v, %v; want the request", ev, err)
	}
	_ = ev.Handle(handlers.Func(func(*id.Event) error { return errors.New("refused") })) // rejects and destroys the new id
	if n, _ := cl.Claim(src, 8); n != 1 || len(s.claims) != 4 {
		t.Fatalf("Claim after the request = %d, %d claimed; want 1, 4", n, len(s.claims))
	}
	if want := []uint64{1, 3, 4, 5}; len(s.args) != 4 || s.args[0] != want[0] || s.args[1] != want[1] || s.args[2] != want[2] || s.args[3] != want[3] {
		t.Fatalf("claimed args %v, want %v", s.args, want)
	}
	owners := []*id.ID{a, b, a, b}
	for k, c := range s.claims {
		if c.Owner() != owners[k] {
			t.Fatalf("claim %d owned by %d, want %d", k, c.Owner().Handle(), owners[k].Handle())
		}
		ev := id.DeliverClaimed(c, src, &s.bufs[k], journal.Now())
		if ev == nil || ev.ID != owners[k] {
			t.Fatalf("claim %d delivered %v", k, ev)
		}
		if err := ev.Handle(handlers.Func(func(*id.Event) error { return nil })); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := id.TakeClaim(src, &raw, journal.Now()); !errors.Is(err, syscall.EAGAIN) {
		t.Fatalf("TakeClaim of the emptied source = %v, want EAGAIN", err)
	}
	for _, i := range []*id.ID{a, b, l} {
		if blocked, _ := blocks(func() { _ = i.Destroy() }, 2*time.Second); blocked {
			t.Fatalf("Destroy of id %d waits: a claim's acknowledgement was not counted", i.Handle())
		}
	}
	if n, batch := cl.Claim(noBatch{src}, 8); batch || n != 0 {
		t.Fatalf("Claim of a source without NextEach = %d, %v", n, batch)
	}
}

// noBatch hides a source's NextEach.
type noBatch struct{ fabric.EventSource }
