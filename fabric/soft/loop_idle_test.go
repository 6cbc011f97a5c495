package soft_test

import (
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// connectOnce makes one connection from an id of f to addr and destroys
// it, as a client making one connection at a time does.
func connectOnce(t *testing.T, f *soft.Fabric, addr netip.AddrPort) {
	t.Helper()
	cm, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	err = cm.ResolveAddr(netip.AddrPort{}, addr, 2*time.Second)
	if err == nil {
		err = cm.ResolveRoute(2 * time.Second)
	}
	if err == nil {
		err = cm.Connect(nil)
	}
	if err == nil {
		err = cm.Disconnect()
	}
	if derr := cm.Destroy(); err == nil {
		err = derr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestIdleGrace: once its last id is gone, a fabric keeps its loop and
// address monitor for the grace period, so the next connection reuses
// them; they stop when the period passes, or at once on Quiesce, and then
// nothing of the fabric is left.
func TestIdleGrace(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	srvFab := soft.New(soft.WithName("idle-srv"))
	srvCh := newRCChan(t, srvFab)
	lis := listen(t, srvCh)
	addr := lis.LocalAddr()
	served := make(chan struct{})
	go func() { // accept and take every event until the channel closes
		defer close(served)
		for {
			ev, ok := srvCh.nextEv(10 * time.Second)
			if !ok {
				return
			}
			if ev.Type == id.EventConnectRequest {
				_ = ev.ID.Accept(nil)
			}
			if ev.Type == id.EventDisconnected {
				_ = ev.ID.Destroy()
			}
		}
	}()
	stopServer := func() {
		_ = lis.Destroy()
		_ = srvCh.src.Close()
		<-served
		srvFab.Quiesce()
	}
	defer func() {
		if lis.State() != journal.StateDestroyed {
			stopServer()
		}
	}()

	t.Run("kept within the grace period", func(t *testing.T) {
		f := soft.New(soft.WithName("idle-long"), soft.WithIdleGrace(time.Hour))
		before := countFDs(t)
		connectOnce(t, f, addr)
		l1, m1 := soft.IdleState(f)
		if l1 == nil || m1 == nil {
			t.Fatalf("right after the connection: loop %v, monitor %v; want both kept", l1 != nil, m1 != nil)
		}
		for k := 0; k < 3; k++ {
			connectOnce(t, f, addr)
			if l, m := soft.IdleState(f); l != l1 || m != m1 {
				t.Fatalf("connection %d restarted the loop (%v) or the monitor (%v)", k+2, l != l1, m != m1)
			}
		}
		f.Quiesce()
		if l, m := soft.IdleState(f); l != nil || m != nil {
			t.Fatalf("after Quiesce: loop %v, monitor %v", l != nil, m != nil)
		}
		// The server side (same process) closes its sockets on its own
		// time: wait for the count to come back.
		deadline := time.Now().Add(5 * time.Second)
		for countFDs(t) > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if after := countFDs(t); after > before {
			t.Errorf("descriptors: %d before, %d after Quiesce", before, after)
		}
	})

	t.Run("stopped after the grace period", func(t *testing.T) {
		f := soft.New(soft.WithName("idle-short"), soft.WithIdleGrace(50*time.Millisecond))
		connectOnce(t, f, addr)
		deadline := time.Now().Add(5 * time.Second)
		for {
			l, m := soft.IdleState(f)
			if l == nil && m == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("5s after the last connection: loop %v, monitor %v", l != nil, m != nil)
			}
			time.Sleep(10 * time.Millisecond)
		}
		soft.WaitLoopExit(f) // the loop goroutine has returned
	})

	t.Run("no grace", func(t *testing.T) {
		f := soft.New(soft.WithName("idle-none"), soft.WithIdleGrace(0))
		connectOnce(t, f, addr)
		if _, m := soft.IdleState(f); m != nil {
			t.Fatal("monitor kept with no grace period")
		}
		soft.WaitLoopExit(f) // returns: the loop was told to stop with its last socket
	})
	stopServer()
	goleak.VerifyNone(t, ignore)
}
