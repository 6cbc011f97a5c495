package id_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// TestStaleAckNeverReachesAnotherEvent is issue 16's repro: a's event is
// acknowledged, b's event arrives, and a second Ack of a's event must fail
// with EINVAL ("already acknowledged") instead of acknowledging b's event
// behind the caller's back (events from GetEvent used to be recycled, so
// the two pointers were often the same object). a's event keeps its
// content, and b's is acknowledged only by its own Ack.
func TestStaleAckNeverReachesAnotherEvent(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	a, b := newID(t, ch, id.PSTCP), newID(t, ch, id.PSTCP)
	defer b.Destroy()
	defer a.Destroy()
	for round := range 50 {
		ep(a).Inject(id.EventUser, int32(round), nil)
		ev1 := expect(t, ch, id.EventUser, a)
		if err := ch.Ack(ev1); err != nil {
			t.Fatal(err)
		}
		ep(b).Inject(id.EventUser, int32(round), nil)
		ev2 := expect(t, ch, id.EventUser, b)
		err := ch.Ack(ev1)
		if !errors.Is(err, syscall.EINVAL) || !strings.Contains(err.Error(), "already acknowledged") {
			t.Fatalf("round %d: second Ack of a's event = %v (same object as b's event: %v), want EINVAL already acknowledged",
				round, err, ev1 == ev2)
		}
		if ev1.ID != a || ev1.Status != round {
			t.Fatalf("round %d: a's acknowledged event now reads id %v status %d", round, ev1.ID, ev1.Status)
		}
		if err := ch.Ack(ev2); err != nil {
			t.Fatalf("round %d: Ack of b's own event = %v", round, err)
		}
	}
}

// TestSynchronousEventKeepsContent: a synchronous id's earlier event, kept
// by the user, still reads what it was after the id's next call (it used
// to be recycled into the next event or cleared), and the user cannot
// acknowledge it.
func TestSynchronousEventKeepsContent(t *testing.T) {
	f := fakefab.New("fake", true)
	cm := newID(t, nil, id.PSTCP, id.WithFabric(f))
	defer cm.Destroy()
	if err := cm.ResolveAddr(anyAddr, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	first := cm.Event()
	if err := cm.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	if first.Type != id.EventAddrResolved || first.ID != cm {
		t.Fatalf("kept ADDR_RESOLVED event now reads %s for %v", first.Type, first.ID)
	}
	if cur := cm.Event(); cur == first || cur.Type != id.EventRouteResolved {
		t.Fatalf("current event %v (the kept one: %v)", cur, cur == first)
	}
	wantErrno(t, first.Ack(), syscall.EINVAL)
}

// TestConcurrentAcksOneWins (issue 18 item 10): two goroutines acknowledge
// the same event at once. Exactly one succeeds, the other gets EINVAL, and
// under -race there is no data race (there was one: the winner recycled
// the event while the loser read it).
func TestConcurrentAcksOneWins(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	for round := range 200 {
		ep(cm).Inject(id.EventUser, int32(round), nil)
		ev := expect(t, ch, id.EventUser, cm)
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, 2)
		for k := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[k] = ev.Ack()
			}()
		}
		close(start)
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case !errors.Is(err, syscall.EINVAL):
				t.Fatalf("round %d: Ack = %v", round, err)
			}
		}
		if ok != 1 {
			t.Fatalf("round %d: %d of 2 concurrent Acks succeeded (%v)", round, ok, errs)
		}
	}
	if hung, _ := blocks(func() { _ = cm.Destroy() }, 2*time.Second); hung {
		t.Fatal("Destroy waits: an acknowledgement was lost")
	}
}

