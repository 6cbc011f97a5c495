package reactor_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
	"github.com/cmrt/cmrt/reactor"
	"github.com/rs/zerolog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, antsIgnore...) }

type fixture struct {
	f   *fakefab.Fabric
	ch  *channel.Channel
	r   *reactor.Reactor
	ids []*id.ID
}

func newFixture(t testing.TB, nids int, opts ...reactor.Option) *fixture {
	t.Helper()
	fx := &fixture{f: fakefab.New("fake", false)}
	var err error
	if fx.ch, err = channel.New(channel.WithFabric(fx.f)); err != nil {
		t.Fatal(err)
	}
	if fx.r, err = reactor.New(opts...); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < nids; k++ {
		cm, err := id.Create(fx.ch, k, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		fx.ids = append(fx.ids, cm)
	}
	t.Cleanup(func() {
		if err := fx.r.Close(context.Background()); err != nil {
			t.Errorf("reactor close: %v", err)
		}
		for _, cm := range fx.ids {
			_ = cm.Destroy()
		}
		if err := fx.ch.Close(); err != nil {
			t.Errorf("channel close: %v", err)
		}
	})
	return fx
}

func ep(cm *id.ID) *fakefab.Endpoint { return cm.Endpoint().(*fakefab.Endpoint) }

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestInlineDispatchByType(t *testing.T) {
	fx := newFixture(t, 1)
	var mu sync.Mutex
	var got []id.EventType
	mux := handlers.New().
		OnAddrChange(func(ev *id.Event) error { mu.Lock(); got = append(got, ev.Type); mu.Unlock(); return nil }).
		DefaultFunc(func(ev *id.Event) error { mu.Lock(); got = append(got, -ev.Type); mu.Unlock(); return nil })
	if err := fx.r.Register(fx.ch, mux); err != nil {
		t.Fatal(err)
	}
	if err := fx.r.Register(fx.ch, mux); !errors.Is(err, reactor.ErrRegistered) {
		t.Fatalf("second Register = %v", err)
	}
	cm := fx.ids[0]
	ep(cm).Inject(id.EventAddrChange, 0, nil)
	ep(cm).Inject(id.EventUser, 0, nil)
	waitFor(t, "two events", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	if got[0] != id.EventAddrChange || got[1] != -id.EventUser {
		t.Fatalf("dispatched %v", got)
	}
	// Acknowledged after the handlers: destroy does not wait.
	if err := cm.Destroy(); err != nil {
		t.Fatal(err)
	}
	if s := fx.r.Stats(); s.Events != 2 || s.Pending != 0 || s.Channels != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestPoolKeepsPerIDOrder interleaves events of many ids and checks that
// each id's handler sees its events one at a time, in order, while ids run
// in parallel.
func TestPoolKeepsPerIDOrder(t *testing.T) {
	const nids, per = 40, 150
	fx := newFixture(t, nids, reactor.WithWorkers(8))
	var (
		mu       sync.Mutex
		next     = make(map[*id.ID]int)
		running  = make(map[*id.ID]bool)
		fail     string
		inflight atomic.Int32
		peak     atomic.Int32
		total    atomic.Int32
	)
	h := handlers.Func(func(ev *id.Event) error {
		mu.Lock()
		if running[ev.ID] {
			fail = "two handlers of one id at once"
		}
		running[ev.ID] = true
		if ev.Status != next[ev.ID] && fail == "" {
			fail = "out of order"
		}
		next[ev.ID] = ev.Status + 1
		mu.Unlock()
		n := inflight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if rand.Intn(4) == 0 {
			time.Sleep(50 * time.Microsecond)
		}
		inflight.Add(-1)
		mu.Lock()
		running[ev.ID] = false
		mu.Unlock()
		total.Add(1)
		return nil
	})
	if err := fx.r.Register(fx.ch, h); err != nil {
		t.Fatal(err)
	}
	for s := 0; s < per; s++ {
		for _, k := range rand.Perm(nids) {
			ep(fx.ids[k]).Inject(id.EventUser, int32(s), nil)
		}
	}
	waitFor(t, "all events", func() bool { return total.Load() == nids*per })
	mu.Lock()
	defer mu.Unlock()
	if fail != "" {
		t.Fatal(fail)
	}
	for cm, n := range next {
		if n != per {
			t.Fatalf("id %d saw %d events", cm.Handle(), n)
		}
	}
	if peak.Load() < 2 {
		t.Fatalf("no parallelism across ids (peak %d)", peak.Load())
	}
}

// Destroy from another goroutine while a handler of the id runs (inline or
// on a worker) returns without waiting for it, nor for the event queued
// behind it; Done is closed once the handler returned, and the queued
// event's handler never runs.
func TestDestroyWhileHandlerRunsReturnsAndDoneWaits(t *testing.T) {
	for _, workers := range []int{0, 2} {
		fx := newFixture(t, 1, reactor.WithWorkers(workers))
		release := make(chan struct{})
		entered := make(chan struct{})
		var calls atomic.Int32
		_ = fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
			if calls.Add(1) == 1 {
				close(entered)
				<-release
			}
			return nil
		}))
		cm := fx.ids[0]
		ep(cm).Inject(id.EventUser, 0, nil)
		ep(cm).Inject(id.EventUser, 1, nil)
		<-entered
		returned := make(chan struct{})
		go func() { _ = cm.Destroy(); close(returned) }()
		select {
		case <-returned:
		case <-time.After(2 * time.Second):
			close(release)
			t.Fatalf("workers=%d: Destroy waited for the running handler", workers)
		}
		select {
		case <-cm.Done():
			close(release)
			t.Fatalf("workers=%d: Done closed while the handler runs", workers)
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		select {
		case <-cm.Done():
		case <-time.After(2 * time.Second):
			t.Fatalf("workers=%d: Done not closed after the handler returned", workers)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("workers=%d: %d handler calls, want 1 (the second event is the destroyed id's)", workers, n)
		}
	}
}

// A handler that destroys its own id returns (inline and on workers) while
// the id's next event is queued behind it; that event is acknowledged
// without its handler, Done closes, and no goroutine or descriptor is left.
func TestDestroyFromOwnHandlerDoesNotWait(t *testing.T) {
	for _, workers := range []int{0, 2} {
		fds := fdCount(t)
		f := fakefab.New("fake", false)
		ch, err := channel.New(channel.WithFabric(f))
		if err != nil {
			t.Fatal(err)
		}
		r, err := reactor.New(reactor.WithWorkers(workers))
		if err != nil {
			t.Fatal(err)
		}
		cm, err := id.Create(ch, nil, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		// Both events wait in the channel before it is registered: the loop
		// takes them in one batch, so the second is queued behind the first
		// (in the id's mailbox, or in the inline batch) when its handler
		// destroys the id.
		ep(cm).Inject(id.EventUser, 0, nil)
		ep(cm).Inject(id.EventUser, 1, nil)
		destroyed := make(chan error, 1)
		var calls atomic.Int32
		_ = r.Register(ch, handlers.Func(func(ev *id.Event) error {
			if calls.Add(1) == 1 {
				destroyed <- ev.ID.Destroy()
			}
			return nil
		}))
		select {
		case err := <-destroyed:
			if err != nil {
				t.Fatalf("workers=%d: Destroy: %v", workers, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("workers=%d: Destroy from the id's own handler did not return", workers)
		}
		select {
		case <-cm.Done():
		case <-time.After(5 * time.Second):
			t.Fatalf("workers=%d: Done not closed", workers)
		}
		if n := calls.Load(); n != 1 {
			t.Fatalf("workers=%d: %d handler calls, want 1", workers, n)
		}
		if err := r.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := ch.Close(); err != nil {
			t.Fatal(err)
		}
		if n := fdCount(t); n != fds {
			t.Errorf("workers=%d: %d descriptors open, %d before", workers, n, fds)
		}
		goleak.VerifyNone(t, antsIgnore...)
	}
}

func TestDestroyAndUnregisterFromHandler(t *testing.T) {
	for _, workers := range []int{0, 3} {
		fx := newFixture(t, 2, reactor.WithWorkers(workers))
		var seen atomic.Int32
		_ = fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
			seen.Add(1)
			if ev.Status == 1 {
				if err := ev.ID.Destroy(); err != nil {
					return err
				}
				return fx.r.Unregister(fx.ch)
			}
			return nil
		}))
		e0 := ep(fx.ids[0]) // before the first handler can destroy the id
		e0.Inject(id.EventUser, 1, nil)
		e0.Inject(id.EventUser, 2, nil) // dropped by Destroy or skipped
		waitFor(t, "destroy from handler", func() bool { return fx.ids[0].State() == id.StateDestroyed })
		waitFor(t, "unregister", func() bool { return fx.r.Stats().Channels == 0 })
		// The channel is no longer read: a new event stays queued.
		ep(fx.ids[1]).Inject(id.EventUser, 3, nil)
		time.Sleep(20 * time.Millisecond)
		fx.ch.SetNonblocking(true)
		ev, err := fx.ch.GetEvent()
		if err != nil || ev.Status != 3 {
			t.Fatalf("workers=%d: event after Unregister: %v %v", workers, ev, err)
		}
		_ = ev.Ack()
		if seen.Load() != 1 {
			t.Fatalf("workers=%d: %d handler calls, want 1", workers, seen.Load())
		}
	}
}

func TestPanicAndErrorReported(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	onErr := func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }
	for _, workers := range []int{0, 2} {
		errs = nil
		fx := newFixture(t, 1, reactor.WithWorkers(workers), reactor.WithErrorHandler(onErr))
		boom := errors.New("boom")
		_ = fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
			switch ev.Status {
			case 1:
				panic("kaboom")
			case 2:
				return boom
			}
			return nil
		}))
		cm := fx.ids[0]
		ep(cm).Inject(id.EventUser, 1, nil)
		ep(cm).Inject(id.EventUser, 2, nil)
		ep(cm).Inject(id.EventUser, 0, nil)
		waitFor(t, "three events", func() bool { s := fx.r.Stats(); return s.Events == 3 && s.Pending == 0 })
		mu.Lock()
		var pe *reactor.PanicError
		var he *reactor.HandlerError
		if len(errs) != 2 || !errors.As(errs[0], &pe) || pe.Value != "kaboom" || !errors.As(errs[1], &he) ||
			!errors.Is(errs[1], boom) || he.ID != cm.Handle() || he.Type != id.EventUser {
			t.Fatalf("workers=%d: errors %v", workers, errs)
		}
		mu.Unlock()
		if s := fx.r.Stats(); s.Panics != 1 || s.Errors != 1 {
			t.Fatalf("stats %+v", s)
		}
		if hung := destroyHangs(cm); hung {
			t.Fatal("an event stayed unacknowledged")
		}
	}
}

