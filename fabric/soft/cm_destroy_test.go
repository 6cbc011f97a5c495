package soft_test

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestConnectDisconnectCyclesLeakNothing runs connect/disconnect cycles and
// then counts goroutines, descriptors and ids.
func TestConnectDisconnectCyclesLeakNothing(t *testing.T) {
	cycles := 1000
	if testing.Short() {
		cycles = 100
	}
	quiesce(t)
	base := countFDs(t)
	// id.Live counts the process's ids: an earlier test's may still be
	// finalizing (a destroy from a handler finishes at its last ack).
	live := id.Live()
	func() {
		sch, cch := newChannel(t, nil), newChannel(t, nil)
		l := cmListen(t, sch, nil)
		defer l.Destroy()
		dst := l.LocalAddr()
		for k := 0; k < cycles; k++ {
			cli := mkID(t, cch, nil, id.PSTCP)
			resolve(t, cch, cli, dst)
			if err := cli.Connect(&id.ConnParam{PrivateData: []byte{byte(k)}}); err != nil {
				t.Fatal(err)
			}
			req := next(t, sch, id.EventConnectRequest)
			child := req.ID
			if req.Conn.PrivateData[0] != byte(k) {
				t.Fatalf("cycle %d got request %d", k, req.Conn.PrivateData[0])
			}
			_ = child.Accept(nil)
			_ = req.Ack()
			_ = next(t, sch, id.EventEstablished).Ack()
			_ = next(t, cch, id.EventEstablished).Ack()
			if k%2 == 0 {
				_ = cli.Disconnect()
			} else {
				_ = child.Disconnect()
			}
			_ = next(t, cch, id.EventDisconnected).Ack()
			_ = next(t, sch, id.EventDisconnected).Ack()
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
	if got := countFDs(t); got > base+2 {
		t.Fatalf("%d descriptors after %d cycles, %d before (+2 channels)", got, cycles, base)
	}
	goleak.VerifyNone(t, goleak.IgnoreCurrent())
}

// TestRCDestroyDoesNotWaitForTheLoop: destroying a connected id neither
// waits for its connection's loop (here stalled) nor leaves the id's
// memory reachable: when Destroy returns its regions are invalid; the loop
// then closes the connection and the peer sees DISCONNECTED.
func TestRCDestroyDoesNotWaitForTheLoop(t *testing.T) {
	p := newPair(t, pairOpts{srvFab: soft.New(), cliFab: soft.New()})
	buf := make([]byte, 64)
	m := reg(t, p.cli, buf, id.AccessLocalWrite|id.AccessRemoteWrite)
	if err := p.cli.id.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	release := soft.StallLoop(p.cli.id.Endpoint())
	done := make(chan error, 1)
	go func() { done <- p.cli.id.Destroy() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		release()
		t.Fatal("Destroy waited for the connection's stalled loop")
	}
	if soft.MRValid(m) {
		t.Error("a region of the destroyed id is still valid")
	}
	release()
	p.srvCh.want(t, id.EventDisconnected)
	for _, i := range []*id.ID{p.srv.id, p.lis} {
		if err := i.Destroy(); err != nil {
			t.Error(err)
		}
	}
	_ = p.srvCh.src.Close()
	_ = p.cliCh.src.Close()
	quiesceFabs(t, p.fabs...)
}

// TestQuiesceAfterDestroyHandedOver: Quiesce that starts while a destroyed
// id's connection still waits for its loop returns once the loop closed it,
// without the fabric's grace period (an hour here: Quiesce waited that long
// when the loop's last reference went after Quiesce had looked).
func TestQuiesceAfterDestroyHandedOver(t *testing.T) {
	cliFab := soft.New(soft.WithIdleGrace(time.Hour))
	p := newPair(t, pairOpts{srvFab: soft.New(), cliFab: cliFab})
	if err := p.cli.id.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	release := soft.StallLoop(p.cli.id.Endpoint())
	defer release()
	if err := p.cli.id.Destroy(); err != nil {
		t.Fatal(err)
	}
	quiesced := make(chan struct{})
	go func() { cliFab.Quiesce(); close(quiesced) }()
	select {
	case <-quiesced:
		t.Fatal("Quiesce returned while the loop still held the connection")
	case <-time.After(100 * time.Millisecond):
	}
	release()
	select {
	case <-quiesced:
	case <-time.After(10 * time.Second):
		t.Fatal("Quiesce still waits after the loop closed the connection")
	}
	p.srvCh.want(t, id.EventDisconnected)
	for _, i := range []*id.ID{p.srv.id, p.lis} {
		if err := i.Destroy(); err != nil {
			t.Error(err)
		}
	}
	_ = p.srvCh.src.Close()
	_ = p.cliCh.src.Close()
	quiesceFabs(t, p.fabs...)
}
