package fuzz

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestListenerDestroyClosesPendingConnections (found by FuzzSoftRC):
// destroying an RC listener closes the connections it accepted whose MPA
// Request has not come yet, so nothing of the listener outlives it: its
// channel can be closed at once and a late Request makes no endpoint.
func TestListenerDestroyClosesPendingConnections(t *testing.T) {
	f := soft.New(soft.WithName("fuzz"), soft.WithRequestTimeout(3*time.Second))
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	l, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	raw, err := net.Dial("tcp", l.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	time.Sleep(50 * time.Millisecond) // the fabric accepts it
	if err := l.Destroy(); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() {
		_ = raw.SetReadDeadline(time.Now().Add(time.Second))
		_, err := raw.Read(make([]byte, 1))
		closed <- err
	}()
	err = <-closed
	_ = ch.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = f.QuiesceContext(ctx)
	if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !isReset(err) {
		t.Fatalf("the destroyed listener's pending connection is still open a second later (read: %v)", err)
	}
}

func isReset(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && !oe.Timeout()
}

// TestMigratedListenerTakesItsRequests (found by FuzzFake): migrating a
// listener moves its queued CONNECT_REQUESTs and their new endpoints to the
// new channel, so the old channel, with no id left, can be closed.
func TestMigratedListenerTakesItsRequests(t *testing.T) {
	f := soft.New(soft.WithName("fuzz"))
	a, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	b, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = a.Close()
		_ = b.Close()
		_ = cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = f.QuiesceContext(ctx)
	}()
	l, err := id.Create(a, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Destroy()
	if err := l.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	c, err := id.Create(cc, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	want := func(ch *channel.Channel, typ id.EventType) *id.Event {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ev, err := ch.GetEventContext(ctx)
		if err != nil || ev.Type != typ {
			t.Fatalf("got %v (%v), want %s", ev, err, typ)
		}
		return ev
	}
	if err := c.ResolveAddr(netip.AddrPort{}, l.LocalAddr(), time.Second); err != nil {
		t.Fatal(err)
	}
	_ = want(cc, id.EventAddrResolved).Ack()
	if err := c.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	_ = want(cc, id.EventRouteResolved).Ack()
	if err := c.Connect(nil); err != nil {
		t.Fatal(err)
	}
	// Wait until the request is queued on a, then move the listener.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && a.Source().(interface{ Endpoints() int }).Endpoints() < 2 {
		time.Sleep(time.Millisecond)
	}
	if err := l.Migrate(b); err != nil {
		t.Fatal(err)
	}
	closeErr := a.Close()
	ev := want(b, id.EventConnectRequest)
	child := ev.ID
	defer child.Destroy()
	acceptErr := child.Accept(nil)
	_ = ev.Ack()
	if closeErr != nil || acceptErr != nil {
		t.Fatalf("after the listener's migrate: closing its old channel: %v; accepting the moved request: %v", closeErr, acceptErr)
	}
}
