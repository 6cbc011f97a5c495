package soft_test

import (
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

var loopback = netip.MustParseAddr("127.0.0.1")

func mkChan(t testing.TB, f fabric.Fabric) *channel.Channel {
	t.Helper()
	if f == nil {
		f = soft.Default()
	}
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ch.Close(); err != nil {
			t.Errorf("channel close: %v", err)
		}
	})
	return ch
}

func mkID(t testing.TB, ch *channel.Channel, ctx any, ps id.PortSpace) *id.ID {
	t.Helper()
	cm, err := id.Create(ch, ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// next returns the next event of ch within 5s and checks its type.
func await(t testing.TB, ch *channel.Channel, want id.EventType) *id.Event {
	t.Helper()
	type res struct {
		ev  *id.Event
		err error
	}
	c := make(chan res, 1)
	go func() { ev, err := ch.GetEvent(); c <- res{ev, err} }()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("GetEvent: %v (want %s)", r.err, want)
		}
		if r.ev.Type != want {
			got, status := r.ev.Type, r.ev.Status
			_ = r.ev.Ack() // so the test's deferred Destroy calls do not wait for it
			t.Fatalf("got %s status %d, want %s", got, status, want)
		}
		return r.ev
	case <-time.After(5 * time.Second):
		t.Fatalf("no %s within 5s", want)
	}
	return nil
}

// listen makes a listening RC id on 127.0.0.1 with a free port.
func cmListen(t testing.TB, ch *channel.Channel, ctx any) *id.ID {
	t.Helper()
	l := mkID(t, ch, ctx, id.PSTCP)
	if err := l.Bind(netip.AddrPortFrom(loopback, 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	return l
}

// routeTo resolves an async id to dst, taking ADDR_RESOLVED and
// ROUTE_RESOLVED from ch.
func routeTo(t testing.TB, ch *channel.Channel, cm *id.ID, dst netip.AddrPort) {
	t.Helper()
	if err := cm.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	_ = await(t, ch, id.EventAddrResolved).Ack()
	if err := cm.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	_ = await(t, ch, id.EventRouteResolved).Ack()
}

func cmErrno(t testing.TB, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

// fds counts the process's open descriptors.
func fds(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
