package id_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// closed reports whether c is closed within d.
func closed(c <-chan struct{}, d time.Duration) bool {
	select {
	case <-c:
		return true
	default:
	}
	select {
	case <-c:
		return true
	case <-time.After(d):
		return false
	}
}

// A channel user (GetEvent and Ack, no handler) keeps librdmacm's blocking
// Destroy, and Done is closed once it returns.
func TestDoneAfterBlockingDestroy(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	done := cm.Done()
	if closed(done, 10*time.Millisecond) {
		t.Fatal("Done closed for a live id")
	}
	ep(cm).Inject(id.EventUser, 0, nil)
	ev := expect(t, ch, id.EventUser, cm)
	hung, returned := blocks(func() { _ = cm.Destroy() }, 50*time.Millisecond)
	if !hung {
		t.Fatal("Destroy returned with an event unacknowledged and no handler running")
	}
	if closed(done, 10*time.Millisecond) {
		t.Fatal("Done closed before the last ack")
	}
	_ = ev.Ack()
	if !closed(returned, 2*time.Second) {
		t.Fatal("Destroy still blocked after the ack")
	}
	if !closed(done, 0) || !closed(cm.Done(), 0) {
		t.Fatal("Done not closed when Destroy returned")
	}
}

// Done asked for after the id was finalized is closed too.
func TestDoneAfterFinalization(t *testing.T) {
	cm := newID(t, newChan(t, fakefab.New("fake", false)), id.PSTCP)
	if err := cm.Destroy(); err != nil {
		t.Fatal(err)
	}
	if !closed(cm.Done(), 0) {
		t.Fatal("Done of a finalized id is not closed")
	}
}

// Destroy from the handler of the id's own event returns at once, without
// waiting for that event nor for the one behind it; the id is finalized
// (Done closed) when the last is acknowledged, and the later event's
// handler is never called.
func TestDestroyFromOwnHandlerFinalizesAtLastAck(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	ep(cm).Inject(id.EventAddrChange, 0, nil)
	ep(cm).Inject(id.EventUser, 0, nil)
	ev1 := expect(t, ch, id.EventAddrChange, cm)
	ev2 := expect(t, ch, id.EventUser, cm)
	hung, _ := blocks(func() {
		_ = ev1.Handle(handlers.Func(func(ev *id.Event) error { return ev.ID.Destroy() }))
	}, 2*time.Second)
	if hung {
		t.Fatal("Destroy from the id's own handler waited")
	}
	if closed(cm.Done(), 20*time.Millisecond) {
		t.Fatal("Done closed with an event unacknowledged")
	}
	called := false
	_ = ev2.Handle(handlers.Func(func(*id.Event) error { called = true; return nil }))
	if called {
		t.Fatal("handler ran for an event of a destroyed id")
	}
	if !closed(cm.Done(), 2*time.Second) {
		t.Fatal("Done not closed after the last event was handled")
	}
}

// Destroy from another goroutine while a handler of the id runs returns
// without waiting for it; Done is closed only once the handler returned.
func TestDestroyWhileHandlerRunsDoesNotWait(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	cm := newID(t, ch, id.PSTCP)
	ep(cm).Inject(id.EventUser, 0, nil)
	ev := expect(t, ch, id.EventUser, cm)
	entered, release := make(chan struct{}), make(chan struct{})
	handled := make(chan struct{})
	go func() {
		_ = ev.Handle(handlers.Func(func(*id.Event) error {
			close(entered)
			<-release
			return nil
		}))
		close(handled)
	}()
	<-entered
	if hung, _ := blocks(func() { _ = cm.Destroy() }, 2*time.Second); hung {
		close(release)
		t.Fatal("Destroy waited for a running handler")
	}
	if closed(cm.Done(), 50*time.Millisecond) {
		close(release)
		t.Fatal("Done closed while the handler runs")
	}
	close(release)
	<-handled
	if !closed(cm.Done(), 2*time.Second) {
		t.Fatal("Done not closed after the handler returned")
	}
}

// Migrate and LeaveMulticast from another goroutine while a handler of the
// id runs return without waiting for it either.
func TestMigrateAndLeaveWhileHandlerRunsDoNotWait(t *testing.T) {
	f := fakefab.New("fake", true)
	ch1, ch2 := newChan(t, f), newChan(t, f)
	cm := newID(t, ch1, id.PSUDP)
	defer cm.Destroy()
	group := netip.MustParseAddr("239.1.2.3")
	if err := cm.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if err := cm.JoinMulticast(group, nil); err != nil {
		t.Fatal(err)
	}
	ev := expect(t, ch1, id.EventMulticastJoin, cm)
	entered, release, handled := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		_ = ev.Handle(handlers.Func(func(*id.Event) error {
			close(entered)
			<-release
			return nil
		}))
		close(handled)
	}()
	<-entered
	defer func() { <-handled }()
	defer close(release)
	if hung, _ := blocks(func() {
		if err := cm.LeaveMulticast(group); err != nil {
			t.Error(err)
		}
	}, 2*time.Second); hung {
		t.Fatal("LeaveMulticast waited for a running handler of the join's event")
	}
	if hung, _ := blocks(func() {
		if err := cm.Migrate(ch2); err != nil {
			t.Error(err)
		}
	}, 2*time.Second); hung {
		t.Fatal("Migrate waited for a running handler")
	}
}
