package reactor

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// drainChannel is a channel of the fake fabric with ids on it, for the
// drain tests.
type drainChannel struct {
	ch  *channel.Channel
	ids []*id.ID
}

func newDrainChannel(t *testing.T, f *fakefab.Fabric, nids int) *drainChannel {
	t.Helper()
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	dc := &drainChannel{ch: ch}
	for k := 0; k < nids; k++ {
		cm, err := id.Create(ch, k, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		dc.ids = append(dc.ids, cm)
	}
	t.Cleanup(func() {
		for _, cm := range dc.ids {
			_ = cm.Destroy()
		}
		_ = ch.Close()
	})
	return dc
}

// inject queues n USER events on dc's ids, round robin; each event's Arg
// is its index k, so that the handler can check the order.
func (dc *drainChannel) inject(t *testing.T, n int) {
	t.Helper()
	for k := 0; k < n; k++ {
		ep := dc.ids[k%len(dc.ids)].Endpoint().(*fakefab.Endpoint)
		r := fabric.RawEvent{Type: id.EventUser, Arg: uint64(k)}
		if !ep.InjectRaw(&r) {
			t.Fatalf("inject %d", k)
		}
	}
}

// looksForTest returns the loop's epoll waits so far, read by a task on
// the loop (not with call, which does not wait while the loop runs
// inline handlers: the last event's may not have returned yet).
func (r *Reactor) looksForTest() uint64 {
	n := make(chan uint64, 1)
	r.post(func() { n <- r.l.Looks() })
	return <-n
}

// drainReactor is a reactor with the given workers (0: inline) and batch,
// room for every event the drain tests queue, closed when the test ends.
func drainReactor(t *testing.T, workers, batch int) *Reactor {
	t.Helper()
	r, err := New(WithWorkers(workers), WithBatch(batch), WithMaxPending(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return r
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestAloneDrainsWithoutWaits: a reactor with one channel and nothing else
// to do takes a full channel's events batch after batch without waiting
// for a readiness report between them (an epoll_wait per Batch events was
// a twentieth of an inline dispatch), inline and on a pool; every event is
// handled once, in order. On the tree before, the loop looked at its epoll
// set at least once per batch: 100 looks for these 800 events.
func TestAloneDrainsWithoutWaits(t *testing.T) {
	const batch, events = 8, 800
	for _, workers := range []int{0, 4} {
		t.Run(map[int]string{0: "inline", 4: "pool"}[workers], func(t *testing.T) {
			r := drainReactor(t, workers, batch)
			dc := newDrainChannel(t, fakefab.New("fake", false), 1)
			dc.inject(t, events)
			var mu sync.Mutex
			var got []uint64
			h := handlers.Func(func(ev *id.Event) error {
				mu.Lock()
				got = append(got, ev.Arg)
				mu.Unlock()
				return nil
			})
			before := r.looksForTest()
			if err := r.Register(dc.ch, h); err != nil {
				t.Fatal(err)
			}
			waitUntil(t, "every event", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) >= events })
			looks := r.looksForTest() - before
			mu.Lock()
			defer mu.Unlock()
			if len(got) != events {
				t.Fatalf("handled %d events, want %d", len(got), events)
			}
			for k, a := range got {
				if a != uint64(k) {
					t.Fatalf("event %d handled as the %dth", a, k)
				}
			}
			// The register's task, the reports that start the drain and
			// the park after it: a few, not one per batch.
			if looks >= events/batch/2 {
				t.Errorf("%d looks at the epoll set for %d events in batches of %d: the loop waited between batches", looks, events, batch)
			}
		})
	}
}

// TestBatchSharesLoop: with two channels full, the loop takes Batch events
// from one, then from the other, in turn (alone does not hold: another
// registration), inline; on a pool (where the handlers' order across
// workers is not the loop's) every event is handled once.
func TestBatchSharesLoop(t *testing.T) {
	const batch, events = 8, 400
	for _, workers := range []int{0, 4} {
		t.Run(map[int]string{0: "inline", 4: "pool"}[workers], func(t *testing.T) {
			r := drainReactor(t, workers, batch)
			f := fakefab.New("fake", false)
			a, b := newDrainChannel(t, f, 1), newDrainChannel(t, f, 1)
			a.inject(t, events)
			b.inject(t, events)
			var mu sync.Mutex
			var order []byte // 'a' or 'b' per handled event
			handler := func(c byte) id.Handler {
				return handlers.Func(func(*id.Event) error { mu.Lock(); order = append(order, c); mu.Unlock(); return nil })
			}
			// Both registered by one task on the loop: their Attach tasks
			// run in the same round, before the look that reports both.
			r.call(func() {
				for _, x := range []struct {
					dc *drainChannel
					c  byte
				}{{a, 'a'}, {b, 'b'}} {
					if err := r.Register(x.dc.ch, handler(x.c)); err != nil {
						t.Error(err)
					}
				}
			})
			waitUntil(t, "every event", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) >= 2*events })
			mu.Lock()
			defer mu.Unlock()
			if len(order) != 2*events {
				t.Fatalf("handled %d events, want %d", len(order), 2*events)
			}
			if workers > 0 {
				return // the workers' order is not the loop's
			}
			left := map[byte]int{'a': events, 'b': events}
			run, prev := 0, byte(0)
			for _, c := range order {
				if c == prev {
					run++
				} else {
					run, prev = 1, c
				}
				left[c]--
				if run > batch && left['a'] > 0 && left['b'] > 0 {
					t.Fatalf("%d events of %c in a row while both channels had events", run, c)
				}
			}
		})
	}
}

// TestTaskEndsRunOfBatches: a channel read alone, batch after batch, gives
// way within a batch to a task: here the Attach of a channel that an
// inline handler registers, whose events then come in turn with the
// first's.
func TestTaskEndsRunOfBatches(t *testing.T) {
	const batch, events = 8, 400
	r := drainReactor(t, 0, batch)
	f := fakefab.New("fake", false)
	a, b := newDrainChannel(t, f, 1), newDrainChannel(t, f, 1)
	a.inject(t, events)
	b.inject(t, events)
	var mu sync.Mutex
	var order []byte // 'a' or 'b' per handled event
	hb := handlers.Func(func(*id.Event) error { mu.Lock(); order = append(order, 'b'); mu.Unlock(); return nil })
	ha := handlers.Func(func(ev *id.Event) error {
		if ev.Arg == 2*batch+2 { // in a's third batch
			if err := r.Register(b.ch, hb); err != nil {
				t.Error(err)
			}
		}
		mu.Lock()
		order = append(order, 'a')
		mu.Unlock()
		return nil
	})
	if err := r.Register(a.ch, ha); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "every event", func() bool { mu.Lock(); defer mu.Unlock(); return len(order) >= 2*events })
	mu.Lock()
	defer mu.Unlock()
	firstB := -1
	for k, c := range order {
		if c == 'b' {
			firstB = k
			break
		}
	}
	// a's third batch ends at 3*batch; the look after it reports a again
	// (one batch) before the Attach task runs, and then b's turn comes
	// at the latest after one more of a's: not once a is empty.
	if firstB < 3*batch || firstB > 5*batch {
		t.Fatalf("b's first event handled after %d of a's, want %d to %d (a's run of batches ends with the batch in which b was registered)", firstB, 3*batch, 5*batch)
	}
}
