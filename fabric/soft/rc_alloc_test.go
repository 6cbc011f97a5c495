package soft_test

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestIDPostDoesNotAllocate: posting through the librdmacm-shaped methods
// on the id (rdma_post_recv, rdma_post_send) allocates nothing per call.
func TestIDPostDoesNotAllocate(t *testing.T) {
	p := newPair(t, pairOpts{})
	defer p.close()
	p.disconnect = true
	cbuf, sbuf := make([]byte, 64), make([]byte, 64)
	cm, err := p.cli.id.RegMsgs(cbuf)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := p.srv.id.RegMsgs(sbuf)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	allocs := testing.AllocsPerRun(200, func() {
		if err := p.srv.id.PostRecv(1, sbuf, sm); err != nil {
			t.Fatal(err)
		}
		if err := p.cli.id.PostSend(2, cbuf, cm, id.SendSignaled); err != nil {
			t.Fatal(err)
		}
		if wc, err := p.srv.id.GetRecvComp(ctx); err != nil || wc.Status != id.WCSuccess {
			t.Fatalf("recv %+v %v", wc, err)
		}
		if wc, err := p.cli.id.GetSendComp(ctx); err != nil || wc.Status != id.WCSuccess {
			t.Fatalf("send %+v %v", wc, err)
		}
	})
	if allocs > 0 && !soft.RaceEnabled {
		t.Fatalf("%.1f allocations per post/complete round", allocs)
	}
	_ = p.cli.id.Disconnect()
	p.cliCh.want(t, id.EventDisconnected)
	p.srvCh.want(t, id.EventDisconnected)
	p.disconnect = false
}

// TestRCCreateQPAllocatesByUse: a QP of the default depth (256) does not
// allocate its rings up front (they took 50 KiB), yet takes exactly its
// depth of receives; and a ring whose depth is not a multiple of its
// allocation unit keeps posting order over several laps.
func TestRCCreateQPAllocatesByUse(t *testing.T) {
	t.Run("create", func(t *testing.T) {
		f := soft.New()
		ch := newRCChan(t, f)
		cid, err := id.Create(ch, nil, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		if err := cid.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.1:9"), time.Second); err != nil {
			t.Fatal(err)
		}
		ch.want(t, id.EventAddrResolved)
		if err := cid.ResolveRoute(time.Second); err != nil {
			t.Fatal(err)
		}
		ch.want(t, id.EventRouteResolved)
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		if err := cid.CreateQP(&id.QPInitAttr{}); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&m1)
		if d := m1.TotalAlloc - m0.TotalAlloc; d > 24<<10 {
			t.Errorf("CreateQP allocated %d bytes", d)
		}
		for k := range 256 {
			if err := cid.PostRecv(uint64(k), nil, nil); err != nil {
				t.Fatalf("receive %d: %v", k, err)
			}
		}
		if err := cid.PostRecv(256, nil, nil); !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("receive 257: %v, want ENOMEM", err)
		}
		_ = cid.Destroy()
		_ = ch.src.Close()
		quiesceFabs(t, f)
	})
	t.Run("laps", func(t *testing.T) {
		const depth, laps = 20, 3
		p := newPair(t, pairOpts{attr: id.QPInitAttr{Cap: id.QPCap{MaxSendWR: depth, MaxRecvWR: depth}}})
		p.disconnect = true
		defer p.close()
		rbuf := make([]byte, depth*8)
		rm := reg(t, p.srv, rbuf, id.AccessLocalWrite)
		sbuf := make([]byte, depth*8)
		sm := reg(t, p.cli, sbuf, 0)
		for lap := range laps {
			for k := range depth {
				if err := p.srv.id.PostRecv(uint64(k), rbuf[k*8:k*8+8], rm); err != nil {
					t.Fatal(err)
				}
			}
			for k := range depth {
				copy(sbuf[k*8:], fmt.Sprintf("%03d-%04d", lap, k))
				if err := p.cli.id.PostSend(uint64(k), sbuf[k*8:k*8+8], sm, id.SendSignaled); err != nil {
					t.Fatalf("lap %d send %d: %v", lap, k, err)
				}
			}
			for k := range depth {
				if wc := comp(t, p.srv.qp.RecvCQ()); wc.WRID != uint64(k) || wc.Status != id.WCSuccess || wc.ByteLen != 8 {
					t.Fatalf("lap %d receive %d: %+v", lap, k, wc)
				}
				if wc := comp(t, p.cli.qp.SendCQ()); wc.WRID != uint64(k) || wc.Status != id.WCSuccess {
					t.Fatalf("lap %d send completion %d: %+v", lap, k, wc)
				}
			}
			for k := range depth {
				if got, want := string(rbuf[k*8:k*8+8]), fmt.Sprintf("%03d-%04d", lap, k); got != want {
					t.Fatalf("lap %d slot %d: %q, want %q", lap, k, got, want)
				}
			}
		}
	})
}