// TestPanicsMidBatch: handlers that panic in the middle of a batch (the
// first event, the last, and events between) are each reported with their
// event's id and type, and the batch goes on: every event is handled once,
// each id's in order (inline: the channel's order), the accounting is
// balanced and the reactor keeps reading. The reactor recovers once per
// batch, not per event (finding 27), so this is the case its restart
// serves.
func TestPanicsMidBatch(t *testing.T) {
	const n = 12
	for _, workers := range []int{0, 2} {
		var mu sync.Mutex
		var errs []error
		var seen []int
		fx := newFixture(t, 2, reactor.WithWorkers(workers),
			reactor.WithErrorHandler(func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }))
		for k := 0; k < n; k++ { // queued before Register: one readiness report, one batch inline
			ep(fx.ids[k%2]).Inject(id.EventUser, int32(k), nil)
		}
		if err := fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
			mu.Lock()
			seen = append(seen, ev.Status)
			mu.Unlock()
			if ev.Status < n && (ev.Status%3 == 0 || ev.Status == n-1) {
				panic(ev.Status)
			}
			return nil
		})); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the batch", func() bool { s := fx.r.Stats(); return s.Events == n && s.Pending == 0 })
		ep(fx.ids[0]).Inject(id.EventUser, n, nil) // the loop reads on
		waitFor(t, "one more event", func() bool { s := fx.r.Stats(); return s.Events == n+1 && s.Pending == 0 })
		mu.Lock()
		if len(seen) != n+1 {
			t.Fatalf("workers=%d: handled %v", workers, seen)
		}
		last := map[int]int{0: -2, 1: -1}
		for _, st := range seen {
			if st != n && st != last[st%2]+2 {
				t.Fatalf("workers=%d: id %d's events out of order: %v", workers, st%2, seen)
			}
			last[st%2] = st
		}
		if workers == 0 {
			for k, st := range seen {
				if st != k {
					t.Fatalf("inline: events out of the channel's order: %v", seen)
				}
			}
		}
		want := map[int]bool{0: true, 3: true, 6: true, 9: true, 11: true}
		for _, err := range errs {
			var pe *reactor.PanicError
			if !errors.As(err, &pe) {
				t.Fatalf("workers=%d: error %v", workers, err)
			}
			st, _ := pe.Value.(int)
			if !want[st] || pe.ID != fx.ids[st%2].Handle() || pe.Type != id.EventUser {
				t.Fatalf("workers=%d: %v (id %d type %v value %v)", workers, pe, pe.ID, pe.Type, pe.Value)
			}
			delete(want, st)
		}
		mu.Unlock()
		if len(want) != 0 {
			t.Fatalf("workers=%d: panics not reported: %v", workers, want)
		}
		if s := fx.r.Stats(); s.Panics != 5 || s.Errors != 0 {
			t.Fatalf("workers=%d: stats %+v", workers, s)
		}
		for _, cm := range fx.ids {
			if destroyHangs(cm) {
				t.Fatalf("workers=%d: an event stayed unacknowledged", workers)
			}
		}
	}
}

