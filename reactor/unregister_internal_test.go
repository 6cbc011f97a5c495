package reactor

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
	"github.com/cmrt/cmrt/poll"
)

// plainChannel is a channel whose source cannot stop its takes (it hides
// fabric.GuardedSource), as a third-party fabric's might not: the reactor
// marks its takes itself.
type plainChannel struct {
	Channel
	src plainSource
}

type plainSource struct{ fabric.EventSource }

func (c *plainChannel) Source() fabric.EventSource { return c.src }

// takeCQ is a completion queue whose eventfd is readable while it holds
// completions.
type takeCQ struct {
	efd *poll.EventFD
	mu  sync.Mutex
	wcs []id.WC
}

func (c *takeCQ) Fd() int                    { return c.efd.Fd() }
func (c *takeCQ) Wait(context.Context) error { return nil }

func (c *takeCQ) push(wc id.WC) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wcs = append(c.wcs, wc)
	if len(c.wcs) == 1 {
		_ = c.efd.Add(1)
	}
}

func (c *takeCQ) Poll(out []id.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := copy(out, c.wcs)
	c.wcs = c.wcs[n:]
	if n > 0 && len(c.wcs) == 0 {
		_, _ = c.efd.Read()
	}
	return n
}

func (c *takeCQ) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.wcs)
}

// takeSubject is what TestUnregisterWaitsForATakeInProgress registers:
// a channel or a completion queue, with how to queue an item numbered k,
// how many are left queued, and how to register and unregister it.
type takeSubject struct {
	queue      func(t *testing.T, k uint64)
	left       func() int
	register   func(r *Reactor, seen func(k uint64)) error
	unregister func(r *Reactor) error
}

func channelSubject(t *testing.T, plain bool) takeSubject {
	dc := newDrainChannel(t, fakefab.New("fake", false), 1)
	var ch Channel = dc.ch
	if plain {
		ch = &plainChannel{Channel: dc.ch, src: plainSource{dc.ch.Source()}}
	}
	return takeSubject{
		queue: func(t *testing.T, k uint64) {
			r := fabric.RawEvent{Type: id.EventUser, Arg: k}
			if !dc.ids[0].Endpoint().(*fakefab.Endpoint).InjectRaw(&r) {
				t.Fatalf("inject %d", k)
			}
		},
		left: func() int { return dc.ch.Source().(*fakefab.Source).Len() },
		register: func(r *Reactor, seen func(uint64)) error {
			return r.Register(ch, handlers.Func(func(ev *id.Event) error { seen(ev.Arg); return nil }))
		},
		unregister: func(r *Reactor) error { return r.Unregister(ch) },
	}
}

func cqSubject(t *testing.T) takeSubject {
	efd, err := poll.NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = efd.Close() })
	cq := &takeCQ{efd: efd}
	return takeSubject{
		queue: func(_ *testing.T, k uint64) { cq.push(id.WC{WRID: k}) },
		left:  cq.len,
		register: func(r *Reactor, seen func(uint64)) error {
			return r.RegisterCQ(cq, CompletionFunc(func(wc *id.WC) error { seen(wc.WRID); return nil }))
		},
		unregister: func(r *Reactor) error { return r.UnregisterCQ(cq) },
	}
}

// TestUnregisterWaitsForATakeInProgress: Unregister (UnregisterCQ), called
// from another goroutine while the loop runs the handlers inline, returns
// only once the loop's take in progress is over, so that what is queued
// after it returns stays queued, as Unregister promises ("once it returns,
// the reactor takes no further event from the channel"): for a channel
// whose source checks the registration's mark under its own lock
// (fabric.GuardedSource), for one whose source cannot (the loop marks its
// takes), and for a completion queue (polled outside the inline mark, so
// that UnregisterCQ waits for the loop's task: this case keeps it so). Before
// the fix Unregister returned at once (the loop's call does not wait while
// the loop runs inline handlers, one of which may be the caller), and the
// loop, already past its check of the mark, took the event queued next and
// handed it to the old handler: make bench's dispatch benchmark, which
// unregisters and queues the next round's events at once, hung once in
// thousands of rounds, its count of handled events one past the goal it
// had just set.
func TestUnregisterWaitsForATakeInProgress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subject func(*testing.T) takeSubject
	}{
		{"guarded channel", func(t *testing.T) takeSubject { return channelSubject(t, false) }},
		{"plain channel", func(t *testing.T) takeSubject { return channelSubject(t, true) }},
		{"completion queue", cqSubject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.subject(t)
			r := drainReactor(t, 0, 64)
			s.queue(t, 0)

			// The loop's second take, after item 0's handler, stops
			// between the loop's check of the mark and the take until
			// released (the completion queue's first poll has taken item
			// 0: its handler runs after the poll).
			reached, release := make(chan struct{}), make(chan struct{})
			var takes atomic.Int32
			testHookTake = func() {
				if takes.Add(1) == 2 {
					close(reached)
					<-release
				}
			}
			t.Cleanup(func() { testHookTake = nil })
			var (
				mu  sync.Mutex
				got []uint64
			)
			seen := func(k uint64) {
				mu.Lock()
				got = append(got, k)
				mu.Unlock()
			}
			if err := s.register(r, seen); err != nil {
				t.Fatal(err)
			}
			if tc.name == "completion queue" {
				// Its second poll comes with the next readiness.
				waitHandled(t, &mu, &got, 1)
				s.queue(t, 1)
			}
			<-reached
			unregistered := make(chan error, 1)
			go func() { unregistered <- s.unregister(r) }()
			select {
			case err := <-unregistered: // returned with the take in progress, or before it checks
				if err != nil {
					t.Fatal(err)
				}
				s.queue(t, 7)
				s.queue(t, 8)
				close(release)
			case <-time.After(50 * time.Millisecond):
				close(release)
				if err := <-unregistered; err != nil {
					t.Fatal(err)
				}
				s.queue(t, 7)
				s.queue(t, 8)
			}
			r.looksForTest() // a task: it runs once the loop's drain is over
			mu.Lock()
			defer mu.Unlock()
			for _, k := range got {
				if k == 7 || k == 8 {
					t.Fatalf("handled %v: items 7 and 8 were queued after Unregister returned", got)
				}
			}
			if n := s.left(); n < 2 {
				t.Errorf("%d items left queued, want at least the 2 queued after Unregister returned", n)
			}
		})
	}
}

// waitHandled waits until *got holds n items.
func waitHandled(t *testing.T, mu *sync.Mutex, got *[]uint64, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		k := len(*got)
		mu.Unlock()
		if k >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d handled items", n)
		}
		time.Sleep(time.Millisecond)
	}
}
