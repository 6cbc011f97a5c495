package kernel_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/kernel"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// waitQueued waits (bounded) until ch's fd is readable: an event is queued
// in the kernel, not yet read.
func waitQueued(t *testing.T, ch *channel.Channel) {
	t.Helper()
	pfd := []unix.PollFd{{Fd: int32(ch.Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, 10000)
	for err == unix.EINTR { // a signal (the runtime's preemption) is not an answer
		n, err = unix.Poll(pfd, 10000)
	}
	if err != nil || n != 1 {
		t.Fatalf("no event queued on the listener's channel within 10 s (poll %d, %v)", n, err)
	}
}

// TestMigrateListenerQueuedRequest: a connection request queued on a
// listener's channel moves with the listener (id.Migrate's contract). The
// kernel moves the listener and its queued events but leaves the request's
// own kernel id on the old file: before the fix, closing the old channel
// destroyed it (the client got REJECTED 28, the request was delivered
// anyway, dead), and without the close the accept, written on the new
// channel's fd, found the id on another file (EINVAL). diff-kernel found
// the first on rxe0 (sequence 1505 of seed 2026: a synchronous listener
// migrated, its private channel closed).
func TestMigrateListenerQueuedRequest(t *testing.T) {
	_, addr := device(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	for _, c := range []struct {
		name     string
		closeOld bool // close the channel the listener left, as a synchronous id's migrate does
		parked   bool // a reader already waits on the new channel
	}{
		{"old-channel-closed", true, false},
		{"old-channel-open", false, false},
		{"reader-waiting", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			old, err := channel.New(channel.WithFabric(kernel.Default()))
			if err != nil {
				t.Fatal(err)
			}
			defer old.Close()
			sch, cch := newChannel(t), newChannel(t)
			l, laddr := listen(t, old, id.PSTCP, addr)
			cl := create(t, cch, id.PSTCP)
			resolve(t, cch, cl, laddr)
			if err := cl.Connect(&id.ConnParam{QPNum: nextQPN()}); err != nil {
				t.Fatal(err)
			}
			waitQueued(t, old)
			type got struct {
				ev  *id.Event
				err error
			}
			parked := make(chan got, 1)
			if c.parked {
				// MIGRATE_ID moves the events without waking the new
				// channel's readers: the kernel fabric wakes them. (The
				// sleep only lets the reader park first; if it has not,
				// the case passes trivially.)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					ev, err := sch.GetEventContext(ctx)
					parked <- got{ev, err}
				}()
				time.Sleep(100 * time.Millisecond)
			}
			if err := l.Migrate(sch); err != nil {
				t.Fatal(err)
			}
			if c.closeOld {
				if err := old.Close(); err != nil {
					t.Fatal(err)
				}
			}
			var ev *id.Event
			if c.parked {
				g := <-parked
				if g.err != nil || g.ev.Type != id.EventConnectRequest {
					t.Fatalf("the reader waiting on the new channel got %v, %v; want the CONNECT_REQUEST", g.ev, g.err)
				}
				ev = g.ev
			} else {
				ev = want(t, sch, id.EventConnectRequest)
			}
			child := ev.ID
			if ev.ListenID != l {
				t.Errorf("request's listener %p, want %p", ev.ListenID, l)
			}
			_ = ev.Ack()
			sq := nextQPN()
			if err := child.Accept(&id.ConnParam{QPNum: sq}); err != nil {
				t.Fatalf("accept of the request queued across the migrate: %v", err)
			}
			ev = want(t, cch, id.EventConnectResponse, id.EventRejected)
			if ev.Type != id.EventConnectResponse || ev.Conn.QPNum != sq {
				t.Fatalf("client got %s status %d (QPN %d), want CONNECT_RESPONSE from QPN %d", ev.Type, ev.Status, ev.Conn.QPNum, sq)
			}
			_ = ev.Ack()
			if err := cl.Establish(); err != nil {
				t.Fatal(err)
			}
			_ = want(t, sch, id.EventEstablished).Ack()
			if err := cl.Disconnect(); err != nil {
				t.Fatal(err)
			}
			_ = want(t, sch, id.EventDisconnected).Ack()
			if err := child.Disconnect(); err != nil {
				t.Fatal(err)
			}
			_ = want(t, cch, id.EventDisconnected).Ack()
			destroy(t, cl, child, l)
		})
	}
}

// TestMigrateQueuedEventReactor: an id migrated, with an event queued, onto
// a channel a reactor serves has the event handled. MIGRATE_ID moves the
// queued events to the new file without waking its pollers (ucma wakes
// them when an event is queued, not when events move), so the reactor's
// epoll never reported them: the event waited for the channel's next one,
// a hang where none came. The kernel source now tells the reactor, which
// reads the channel once (fabric.MigrateNotifier). Cases: a listener's
// queued CONNECT_REQUEST, and an accepted id's queued ESTABLISHED; inline
// and with workers.
func TestMigrateQueuedEventReactor(t *testing.T) {
	_, addr := device(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	for _, c := range []struct {
		name    string
		workers int
		accept  bool // migrate the accepted id with its ESTABLISHED queued, not the listener
	}{
		{"request-inline", 0, false},
		{"request-pool", 2, false},
		{"established-inline", 0, true},
		{"established-pool", 2, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			old := newChannel(t)
			sch, cch := newChannel(t), newChannel(t)
			r, err := reactor.New(reactor.WithWorkers(c.workers))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := r.Close(context.Background()); err != nil {
					t.Error(err)
				}
			}()
			got := make(chan *id.ID, 4)
			want1 := id.EventConnectRequest
			if c.accept {
				want1 = id.EventEstablished
			}
			h := handlerFunc(func(ev *id.Event) error {
				if ev.Type == want1 {
					got <- ev.ID
				}
				return nil
			})
			if err := r.Register(sch, h); err != nil {
				t.Fatal(err)
			}
			l, laddr := listen(t, old, id.PSTCP, addr)
			cl := create(t, cch, id.PSTCP)
			resolve(t, cch, cl, laddr)
			if err := cl.Connect(&id.ConnParam{QPNum: nextQPN()}); err != nil {
				t.Fatal(err)
			}
			waitQueued(t, old)
			moving := l
			if c.accept {
				ev := want(t, old, id.EventConnectRequest)
				moving = ev.ID
				_ = ev.Ack()
				if err := moving.Accept(&id.ConnParam{QPNum: nextQPN()}); err != nil {
					t.Fatal(err)
				}
				_ = want(t, cch, id.EventConnectResponse).Ack()
				if err := cl.Establish(); err != nil {
					t.Fatal(err)
				}
				waitQueued(t, old) // the ESTABLISHED
			}
			if err := moving.Migrate(sch); err != nil {
				t.Fatal(err)
			}
			var child *id.ID
			select {
			case i := <-got:
				child = i
			case <-time.After(10 * time.Second):
				t.Fatalf("the reactor did not handle the %s queued before the migrate within 10 s", want1)
			}
			if c.accept {
				if child != moving {
					t.Fatalf("ESTABLISHED for %p, want the migrated id %p", child, moving)
				}
				// QP-less: the client's DISCONNECTED waits for the
				// passive side's disconnect (its DISCONNECTED goes to the
				// reactor).
				if err := cl.Disconnect(); err != nil {
					t.Fatal(err)
				}
				if err := moving.Disconnect(); err != nil {
					t.Fatal(err)
				}
				_ = want(t, cch, id.EventDisconnected).Ack()
			} else {
				if err := child.Reject(nil); err != nil {
					t.Fatal(err)
				}
				_ = want(t, cch, id.EventRejected).Ack()
			}
			if err := r.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			destroy(t, cl, child, l) // child is the migrated id when accept
		})
	}
}