func destroyHangs(cm *id.ID) bool {
	done := make(chan struct{})
	go func() { _ = cm.Destroy(); close(done) }()
	select {
	case <-done:
		return false
	case <-time.After(2 * time.Second):
		return true
	}
}

func TestOverloadPausesWithoutLoss(t *testing.T) {
	const n = 300
	var overloads atomic.Int32
	fx := newFixture(t, 10, reactor.WithWorkers(2), reactor.WithMaxPending(8),
		reactor.WithErrorHandler(func(err error) {
			if errors.Is(err, reactor.ErrOverload) {
				overloads.Add(1)
			}
		}))
	seen := make([]atomic.Int32, n)
	_ = fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
		seen[ev.Status].Add(1)
		time.Sleep(100 * time.Microsecond)
		return nil
	}))
	for k := 0; k < n; k++ {
		ep(fx.ids[k%10]).Inject(id.EventUser, int32(k), nil)
	}
	waitFor(t, "every event", func() bool { s := fx.r.Stats(); return s.Events == n && s.Pending == 0 })
	for k := range seen {
		if c := seen[k].Load(); c != 1 {
			t.Fatalf("event %d handled %d times", k, c)
		}
	}
	if overloads.Load() == 0 || fx.r.Stats().Overloads == 0 {
		t.Fatal("no overload reported with 8 pending allowed and slow handlers")
	}
	if p := fx.r.Stats().Pending; p != 0 {
		t.Fatalf("pending %d", p)
	}
}

