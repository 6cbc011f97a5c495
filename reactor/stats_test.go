package reactor_test

import (
	"context"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/fakefab"
	"github.com/cmrt/cmrt/reactor"
)

// TestHandlerLatency checks that the reactor times one handler in
// LatencySampling, chosen by the event's journal sequence number, and puts
// each in the bucket of its duration: with a journal of its own the id's
// create is record 1 and its 2*LatencySampling events the records after
// it, of which two are timed. Only those two handlers nap, so that their
// buckets are known.
func TestHandlerLatency(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
	}{{"inline", 0}, {"pool", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			const events, nap = 2 * reactor.LatencySampling, 2 * time.Millisecond
			f := fakefab.New("fake", false)
			ch, err := channel.New(channel.WithFabric(f))
			if err != nil {
				t.Fatal(err)
			}
			defer ch.Close()
			r, err := reactor.New(reactor.WithWorkers(tc.workers))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			cm, err := id.Create(ch, nil, id.PSTCP, id.WithJournal(journal.New(2*events)))
			if err != nil {
				t.Fatal(err)
			}
			defer cm.Destroy()
			done := make(chan struct{}, events)
			if err := r.Register(ch, handlers.Func(func(ev *id.Event) error {
				if ev.Seq%reactor.LatencySampling == 0 {
					time.Sleep(nap)
				}
				done <- struct{}{}
				return nil
			})); err != nil {
				t.Fatal(err)
			}
			for k := 0; k < events; k++ {
				ep(cm).Inject(id.EventUser, 0, nil)
			}
			for k := 0; k < events; k++ {
				select {
				case <-done:
				case <-time.After(10 * time.Second):
					t.Fatalf("%d of %d events handled", k, events)
				}
			}
			// The last handler's time is recorded after it returns.
			waitFor(t, "the last timing", func() bool { return r.HandlerLatency().Count == events/reactor.LatencySampling })
			l := r.HandlerLatency()
			if len(l.Bounds) != 21 || l.Bounds[0] != 1024*time.Nanosecond || l.Bounds[20] != 1<<30*time.Nanosecond || len(l.Counts) != len(l.Bounds)+1 {
				t.Fatalf("bounds %v, %d counts", l.Bounds, len(l.Counts))
			}
			if l.Sum < 2*nap {
				t.Errorf("sum %v, want at least %v", l.Sum, 2*nap)
			}
			var n uint64
			for k, c := range l.Counts {
				n += c
				if c != 0 && k < len(l.Bounds) && l.Bounds[k] < nap {
					t.Errorf("%d handlers of at least %v counted at most %v", c, nap, l.Bounds[k])
				}
			}
			if n != l.Count {
				t.Errorf("counts add up to %d, Count %d", n, l.Count)
			}
		})
	}
}
