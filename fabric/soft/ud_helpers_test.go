package soft_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// udFabric returns a private fabric with short SIDR retries and checks, when
// the test ends, that it left no goroutine and no descriptor behind.
func udFabric(t *testing.T, opts ...soft.Option) *soft.Fabric {
	t.Helper()
	ign := goleak.IgnoreCurrent()
	fds := countFDs(t)
	f := soft.New(append([]soft.Option{soft.WithName("ud-" + t.Name()), soft.WithSIDRRetry(20*time.Millisecond, 2)}, opts...)...)
	t.Cleanup(func() {
		f.Quiesce()
		goleak.VerifyNone(t, ign)
		if n := countFDs(t); n > fds {
			t.Errorf("%d descriptors open after the test, %d before", n, fds)
		}
	})
	return f
}

func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

func newChannel(t *testing.T, f *soft.Fabric) *channel.Channel {
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

// create makes an id destroyed when the test ends (unless it was already).
func create(t *testing.T, ch id.Channel, ps id.PortSpace, opts ...id.Option) *id.ID {
	t.Helper()
	i, err := id.Create(ch, nil, ps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroy(i) })
	return i
}

func destroy(i *id.ID) {
	if i.State() != id.StateDestroyed {
		_ = i.Destroy()
	}
}

// next returns the next event of ch, failing the test if it is not of type
// want within 5 s. The caller acknowledges it.
func next(t *testing.T, ch *channel.Channel, want id.EventType) *id.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := ch.GetEventContext(ctx)
	if err != nil {
		t.Fatalf("waiting for %s: %v", want, err)
	}
	if ev.Type != want {
		st := ev.Status
		_ = ev.Ack()
		t.Fatalf("got %s (status %d), want %s", ev.Type, st, want)
	}
	return ev
}

// quiet fails the test if ch reports an event within d.
func quiet(t *testing.T, ch *channel.Channel, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := ch.GetEventContext(ctx)
	if err == nil {
		t.Errorf("unexpected %s (status %d)", ev.Type, ev.Status)
		_ = ev.Ack()
	}
}

func ack(t *testing.T, ev *id.Event) {
	t.Helper()
	if err := ev.Ack(); err != nil {
		t.Fatal(err)
	}
}

func mustErrno(t *testing.T, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

// resolve runs an async id through address and route resolution.
func resolve(t *testing.T, ch *channel.Channel, i *id.ID, dst netip.AddrPort) {
	t.Helper()
	if err := i.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	ack(t, next(t, ch, id.EventAddrResolved))
	if err := i.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	ack(t, next(t, ch, id.EventRouteResolved))
}

// listenUD makes a listening UD id on addr (port 0 picks one).
func listenUD(t *testing.T, ch *channel.Channel, ps id.PortSpace, addr netip.AddrPort, opts ...id.Option) *id.ID {
	t.Helper()
	l := create(t, ch, ps, opts...)
	if err := l.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	return l
}

// udBufs is a registered buffer for UD messages of up to size bytes (plus
// the GRH).
type udBufs struct {
	mr  id.MR
	buf []byte
}

func regUD(t *testing.T, i *id.ID, size int) *udBufs {
	t.Helper()
	b := make([]byte, size+40)
	mr, err := i.RegMsgs(b)
	if err != nil {
		t.Fatal(err)
	}
	return &udBufs{mr: mr, buf: b}
}

// recvComp waits for the next receive completion of i.
func recvComp(t *testing.T, i *id.ID) id.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc, err := i.GetRecvComp(ctx)
	if err != nil {
		t.Fatalf("receive completion: %v", err)
	}
	return wc
}

// noRecv fails the test if i completes a receive within d.
func noRecv(t *testing.T, i *id.ID, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if wc, err := i.GetRecvComp(ctx); err == nil {
		t.Fatalf("unexpected receive completion %+v", wc)
	}
}

func equalPrefix(t *testing.T, what string, got, want []byte, total int) {
	t.Helper()
	if len(got) != total || !bytes.Equal(got[:len(want)], want) {
		t.Fatalf("%s: %d bytes %x, want %d bytes starting %x", what, len(got), got, total, want)
	}
	for _, c := range got[len(want):] {
		if c != 0 {
			t.Fatalf("%s: padding not zero: %x", what, got)
		}
	}
}

var (
	lo4 = netip.MustParseAddr("127.0.0.1")
	lo6 = netip.MustParseAddr("::1")
)

func haveIPv6Loopback() bool {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet6{Addr: lo6.As16()}) == nil
}