// TestEventErr: Err names the status and wraps the errno a synchronous
// call returns for it.
func TestEventErr(t *testing.T) {
	for _, c := range []struct {
		typ    id.EventType
		status int
		errno  syscall.Errno // 0: nil error
		words  string
	}{
		{id.EventEstablished, 0, 0, ""},
		{id.EventRejected, 28, syscall.ECONNREFUSED, "IB_CM_REJ_CONSUMER_DEFINED"},
		{id.EventRejected, 8, syscall.ECONNREFUSED, "IB_CM_REJ_INVALID_SERVICE_ID"},
		{id.EventRejected, -int(syscall.ECONNRESET), syscall.ECONNREFUSED, "ECONNRESET"},
		{id.EventRejected, -int(syscall.ECONNREFUSED), syscall.ECONNREFUSED, "no listener"},
		{id.EventUnreachable, -int(syscall.ETIMEDOUT), syscall.ETIMEDOUT, "-ETIMEDOUT"},
		{id.EventUnreachable, 2, syscall.ENOENT, "IB_SIDR_REJECT"},
		{id.EventUnreachable, 1, syscall.EPERM, "IB_SIDR_UNSUPPORTED"},
		{id.EventAddrError, -int(syscall.ENETUNREACH), syscall.ENETUNREACH, "ENETUNREACH"},
		{id.EventConnectError, -int(syscall.ECONNRESET), syscall.ECONNRESET, "ECONNRESET"},
	} {
		ev := &id.Event{Type: c.typ, Status: c.status}
		err := ev.Err()
		if c.errno == 0 {
			if err != nil {
				t.Errorf("%s status %d: Err = %v, want nil", c.typ, c.status, err)
			}
			continue
		}
		var e *id.Error
		if !errors.Is(err, c.errno) || !errors.As(err, &e) || e.Op != c.typ.String() || !strings.Contains(err.Error(), c.words) {
			t.Errorf("%s status %d: Err = %v, want %v naming %q", c.typ, c.status, err, c.errno, c.words)
		}
	}
	if (*id.Event)(nil).Err() != nil {
		t.Error("nil event: non-nil Err")
	}
}

// TestSynchronousUDRejectIsNamed: a synchronous call whose event is a UD
// reject (UNREACHABLE status 2) fails with errno 2 as librdmacm's does, and
// its message says what that errno means here.
func TestSynchronousUDRejectIsNamed(t *testing.T) {
	f := fakefab.New("fake", false)
	cm := newID(t, nil, id.PSUDP, id.WithFabric(f))
	defer cm.Destroy()
	ep(cm).Inject(id.EventUnreachable, 2, []byte("go away"))
	err := cm.ResolveAddr(anyAddr, dst, time.Second)
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), "IB_SIDR_REJECT") {
		t.Fatalf("ResolveAddr = %v, want ENOENT naming IB_SIDR_REJECT", err)
	}
	if ev := cm.Event(); !errors.Is(ev.Err(), syscall.ENOENT) || string(ev.PrivateData()) != "go away" {
		t.Fatalf("current event %v, Err %v", ev, ev.Err())
	}
}

// TestEventString: %v of an event is one short line with its type, id,
// status name and private data size, not a dump of its 256-byte buffer.
func TestEventString(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	defer cm.Destroy()
	ep(cm).Inject(id.EventRejected, 28, make([]byte, 100))
	ev := expect(t, ch, id.EventRejected, cm)
	defer ch.Ack(ev)
	s := fmt.Sprintf("%v", ev)
	for _, w := range []string{"RDMA_CM_EVENT_REJECTED", fmt.Sprintf("id=%d", cm.Handle()), "IB_CM_REJ_CONSUMER_DEFINED", "private_data=100B"} {
		if !strings.Contains(s, w) {
			t.Errorf("%%v = %q, missing %q", s, w)
		}
	}
	if len(s) > 160 || strings.Contains(s, "\n") {
		t.Errorf("%%v is %d bytes: %q", len(s), s)
	}
	if s := fmt.Sprint((*id.Event)(nil)); s != "<nil event>" {
		t.Errorf("nil event prints %q", s)
	}
}

// TestTypedNilChannel (issue 16 bug 5): a nil *channel.Channel passed as an
// id.Channel is EINVAL for Create and Migrate, not a nil dereference.
func TestTypedNilChannel(t *testing.T) {
	var nilCh *channel.Channel
	noPanic := func(what string, fn func() error) error {
		t.Helper()
		var err error
		func() {
			defer func() {
				if v := recover(); v != nil {
					t.Fatalf("%s panicked: %v", what, v)
				}
			}()
			err = fn()
		}()
		return err
	}
	err := noPanic("Create", func() error {
		cm, err := id.Create(nilCh, nil, id.PSTCP)
		if cm != nil {
			_ = cm.Destroy()
		}
		return err
	})
	wantErrno(t, err, syscall.EINVAL)
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	defer cm.Destroy()
	wantErrno(t, noPanic("Migrate", func() error { return cm.Migrate(nilCh) }), syscall.EINVAL)
	if nilCh.Fd() != -1 || nilCh.Close() != nil || nilCh.Fabric() != nil {
		t.Fatal("nil channel: Fd, Close or Fabric")
	}
	ep(cm).Inject(id.EventUser, 0, nil)
	ev := expect(t, ch, id.EventUser, cm)
	wantErrno(t, noPanic("Ack", func() error { return nilCh.Ack(ev) }), syscall.EINVAL)
	if err := ch.Ack(ev); err != nil {
		t.Fatal(err)
	}
}

