package reactor_test

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// TestFailedRequestHandlerRejects (issue 18 item 8): a CONNECT_REQUEST
// handler that panics, or returns an error, without answering: the client
// is rejected at once (it used to wait for its connect timeout), the new
// id is destroyed (it leaked), and the server's channel closes (it failed
// with EBUSY). The panic and the error are still reported.
func TestFailedRequestHandlerRejects(t *testing.T) {
	for _, workers := range []int{0, 2} {
		for _, mode := range []string{"panic", "error"} {
			f := soft.New(soft.WithIdleGrace(0))
			sch, cch := newChannel(t, f), newChannel(t, f)
			var mu sync.Mutex
			var reported []error
			r := newReactor(t, reactor.WithWorkers(workers), reactor.WithErrorHandler(func(err error) {
				mu.Lock()
				reported = append(reported, err)
				mu.Unlock()
			}))
			mux := handlers.New().
				OnConnectRequest(func(*id.Event) error {
					if mode == "panic" {
						panic("kaboom")
					}
					return errors.New("no room")
				}).
				DefaultFunc(func(*id.Event) error { return nil })
			if err := r.Register(sch, mux); err != nil {
				t.Fatal(err)
			}
			live := id.Live()
			l, err := id.Create(sch, nil, id.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
				t.Fatal(err)
			}
			if err := l.Listen(0); err != nil {
				t.Fatal(err)
			}
			cli, err := id.Create(cch, nil, id.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			if err := cli.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), l.SrcPort()), time.Second); err != nil {
				t.Fatal(err)
			}
			take(t, cch, id.EventAddrResolved)
			if err := cli.ResolveRoute(time.Second); err != nil {
				t.Fatal(err)
			}
			take(t, cch, id.EventRouteResolved)
			start := time.Now()
			if err := cli.Connect(nil); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ev, err := cch.GetEventContext(ctx)
			cancel()
			if err != nil {
				t.Fatalf("workers=%d %s: no answer to the connect within 2s: %v", workers, mode, err)
			}
			typ := ev.Type
			_ = ev.Ack()
			if typ != id.EventRejected {
				t.Fatalf("workers=%d %s: client got %s after %v, want REJECTED", workers, mode, typ, time.Since(start))
			}
			waitFor(t, "the request's id destroyed", func() bool { return id.Live() == live+2 })
			waitFor(t, "the handler's failure reported", func() bool { mu.Lock(); defer mu.Unlock(); return len(reported) > 0 })
			mu.Lock()
			var pe *reactor.PanicError
			var he *reactor.HandlerError
			if len(reported) != 1 || (mode == "panic" && !errors.As(reported[0], &pe)) || (mode == "error" && !errors.As(reported[0], &he)) {
				t.Errorf("workers=%d %s: reported %v", workers, mode, reported)
			}
			mu.Unlock()
			_ = cli.Destroy()
			_ = l.Destroy()
			if err := sch.Close(); err != nil {
				t.Errorf("workers=%d %s: server channel close: %v", workers, mode, err)
			}
			if err := cch.Close(); err != nil {
				t.Error(err)
			}
			f.Quiesce()
		}
	}
}

// TestStaleHandlerEventIsInert (issue 16 bug 1): a handler keeps its event
// past its return (against the docs: the reactor reuses it), and the user
// acknowledges it later, while the reactor's object holds another id's
// event. That must not acknowledge the newer event: its id is not
// finalized (Done) before its handler returns, and the handler's own Ack
// still succeeds.
func TestStaleHandlerEventIsInert(t *testing.T) {
	fx := newFixture(t, 2)
	a, b := fx.ids[0], fx.ids[1]
	var kept atomic.Pointer[id.Event]
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	ownAck := make(chan error, 1)
	if err := fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
		if ev.ID == a {
			kept.Store(ev)
			return nil
		}
		entered <- struct{}{}
		<-release
		ownAck <- ev.Ack()
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	for round := range 10 {
		ep(a).Inject(id.EventUser, int32(round), nil)
		waitFor(t, "a's event handled", func() bool { s := fx.r.Stats(); return kept.Load() != nil && s.Pending == 0 })
		ep(b).Inject(id.EventUser, int32(round), nil)
		<-entered
		stale := kept.Swap(nil)
		if err := stale.Ack(); err != nil && !errors.Is(err, syscall.EINVAL) {
			t.Errorf("round %d: stale Ack = %v, want nil or EINVAL", round, err)
		}
		if round < 9 {
			release <- struct{}{}
			if err := <-ownAck; err != nil {
				t.Fatalf("round %d: b's handler's own Ack = %v after a stale Ack", round, err)
			}
			continue
		}
		// b's event stays unacknowledged until its handler returns: Destroy
		// of b returns at once (a handler of b runs), and b is finalized
		// (Done closed) only once the handler returned.
		if err := b.Destroy(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-b.Done():
			close(release)
			t.Fatal("b finalized while b's handler ran: the stale Ack acknowledged b's event")
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		<-b.Done()
		if err := <-ownAck; err != nil {
			t.Fatalf("b's handler's own Ack = %v", err)
		}
	}
}

// TestOverloadHandlerSeparatesNotices: with WithOverloadHandler, overload
// notices go there and OnError receives only the handlers' failures.
func TestOverloadHandlerSeparatesNotices(t *testing.T) {
	const n = 200
	var overloads, errs atomic.Int32
	fx := newFixture(t, 10, reactor.WithWorkers(2), reactor.WithMaxPending(8),
		reactor.WithOverloadHandler(func() { overloads.Add(1) }),
		reactor.WithErrorHandler(func(err error) {
			if errors.Is(err, reactor.ErrOverload) {
				t.Error("ErrOverload reached OnError although an overload handler is set")
			}
			errs.Add(1)
		}))
	boom := errors.New("boom")
	_ = fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
		time.Sleep(100 * time.Microsecond)
		if ev.Status == 0 {
			return boom
		}
		return nil
	}))
	for k := range n {
		ep(fx.ids[k%10]).Inject(id.EventUser, int32(k), nil)
	}
	waitFor(t, "every event", func() bool { s := fx.r.Stats(); return s.Events == n && s.Pending == 0 })
	if overloads.Load() == 0 || errs.Load() != 1 {
		t.Fatalf("%d overload notices, %d errors (want >0 and 1)", overloads.Load(), errs.Load())
	}
}