func TestCloseWaitsForInflightAndIsIdempotent(t *testing.T) {
	fx := newFixture(t, 1, reactor.WithWorkers(1))
	release := make(chan struct{})
	entered := make(chan struct{})
	var finished atomic.Bool
	_ = fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
		close(entered)
		<-release
		finished.Store(true)
		return nil
	}))
	ep(fx.ids[0]).Inject(id.EventUser, 0, nil)
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- fx.r.Close(context.Background()) }()
	select {
	case <-closed:
		t.Fatal("Close returned while a handler ran")
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	if err := <-closed; err != nil || !finished.Load() {
		t.Fatalf("Close = %v, handler finished %v", err, finished.Load())
	}
	if err := fx.r.Close(context.Background()); err != nil {
		t.Fatalf("second Close = %v", err)
	}
	if err := fx.r.Register(fx.ch, handlers.New()); !errors.Is(err, reactor.ErrClosed) {
		t.Fatalf("Register after Close = %v", err)
	}
	// Events arriving after Close stay in the channel.
	ep(fx.ids[0]).Inject(id.EventUser, 7, nil)
	fx.ch.SetNonblocking(true)
	ev, err := fx.ch.GetEvent()
	if err != nil || ev.Status != 7 {
		t.Fatalf("event after Close: %v", err)
	}
	_ = ev.Ack()
}

func TestCloseDeadline(t *testing.T) {
	fx := newFixture(t, 1, reactor.WithWorkers(1))
	release := make(chan struct{})
	entered := make(chan struct{})
	_ = fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
		if ev.Status == 0 {
			close(entered)
			<-release
		}
		return nil
	}))
	ep(fx.ids[0]).Inject(id.EventUser, 0, nil)
	ep(fx.ids[0]).Inject(id.EventUser, 1, nil)
	<-entered
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := fx.r.Close(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Close = %v, want DeadlineExceeded", err)
	}
	close(release)
	if destroyHangs(fx.ids[0]) {
		t.Fatal("events left unacknowledged after a timed-out Close")
	}
}