// TestBlockedCallsSayWhatClosed: a GetEvent waiting when its channel is
// closed, and a synchronous call waiting when its id is destroyed, fail
// with EBADF and id.ErrClosed in words of cmrt's ("evq: queue closed" was
// the internal queue's name).
func TestBlockedCallsSayWhatClosed(t *testing.T) {
	f := fakefab.New("fake", false)
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := ch.GetEvent(); got <- err }()
	time.Sleep(20 * time.Millisecond) // let it block; it fails the same if not
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("GetEvent still blocked after Close")
	}
	if !errors.Is(err, syscall.EBADF) || !errors.Is(err, id.ErrClosed) || strings.Contains(err.Error(), "evq") {
		t.Errorf("GetEvent on a closing channel: %v", err)
	}

	cm := newID(t, nil, id.PSTCP, id.WithFabric(f))
	go func() { got <- cm.ResolveAddr(anyAddr, dst, time.Second) }()
	for deadline := time.Now().Add(2 * time.Second); cm.State() != id.StateAddrQuery; {
		if time.Now().After(deadline) {
			t.Fatal("ResolveAddr did not start")
		}
		time.Sleep(time.Millisecond)
	}
	if err := cm.Destroy(); err != nil {
		t.Fatal(err)
	}
	select {
	case err = <-got:
	case <-time.After(2 * time.Second):
		t.Fatal("ResolveAddr still blocked after Destroy")
	}
	if !errors.Is(err, syscall.EBADF) || !errors.Is(err, id.ErrClosed) || !strings.Contains(err.Error(), "destroyed while the call waited") {
		t.Errorf("ResolveAddr on a destroyed id: %v", err)
	}
}

// TestUnansweredRequestOfFailedHandlerIsRefused (issue 18 item 8): a
// CONNECT_REQUEST whose handler panics, or returns an error, without
// answering it is rejected and its new id destroyed; a handler that
// returns nil without answering keeps it (it may answer later).
func TestUnansweredRequestOfFailedHandlerIsRefused(t *testing.T) {
	for _, c := range []struct {
		name    string
		h       func(*id.Event) error
		refused bool
	}{
		{"panic", func(*id.Event) error { panic("boom") }, true},
		{"error", func(*id.Event) error { return errors.New("no") }, true},
		{"nil", func(*id.Event) error { return nil }, false},
		{"accept then error", func(ev *id.Event) error { _ = ev.ID.Accept(nil); return errors.New("late") }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := fakefab.New("fake", true)
			ch := newChan(t, f)
			l := newID(t, ch, id.PSTCP)
			defer l.Destroy()
			if err := l.Listen(0); err != nil {
				t.Fatal(err)
			}
			ep(l).InjectRequest(nil)
			ev := expect(t, ch, id.EventConnectRequest, nil)
			child, cep := ev.ID, ep(ev.ID)
			func() {
				defer func() { _ = recover() }()
				_ = ev.Handle(handlers.Func(c.h))
			}()
			calls := cep.Calls()
			refused := child.State() == id.StateDestroyed && len(calls) >= 2 && calls[0] == "reject" && calls[len(calls)-1] == "destroy"
			if refused != c.refused {
				t.Fatalf("request refused %v (state %s, calls %v), want %v", refused, child.State(), calls, c.refused)
			}
			if !refused {
				_ = child.Destroy()
			}
		})
	}
}

// TestHandleChecksOwnership: Handle of an acknowledged event, or of a
// synchronous id's, is EINVAL and does not run the handler; Ack inside a
// handler marks the event, and a second one fails.
func TestHandleChecksOwnership(t *testing.T) {
	f := fakefab.New("fake", true)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	defer cm.Destroy()
	ep(cm).Inject(id.EventUser, 0, nil)
	ev := expect(t, ch, id.EventUser, cm)
	_ = ev.Ack()
	ran := false
	wantErrno(t, ev.Handle(handlers.Func(func(*id.Event) error { ran = true; return nil })), syscall.EINVAL)
	ep(cm).Inject(id.EventUser, 1, nil)
	ev = expect(t, ch, id.EventUser, cm)
	err := ev.Handle(handlers.Func(func(ev *id.Event) error {
		ran = true
		if err := ev.Ack(); err != nil {
			return err
		}
		return ev.Ack()
	}))
	if !ran || !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("handler ran %v, second Ack inside it: %v", ran, err)
	}
	s := newID(t, nil, id.PSTCP, id.WithFabric(f))
	defer s.Destroy()
	if err := s.ResolveAddr(anyAddr, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	ran = false
	wantErrno(t, s.Event().Handle(handlers.Func(func(*id.Event) error { ran = true; return nil })), syscall.EINVAL)
	if ran {
		t.Fatal("handler ran for a synchronous id's event")
	}
}
