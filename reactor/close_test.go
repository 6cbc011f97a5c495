package reactor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// TestCloseDeadlineWithBlockedHandler (issue 18 item 7): Close(ctx) returns
// ctx's error at its deadline while a handler blocks, inline as with
// workers (inline, it used to wait for the handler however long); nothing
// leaks: once the handler returns the loop releases its descriptors, and a
// second Close waits for that and returns nil.
func TestCloseDeadlineWithBlockedHandler(t *testing.T) {
	for _, workers := range []int{0, 2} {
		fx := newFixture(t, 1, reactor.WithWorkers(workers))
		release := make(chan struct{})
		entered := make(chan struct{})
		var handled []int
		if err := fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
			handled = append(handled, ev.Status)
			if ev.Status == 0 {
				close(entered)
				<-release
			}
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		base := fdCount(t)
		ep(fx.ids[0]).Inject(id.EventUser, 0, nil)
		<-entered
		ep(fx.ids[0]).Inject(id.EventUser, 1, nil) // taken or not: never handled after Close
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		start := time.Now()
		closed := make(chan error, 1)
		go func() { closed <- fx.r.Close(ctx) }()
		var err error
		select {
		case err = <-closed:
		case <-time.After(5 * time.Second):
			close(release)
			cancel()
			<-closed
			t.Fatalf("workers=%d: Close with a 100ms deadline had not returned after 5s", workers)
		}
		cancel()
		if took := time.Since(start); !errors.Is(err, context.DeadlineExceeded) || took > 3*time.Second {
			t.Fatalf("workers=%d: Close = %v after %v, want DeadlineExceeded at the deadline", workers, err, took)
		}
		if err := fx.r.Register(fx.ch, handlers.New()); !errors.Is(err, reactor.ErrClosed) {
			t.Fatalf("workers=%d: Register after Close = %v", workers, err)
		}
		close(release)
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		err = fx.r.Close(ctx)
		cancel()
		if err != nil {
			t.Fatalf("workers=%d: second Close = %v", workers, err)
		}
		// The loop's epoll descriptor, its waker and its duplicate of the
		// channel's descriptor are closed.
		if n := fdCount(t); n > base-3 {
			t.Errorf("workers=%d: %d descriptors open, want at most %d", workers, n, base-3)
		}
		if len(handled) != 1 {
			t.Errorf("workers=%d: handled %v after Close, want [0]", workers, handled)
		}
		if destroyHangs(fx.ids[0]) {
			t.Fatalf("workers=%d: an event left unacknowledged", workers)
		}
	}
}