func TestUnregisterUnknown(t *testing.T) {
	fx := newFixture(t, 0)
	if err := fx.r.Unregister(fx.ch); !errors.Is(err, reactor.ErrNotRegistered) {
		t.Fatalf("Unregister = %v", err)
	}
}

// The reactor's log entries carry component=reactor, and the message says
// what happened without a prefix: a handler's panic is logged as "handler
// panicked".
func TestLogEntriesCarryComponent(t *testing.T) {
	var buf syncBuffer
	fx := newFixture(t, 1, reactor.WithLogger(zerolog.New(&buf)))
	done := make(chan struct{})
	_ = fx.r.Register(fx.ch, handlers.Func(func(ev *id.Event) error {
		defer close(done)
		panic("kaboom")
	}))
	ep(fx.ids[0]).Inject(id.EventUser, 0, nil)
	<-done
	waitFor(t, "the panic's log entry", func() bool { return strings.Contains(buf.String(), "kaboom") })
	var e map[string]any
	if err := json.Unmarshal([]byte(strings.SplitN(buf.String(), "\n", 2)[0]), &e); err != nil {
		t.Fatalf("log %q: %v", buf.String(), err)
	}
	if e["component"] != "reactor" || e["message"] != "handler panicked" {
		t.Errorf("log entry %v, want component reactor, message \"handler panicked\"", e)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Register refuses, with EINVAL and without registering, a nil handler, a
// nil func or pointer in a non-nil interface, and a handlers.Mux that
// refused one of its registrations (the same rule: a registration mistake
// is EINVAL, never a panic).
func TestRegisterRefusesNilHandlers(t *testing.T) {
	fx := newFixture(t, 0)
	bad := handlers.New().OnEstablished(nil)
	for name, h := range map[string]id.Handler{
		"nil":           nil,
		"nil Func":      handlers.Func(nil),
		"nil *Mux":      (*handlers.Mux)(nil),
		"Mux with Err":  bad,
		"nil in a Func": handlers.Func((func(*id.Event) error)(nil)),
	} {
		if err := fx.r.Register(fx.ch, h); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%s: Register = %v, want EINVAL", name, err)
		}
		if n := fx.r.Stats().Channels; n != 0 {
			t.Fatalf("%s: %d channels registered after a refusal", name, n)
		}
	}
	if err := fx.r.Register(fx.ch, handlers.New().OnEstablished(func(*id.Event) error { return nil })); err != nil {
		t.Fatalf("a good Mux: %v", err)
	}
	if err := fx.r.RegisterCQ(nil, reactor.CompletionFunc(nil)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("RegisterCQ(nil, nil func) = %v, want EINVAL", err)
	}
}

// slowNotifier is a channel whose OnClose (which Register calls while it
// records the registration) takes a while, as a registering goroutine that
// loses its CPU would.
type slowNotifier struct {
	*channel.Channel
	delay time.Duration
}

func (s slowNotifier) OnClose(f func()) (stop func() bool) {
	time.Sleep(s.delay)
	return s.Channel.OnClose(f)
}

// TestRegisterFullChannelNoSpin registers a channel with events queued
// while the registering goroutine is held up after the descriptor joined
// the epoll set: the loop must not spin on the channel's readiness while
// it has no handler for it (it used to call epoll_wait in a loop until the
// registration's attach task came: a CPU's worth for as long as the
// registering goroutine was held up).
func TestRegisterFullChannelNoSpin(t *testing.T) {
	fx := newFixture(t, 1)
	for k := 0; k < 8; k++ {
		ep(fx.ids[0]).Inject(id.EventUser, 0, nil)
	}
	var got atomic.Int32
	h := handlers.Func(func(*id.Event) error { got.Add(1); return nil })
	const delay = 200 * time.Millisecond
	ch := slowNotifier{fx.ch, delay}
	before := cpuTime()
	if err := fx.r.Register(ch, h); err != nil {
		t.Fatal(err)
	}
	used := cpuTime() - before
	waitFor(t, "the queued events", func() bool { return got.Load() == 8 })
	// A spinning loop uses most of a CPU for the whole delay; an idle one
	// a few milliseconds at most.
	if used > delay/4 {
		t.Fatalf("the process used %v of CPU while Register was held up for %v: the loop spun", used, delay)
	}
	if err := fx.r.Unregister(ch); err != nil {
		t.Fatal(err)
	}
}