// connCycle starts a server on f (a channel accepting each request and
// destroying its id on DISCONNECTED) and returns a function that makes and
// tears down one connection to it with a synchronous client id, as the
// set-up benchmark does: resolve, route, connect, disconnect, destroy,
// and waits until the server's id is destroyed. The server stops at t's
// cleanup.
func connCycle(t *testing.T, f *soft.Fabric) func() {
	t.Helper()
	srv := newRCChan(t, f)
	t.Cleanup(func() { _ = srv.src.Close() })
	lis := listen(t, srv)
	t.Cleanup(func() { _ = lis.Destroy() })
	dst := lis.LocalAddr()
	destroyed := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := id.NextEvent(ctx, srv.src, true)
			if err != nil {
				return
			}
			switch typ, cm := ev.Type, ev.ID; typ {
			case id.EventConnectRequest:
				err := cm.Accept(nil)
				_ = ev.Ack()
				if err != nil {
					_ = cm.Destroy()
				}
			case id.EventDisconnected:
				_ = ev.Ack()
				_ = cm.Destroy()
				destroyed <- struct{}{}
			default:
				_ = ev.Ack()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	bound, stop := context.WithTimeout(ctx, time.Minute)
	t.Cleanup(stop)
	return func() {
		cm, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
		if err != nil {
			t.Fatal(err)
		}
		if err := cm.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
			t.Fatal(err)
		}
		if err := cm.ResolveRoute(2 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := cm.Connect(nil); err != nil {
			t.Fatal(err)
		}
		if err := cm.Disconnect(); err != nil {
			t.Fatal(err)
		}
		if err := cm.Destroy(); err != nil {
			t.Fatal(err)
		}
		select {
		case <-destroyed:
		case <-bound.Done(): // made once: a timer per cycle would be counted
			t.Fatal("the server's id was not destroyed")
		}
	}
}

// TestConnCycleAllocs: a connection made and torn down as the set-up
// benchmark makes it (a synchronous client id: resolve, route, connect,
// disconnect, destroy; a server on a channel accepting and destroying on
// DISCONNECTED), both ends in this process, allocates at most
// connCycleAllocs per connection (finding 25 in BENCHMARKS.md: 52 before,
// with an MPA frame copied per handshake, the RTR and its answer built in
// a tx buffer each, a method value per path, per path timer and per
// destroy, a closure per connect, a condition variable and a map per
// synchronous id, a weak pointer per private channel, a channel per
// event queue; 31 after, and one of slack for the request timer a loaded
// machine arms now and then; finding 29: 27, the path timers in the
// loop's deadline heap instead of a time.AfterFunc each; finding 32: 23,
// the connections' own timers, the connect timeout and the linger, in
// that heap too, and the slack kept). Under the race detector pools drop
// items: the count is only logged.
func TestConnCycleAllocs(t *testing.T) {
	const connCycleAllocs = 24
	f := soft.New()
	t.Cleanup(f.Quiesce) // after connCycle's cleanups
	cycle := connCycle(t, f)
	for range 20 { // warm: the loops, the route cache, the pools
		cycle()
	}
	n := testing.AllocsPerRun(200, cycle)
	t.Logf("%.1f allocations per connection, both ends", n)
	if n > connCycleAllocs && !soft.RaceEnabled {
		t.Fatalf("%.1f allocations per connection, want at most %d", n, connCycleAllocs)
	}
}

// TestConnCycleLoopReads: the loops read every socket of a connection's
// set-up and tear-down (the MPA Request and Reply, the RTR and its
// answer, the ends of stream) into their own read buffer, never into a
// 16 KiB stack buffer zeroed per read (four such reads per connection
// before: a sixth of a set-up's user-space instructions).
func TestConnCycleLoopReads(t *testing.T) {
	f := soft.New()
	t.Cleanup(f.Quiesce) // after connCycle's cleanups
	cycle := connCycle(t, f)
	reads := soft.CountStackReads(t)
	for range 20 {
		cycle()
	}
	if n := reads(); n != 0 {
		t.Errorf("%d reads into a stack buffer in 20 connections, want 0", n)
	}
}
