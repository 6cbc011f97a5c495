package reactor_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/poll"
	"github.com/cmrt/cmrt/reactor"
)

// fakeCQ is a completion queue whose eventfd is readable while it holds
// completions.
type fakeCQ struct {
	efd *poll.EventFD
	mu  sync.Mutex
	wcs []id.WC
}

func newFakeCQ(t *testing.T) *fakeCQ {
	t.Helper()
	efd, err := poll.NewEventFD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = efd.Close() })
	return &fakeCQ{efd: efd}
}

func (c *fakeCQ) Fd() int { return c.efd.Fd() }

func (c *fakeCQ) push(wc id.WC) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wcs = append(c.wcs, wc)
	if len(c.wcs) == 1 {
		_ = c.efd.Add(1)
	}
}

func (c *fakeCQ) Poll(out []id.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := copy(out, c.wcs)
	c.wcs = c.wcs[n:]
	if n > 0 && len(c.wcs) == 0 {
		_, _ = c.efd.Read()
	}
	return n
}

func (c *fakeCQ) Wait(context.Context) error { return nil }

func TestCompletionQueuesInOrderPerQueue(t *testing.T) {
	for _, workers := range []int{0, 4} {
		r, err := reactor.New(reactor.WithWorkers(workers))
		if err != nil {
			t.Fatal(err)
		}
		const queues, per = 6, 300
		var mu sync.Mutex
		next := make(map[int]uint64)
		var total atomic.Int32
		var bad atomic.Value
		cqs := make([]*fakeCQ, queues)
		for q := range cqs {
			q := q
			cqs[q] = newFakeCQ(t)
			err := r.RegisterCQ(cqs[q], reactor.CompletionFunc(func(wc *id.WC) error {
				mu.Lock()
				if wc.WRID != next[q] {
					bad.Store("out of order")
				}
				next[q] = wc.WRID + 1
				mu.Unlock()
				total.Add(1)
				return nil
			}))
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := r.RegisterCQ(cqs[0], reactor.CompletionFunc(func(*id.WC) error { return nil })); !errors.Is(err, reactor.ErrRegistered) {
			t.Fatalf("duplicate RegisterCQ = %v", err)
		}
		for k := 0; k < per; k++ {
			for q := range cqs {
				cqs[q].push(id.WC{WRID: uint64(k)})
			}
		}
		waitFor(t, "every completion", func() bool { return total.Load() == queues*per })
		if v := bad.Load(); v != nil {
			t.Fatalf("workers=%d: %v", workers, v)
		}
		// Unregistered: completions stay in the queue.
		if err := r.UnregisterCQ(cqs[0]); err != nil {
			t.Fatal(err)
		}
		cqs[0].push(id.WC{WRID: 9999})
		time.Sleep(20 * time.Millisecond)
		var left [4]id.WC
		if n := cqs[0].Poll(left[:]); n != 1 || left[0].WRID != 9999 {
			t.Fatalf("completion after UnregisterCQ: %d", n)
		}
		if err := r.UnregisterCQ(cqs[0]); !errors.Is(err, reactor.ErrNotRegistered) {
			t.Fatalf("second UnregisterCQ = %v", err)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCompletionHandlerErrorsAndPanics(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	r, err := reactor.New(reactor.WithWorkers(2), reactor.WithErrorHandler(func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	cq := newFakeCQ(t)
	boom := errors.New("boom")
	_ = r.RegisterCQ(cq, reactor.CompletionFunc(func(wc *id.WC) error {
		switch wc.WRID {
		case 1:
			return boom
		case 2:
			panic("kaboom")
		}
		return nil
	}))
	for k := uint64(0); k < 4; k++ {
		cq.push(id.WC{WRID: k, Status: id.WCRemAccessErr})
	}
	waitFor(t, "four completions", func() bool { s := r.Stats(); return s.Events == 4 && s.Pending == 0 })
	mu.Lock()
	defer mu.Unlock()
	var ce *reactor.CompletionError
	var pe *reactor.PanicError
	if len(errs) != 2 || !errors.As(errs[0], &ce) || ce.WC.WRID != 1 || !errors.Is(errs[0], boom) ||
		!errors.As(errs[1], &pe) || pe.Value != "kaboom" {
		t.Fatalf("errors %v", errs)
	}
}
