package soft_test

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// TestListenerDestroyWaitsForRequestAck: a CONNECT_REQUEST counts against
// the listener, so destroying the listener waits for its acknowledgement.
func TestListenerDestroyWaitsForRequestAck(t *testing.T) {
	sch, cch := mkChan(t, nil), mkChan(t, nil)
	l := cmListen(t, sch, nil)
	cli := mkID(t, cch, nil, id.PSTCP)
	defer cli.Destroy()
	routeTo(t, cch, cli, l.LocalAddr())
	_ = cli.Connect(nil)
	ev := await(t, sch, id.EventConnectRequest)
	child := ev.ID
	done := make(chan struct{})
	go func() { _ = l.Destroy(); close(done) }()
	select {
	case <-done:
		t.Fatal("listener destroyed with its request unacknowledged")
	case <-time.After(100 * time.Millisecond):
	}
	_ = ev.Ack()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("listener destroy still blocked after the ack")
	}
	_ = child.Destroy() // an unaccepted request destroyed: rejected
	rej := await(t, cch, id.EventRejected)
	_ = rej.Ack()
}

// TestListenerDestroyRejectsPendingRequests: requests still queued when the
// listener goes are rejected; nothing leaks.
func TestListenerDestroyRejectsPendingRequests(t *testing.T) {
	sch, cch := mkChan(t, nil), mkChan(t, nil)
	l := cmListen(t, sch, nil)
	const n = 5
	var clis []*id.ID
	for k := 0; k < n; k++ {
		cli := mkID(t, cch, nil, id.PSTCP)
		clis = append(clis, cli)
		routeTo(t, cch, cli, l.LocalAddr())
		_ = cli.Connect(nil)
	}
	// Wait until every request is queued on the server channel.
	deadline := time.Now().Add(3 * time.Second)
	for sch.Source().(interface{ Endpoints() int }).Endpoints() < n+1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if err := l.Destroy(); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < n; k++ {
		_ = await(t, cch, id.EventRejected).Ack()
	}
	for _, c := range clis {
		_ = c.Destroy()
	}
	sch.SetNonblocking(true)
	if ev, err := sch.GetEvent(); err == nil {
		t.Fatalf("server channel still holds %s", ev.Type)
	}
}

// TestMigrateEstablishedID: after migrating an established id, the peer's
// disconnect is reported on the new channel.
func TestMigrateEstablishedID(t *testing.T) {
	sch, cch, other := mkChan(t, nil), mkChan(t, nil), mkChan(t, nil)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := mkID(t, cch, nil, id.PSTCP)
	routeTo(t, cch, cli, l.LocalAddr())
	_ = cli.Connect(nil)
	req := await(t, sch, id.EventConnectRequest)
	child := req.ID
	_ = child.Accept(nil)
	_ = req.Ack()
	_ = await(t, sch, id.EventEstablished).Ack()
	_ = await(t, cch, id.EventEstablished).Ack()
	if err := cli.Migrate(other); err != nil {
		t.Fatal(err)
	}
	_ = child.Disconnect()
	_ = await(t, sch, id.EventDisconnected).Ack()
	ev := await(t, other, id.EventDisconnected)
	if ev.ID != cli {
		t.Fatal("DISCONNECTED for the wrong id")
	}
	_ = ev.Ack()
	cch.SetNonblocking(true)
	if ev, err := cch.GetEvent(); err == nil {
		t.Fatalf("old channel got %s", ev.Type)
	}
	_ = cli.Destroy()
	_ = child.Destroy()
}

