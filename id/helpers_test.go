package id_test

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

var (
	dst     = netip.MustParseAddrPort("127.0.0.1:7471")
	anyAddr = netip.AddrPort{}
)

func newChan(t *testing.T, f fabric.Fabric) *channel.Channel {
	t.Helper()
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ch.Close(); err != nil {
			t.Errorf("close channel: %v", err)
		}
	})
	return ch
}

func newID(t *testing.T, ch id.Channel, ps id.PortSpace, opts ...id.Option) *id.ID {
	t.Helper()
	i, err := id.Create(ch, nil, ps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// expect takes the next event from ch within a second and checks its type
// and id.
func expect(t *testing.T, ch *channel.Channel, want id.EventType, of *id.ID) *id.Event {
	t.Helper()
	done := make(chan struct{})
	var ev *id.Event
	var err error
	go func() { ev, err = ch.GetEvent(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatalf("no %s within 2s", want)
	}
	if err != nil {
		t.Fatalf("GetEvent: %v (want %s)", err, want)
	}
	if ev.Type != want || (of != nil && ev.ID != of) {
		t.Fatalf("got %s for id %d, want %s for id %d", ev.Type, ev.ID.Handle(), want, of.Handle())
	}
	return ev
}

func wantErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v (%d)", err, want, int(want))
	}
}

func ep(i *id.ID) *fakefab.Endpoint { return i.Endpoint().(*fakefab.Endpoint) }

// blocks runs fn in a goroutine and reports whether it is still running
// after d; the returned channel closes when it finishes.
func blocks(fn func(), d time.Duration) (bool, chan struct{}) {
	done := make(chan struct{})
	go func() { fn(); close(done) }()
	select {
	case <-done:
		return false, done
	case <-time.After(d):
		return true, done
	}
}