// TestPerIDOrderOnPool: a reactor with workers serves many concurrent
// connections; every server-side id sees a legal event sequence, in order.
func TestPerIDOrderOnPool(t *testing.T) {
	const conns = 60
	sch, cch := mkChan(t, nil), mkChan(t, nil)
	r, err := reactor.New(reactor.WithWorkers(6))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	var mu sync.Mutex
	seqs := make(map[*id.ID][]id.EventType)
	var disconnected atomic.Int32
	record := func(ev *id.Event) {
		mu.Lock()
		seqs[ev.ID] = append(seqs[ev.ID], ev.Type)
		mu.Unlock()
	}
	mux := handlers.New().
		OnConnectRequest(func(ev *id.Event) error {
			record(ev)
			time.Sleep(time.Duration(ev.ID.Handle()%3) * time.Millisecond) // let others overtake
			return ev.ID.Accept(nil)
		}).
		OnEstablished(func(ev *id.Event) error { record(ev); return nil }).
		OnDisconnected(func(ev *id.Event) error {
			record(ev)
			disconnected.Add(1)
			return ev.ID.Destroy() // from inside the handler
		})
	if err := r.Register(sch, mux); err != nil {
		t.Fatal(err)
	}
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	var clis []*id.ID
	for k := 0; k < conns; k++ {
		cli := mkID(t, cch, nil, id.PSTCP)
		clis = append(clis, cli)
		routeTo(t, cch, cli, l.LocalAddr())
	}
	for _, cli := range clis {
		_ = cli.Connect(nil)
	}
	// Client side: disconnect each connection as it is established, and
	// count both kinds of events in whatever order they come.
	var est, disc int
	for est < conns || disc < conns {
		ev, err := cch.GetEventContext(timeoutCtx(t, 5*time.Second))
		if err != nil {
			t.Fatalf("client events: %v (%d established, %d disconnected)", err, est, disc)
		}
		switch ev.Type {
		case id.EventEstablished:
			est++
			_ = ev.ID.Disconnect()
		case id.EventDisconnected:
			disc++
		default:
			t.Fatalf("client got %s", ev.Type)
		}
		_ = ev.Ack()
	}
	deadline := time.Now().Add(5 * time.Second)
	for disconnected.Load() < conns && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for _, c := range clis {
		_ = c.Destroy()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seqs) != conns {
		t.Fatalf("%d server ids, want %d", len(seqs), conns)
	}
	for cm, seq := range seqs {
		want := []id.EventType{id.EventConnectRequest, id.EventEstablished, id.EventDisconnected}
		if len(seq) != 3 || seq[0] != want[0] || seq[1] != want[1] || seq[2] != want[2] {
			t.Fatalf("id %d saw %v", cm.Handle(), seq)
		}
	}
}

// TestConnectDisconnectCyclesLeakNothing runs connect/disconnect cycles and
// then counts goroutines, descriptors and ids.
func TestConnectDisconnectCyclesLeakNothing(t *testing.T) {
	cycles := 1000
	if testing.Short() {
		cycles = 100
	}
	quiesce(t)
	base := fds(t)
	// id.Live counts the process's ids: an earlier test's may still be
	// finalizing (a destroy from a handler finishes at its last ack).
	live := id.Live()
	func() {
		sch, cch := mkChan(t, nil), mkChan(t, nil)
		l := cmListen(t, sch, nil)
		defer l.Destroy()
		dst := l.LocalAddr()
		for k := 0; k < cycles; k++ {
			cli := mkID(t, cch, nil, id.PSTCP)
			routeTo(t, cch, cli, dst)
			if err := cli.Connect(&id.ConnParam{PrivateData: []byte{byte(k)}}); err != nil {
				t.Fatal(err)
			}
			req := await(t, sch, id.EventConnectRequest)
			child := req.ID
			if req.Conn.PrivateData[0] != byte(k) {
				t.Fatalf("cycle %d got request %d", k, req.Conn.PrivateData[0])
			}
			_ = child.Accept(nil)
			_ = req.Ack()
			_ = await(t, sch, id.EventEstablished).Ack()
			_ = await(t, cch, id.EventEstablished).Ack()
			if k%2 == 0 {
				_ = cli.Disconnect()
			} else {
				_ = child.Disconnect()
			}
			_ = await(t, cch, id.EventDisconnected).Ack()
			_ = await(t, sch, id.EventDisconnected).Ack()
			if err := cli.Destroy(); err != nil {
				t.Fatal(err)
			}
			if err := child.Destroy(); err != nil {
				t.Fatal(err)
			}
		}
	}()
	// The channels close in t.Cleanup; run it now by checking after a
	// sub-scope: ids and sockets are gone already.
	for deadline := time.Now().Add(5 * time.Second); id.Live() > live && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	if n := id.Live(); n > live {
		t.Fatalf("%d ids live after %d cycles, %d before", n, cycles, live)
	}
	quiesce(t)
	// Two channels' eventfds are still open until cleanup.
	if got := fds(t); got > base+2 {
		t.Fatalf("%d descriptors after %d cycles, %d before (+2 channels)", got, cycles, base)
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

var _ = netip.AddrPort{}

func timeoutCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func quiesce(t testing.TB) {
	t.Helper()
	if err := soft.Default().QuiesceContext(timeoutCtx(t, 5*time.Second)); err != nil {
		t.Fatalf("the fabric's loops did not stop: %v", err)
	}
}
