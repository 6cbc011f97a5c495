package soft_test

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// Direct receive (rc_rxwait.go): a goroutine blocked on an RC QP's
// completion queue reads the connection itself.

// pingPongN runs n round trips of a 64-byte Send between the pair's ends,
// every wait a CQ.Wait with ctx: the server echoes on its own goroutine.
func pingPongN(t *testing.T, p *rcPair, ctx context.Context, n int) {
	t.Helper()
	cbuf, sbuf := pattern(64, 1), make([]byte, 64)
	cm, sm := reg(t, p.cli, cbuf, id.AccessLocalWrite), reg(t, p.srv, sbuf, id.AccessLocalWrite)
	crecv, srecv := &id.RecvWR{WRID: 1, Buf: cbuf, MR: cm}, &id.RecvWR{WRID: 2, Buf: sbuf, MR: sm}
	csend := &id.SendWR{Opcode: id.WRSend, Buf: cbuf, MR: cm}
	ssend := &id.SendWR{Opcode: id.WRSend, Buf: sbuf, MR: sm}
	if err := p.srv.qp.PostRecv(srecv); err != nil {
		t.Fatal(err)
	}
	echo := make(chan error, 1)
	go func() {
		for k := 0; k < n; k++ {
			wc, err := waitOne(ctx, p.srv.qp.RecvCQ())
			if err == nil && wc.Status != id.WCSuccess {
				err = errors.New("echo: " + wc.Status.String())
			}
			if err == nil && k+1 < n {
				err = p.srv.qp.PostRecv(srecv)
			}
			if err == nil {
				err = p.srv.qp.PostSend(ssend)
			}
			if err != nil {
				echo <- err
				return
			}
		}
		echo <- nil
	}()
	for k := 0; k < n; k++ {
		if err := p.cli.qp.PostRecv(crecv); err != nil {
			t.Fatal(err)
		}
		if err := p.cli.qp.PostSend(csend); err != nil {
			t.Fatal(err)
		}
		wc, err := waitOne(ctx, p.cli.qp.RecvCQ())
		if err != nil {
			t.Fatalf("round trip %d: %v", k, err)
		}
		if wc.Status != id.WCSuccess || wc.ByteLen != 64 {
			t.Fatalf("round trip %d: completion %+v", k, wc)
		}
	}
	if err := <-echo; err != nil {
		t.Fatal(err)
	}
}

// waitOne waits for one completion on cq with CQ.Wait.
func waitOne(ctx context.Context, cq id.CQ) (id.WC, error) {
	var wc [1]id.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return id.WC{}, err
		}
	}
	return wc[0], nil
}

// TestDirectWaitSparesTheLoop: in a ping-pong whose waits block on the
// receive queues, the messages are read by the goroutines waiting for
// them, not by the loop. A claim that lingers past its timer (a machine
// too loaded to wait again within rxLinger) gives the odd message to the
// loop, hence the bound rather than 0; with the loop reading (no direct
// wait) every message is the loop's.
func TestDirectWaitSparesTheLoop(t *testing.T) {
	const n = 200
	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
	}{
		{"background", func() (context.Context, context.CancelFunc) { return context.Background(), func() {} }},
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			defer p.close()
			// A first round trip: the idle path made on demand, the
			// responder's start and the direct readers made.
			pingPongN(t, p, timeoutCtx(t, 10*time.Second), 1)
			cli0, srv0 := soft.LoopReads(p.cli.id.Endpoint()), soft.LoopReads(p.srv.id.Endpoint())
			ctx, cancel := c.ctx()
			defer cancel()
			pingPongN(t, p, ctx, n)
			cli := soft.LoopReads(p.cli.id.Endpoint()) - cli0
			srv := soft.LoopReads(p.srv.id.Endpoint()) - srv0
			if cli+srv > n/4 {
				t.Fatalf("the loop read the connections %d (client) and %d (server) times in %d round trips; want the waiters to read", cli, srv, n)
			}
		})
	}
}

// TestDirectWaitLingerArmedOnce: in a ping-pong whose waits follow each
// other within rxLinger, the linger timer is armed by the first returning
// wait and kept armed by its own firings, not reset by every wait (200
// arms a side before). A claim given back on a machine too loaded to wait
// again in time is armed again, hence the bound rather than 1. A Send
// that comes once the waits stopped is still read, by the loop.
func TestDirectWaitLingerArmedOnce(t *testing.T) {
	const n = 200
	p := newPair(t, pairOpts{})
	defer p.close()
	pingPongN(t, p, context.Background(), 1)
	cli0, srv0 := soft.LingerArms(p.cli.id.Endpoint()), soft.LingerArms(p.srv.id.Endpoint())
	pingPongN(t, p, context.Background(), n)
	cli := soft.LingerArms(p.cli.id.Endpoint()) - cli0
	srv := soft.LingerArms(p.srv.id.Endpoint()) - srv0
	if cli+srv > n/4 {
		t.Fatalf("the linger timers were armed %d (client) and %d (server) times in %d round trips; want about once", cli, srv, n)
	}
	sendUnwaited(t, p, 9, nil)
	// And the claims go back once nothing more comes.
	waitFor(t, func() bool {
		return !soft.DirectClaimed(p.cli.id.Endpoint()) && !soft.DirectClaimed(p.srv.id.Endpoint())
	})
}

// parkedOn starts a goroutine waiting on cq with ctx, waits until it is
// parked reading the connection of qp, and returns what its wait returns.
func parkedOn(t *testing.T, ctx context.Context, qp id.QP, cq id.CQ) <-chan error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- cq.Wait(ctx) }()
	waitFor(t, func() bool { return soft.DirectWaiting(qp) })
	return errc
}

// waitReturn fails unless the wait returns within 5 s, and returns its error.
func waitReturn(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("the parked wait did not return")
		return nil
	}
}

// TestDirectWaitKicks: a waiter parked on its connection's socket returns
// when something other than that socket gives it reason to: a completion
// queued by another goroutine, its context's end, the queue destroyed with
// the QP, the id destroyed, the connection's flush.
func TestDirectWaitKicks(t *testing.T) {
	t.Run("send completion", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		buf := make([]byte, 64)
		m := reg(t, p.cli, buf, id.AccessLocalWrite)
		sb := make([]byte, 64)
		sm := reg(t, p.srv, sb, id.AccessLocalWrite)
		if err := p.srv.qp.PostRecv(&id.RecvWR{Buf: sb, MR: sm}); err != nil {
			t.Fatal(err)
		}
		errc := parkedOn(t, timeoutCtx(t, 10*time.Second), p.cli.qp, p.cli.qp.SendCQ())
		if err := p.cli.qp.PostSend(&id.SendWR{WRID: 9, Opcode: id.WRSend, Flags: id.SendSignaled, Buf: buf, MR: m}); err != nil {
			t.Fatal(err)
		}
		if err := waitReturn(t, errc); err != nil {
			t.Fatal(err)
		}
		wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCSend)
		wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
	})
	t.Run("context", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		ctx, cancel := context.WithCancel(context.Background())
		errc := parkedOn(t, ctx, p.cli.qp, p.cli.qp.RecvCQ())
		cancel()
		if err := waitReturn(t, errc); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait: %v, want context.Canceled", err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if err := p.cli.qp.RecvCQ().Wait(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("wait: %v, want context.DeadlineExceeded", err)
		}
	})
	t.Run("context with AfterFunc", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		ctx := newOwnCtx()
		errc := parkedOn(t, ctx, p.cli.qp, p.cli.qp.RecvCQ())
		ctx.cancel()
		if err := waitReturn(t, errc); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait: %v, want context.Canceled", err)
		}
	})
	// The kick on a context's end is registered once for the waits that
	// come with the same context, and still kicks the later ones; a wait
	// with another context drops it for its own.
	t.Run("context kept between waits", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		buf, sb := make([]byte, 64), make([]byte, 64)
		m, sm := reg(t, p.cli, buf, id.AccessLocalWrite), reg(t, p.srv, sb, id.AccessLocalWrite)
		sendOnce := func(ctx context.Context) { // a wait that returns by a completion
			t.Helper()
			if err := p.srv.qp.PostRecv(&id.RecvWR{Buf: sb, MR: sm}); err != nil {
				t.Fatal(err)
			}
			errc := parkedOn(t, ctx, p.cli.qp, p.cli.qp.SendCQ())
			if err := p.cli.qp.PostSend(&id.SendWR{Opcode: id.WRSend, Flags: id.SendSignaled, Buf: buf, MR: m}); err != nil {
				t.Fatal(err)
			}
			if err := waitReturn(t, errc); err != nil {
				t.Fatal(err)
			}
			wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCSend)
			wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
		}
		a, b := newOwnCtx(), newOwnCtx()
		sendOnce(a)
		sendOnce(a)
		if made, live := a.registered(); made != 1 || live != 1 {
			t.Fatalf("two waits with one context: %d registrations, %d live; want 1, 1", made, live)
		}
		sendOnce(b)
		if made, live := a.registered(); made != 1 || live != 0 {
			t.Fatalf("the first context after a wait with another: %d registrations, %d live; want 1, 0", made, live)
		}
		a.cancel() // no longer watched: the wait with b below stays parked
		errc := parkedOn(t, b, p.cli.qp, p.cli.qp.RecvCQ())
		select {
		case err := <-errc:
			t.Fatalf("the wait with b returned %v when a ended", err)
		case <-time.After(20 * time.Millisecond):
		}
		b.cancel()
		if err := waitReturn(t, errc); !errors.Is(err, context.Canceled) {
			t.Fatalf("wait: %v, want context.Canceled", err)
		}
		if made, _ := b.registered(); made != 1 {
			t.Fatalf("two waits with b: %d registrations, want 1", made)
		}
	})
	t.Run("destroy QP", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		errc := parkedOn(t, timeoutCtx(t, 10*time.Second), p.cli.qp, p.cli.qp.RecvCQ())
		if err := p.cli.id.DestroyQP(); err != nil {
			t.Fatal(err)
		}
		if err := waitReturn(t, errc); !errors.Is(err, syscall.EBADF) {
			t.Fatalf("wait: %v, want EBADF", err)
		}
	})
	t.Run("destroy id", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		errc := parkedOn(t, timeoutCtx(t, 10*time.Second), p.cli.qp, p.cli.qp.RecvCQ())
		qp := p.cli.qp
		if err := p.cli.id.Destroy(); err != nil {
			t.Fatal(err)
		}
		if err := waitReturn(t, errc); !errors.Is(err, syscall.EBADF) {
			t.Fatalf("wait: %v, want EBADF", err)
		}
		if soft.DirectWaiting(qp) {
			t.Fatal("still parked after the wait returned")
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
	})
	t.Run("flush", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		buf := make([]byte, 64)
		if err := p.cli.qp.PostRecv(&id.RecvWR{WRID: 5, Buf: buf, MR: reg(t, p.cli, buf, id.AccessLocalWrite)}); err != nil {
			t.Fatal(err)
		}
		errc := parkedOn(t, timeoutCtx(t, 10*time.Second), p.cli.qp, p.cli.qp.RecvCQ())
		if err := p.cli.id.Disconnect(); err != nil {
			t.Fatal(err)
		}
		if err := waitReturn(t, errc); err != nil {
			t.Fatal(err)
		}
		wc := comp(t, p.cli.qp.RecvCQ())
		if wc.WRID != 5 || wc.Status != id.WCWRFlushErr {
			t.Fatalf("completion %+v, want the receive flushed", wc)
		}
		p.cliCh.want(t, id.EventDisconnected)
		p.srvCh.want(t, id.EventDisconnected)
	})
}

// TestDirectWaitGivesBack: once no waiter holds the connection, the loop
// reads it again: a Send with nobody waiting completes, and the peer's
// Disconnect is reported.
func TestDirectWaitGivesBack(t *testing.T) {
	p := newPair(t, pairOpts{})
	defer p.close()
	pingPongN(t, p, context.Background(), 5)
	sendUnwaited(t, p, 7, func() {
		waitFor(t, func() bool { return !soft.DirectClaimed(p.cli.id.Endpoint()) })
	})
	// The peer's Disconnect right after a wait, while the claim lingers.
	pingPongN(t, p, context.Background(), 1)
	if err := p.srv.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	p.cliCh.want(t, id.EventDisconnected)
	p.srvCh.want(t, id.EventDisconnected)
}

// TestDirectWaitNoPlaceAfterDereg: a region deregistered while a waiter is
// parked reading the connection takes no byte the peer sends afterwards.
func TestDirectWaitNoPlaceAfterDereg(t *testing.T) {
	p := newPair(t, pairOpts{})
	defer p.close()
	buf := make([]byte, 64)
	for k := range buf {
		buf[k] = markerByte
	}
	m := reg(t, p.cli, buf, id.AccessLocalWrite)
	if err := p.cli.qp.PostRecv(&id.RecvWR{WRID: 4, Buf: buf, MR: m}); err != nil {
		t.Fatal(err)
	}
	errc := parkedOn(t, timeoutCtx(t, 10*time.Second), p.cli.qp, p.cli.qp.RecvCQ())
	if err := p.cli.id.DeregMR(m); err != nil {
		t.Fatal(err)
	}
	sb := pattern(64, 3)
	if err := p.srv.qp.PostSend(&id.SendWR{Opcode: id.WRSend, Buf: sb, MR: reg(t, p.srv, sb, id.AccessLocalWrite)}); err != nil {
		t.Fatal(err)
	}
	if err := waitReturn(t, errc); err != nil {
		t.Fatal(err)
	}
	wc := comp(t, p.cli.qp.RecvCQ())
	if wc.WRID != 4 || wc.Status != id.WCLocProtErr {
		t.Fatalf("completion %+v, want a local protection error", wc)
	}
	for k, b := range buf {
		if b != markerByte {
			t.Fatalf("byte %d of the deregistered region changed", k)
		}
	}
	p.cliCh.want(t, id.EventDisconnected)
	p.srvCh.want(t, id.EventDisconnected)
}

// TestDirectWaitDescriptors: a connection whose completions were waited
// for holds one more descriptor (the duplicate its waiters park on), and
// gives it back with the connection; no goroutine outlives the fabric.
func TestDirectWaitDescriptors(t *testing.T) {
	p := newPair(t, pairOpts{})
	before := countFDs(t)
	pingPongN(t, p, context.Background(), 20)
	if n := countFDs(t); n != before+2 {
		t.Fatalf("%d descriptors after the waits, want %d (one duplicate per end)", n, before+2)
	}
	pingPongN(t, p, context.Background(), 20)
	if n := countFDs(t); n != before+2 {
		t.Fatalf("%d descriptors after more waits, want %d", n, before+2)
	}
	p.disconnect = true
	p.close()
	// Every socket of the pair, and both duplicates, closed.
	waitFor(t, func() bool { return countFDs(t) <= before-3 })
}

// ownCtx is a context of its own with an AfterFunc method, which a direct
// wait takes (as it takes the standard library's cancelable contexts).
type ownCtx struct {
	done chan struct{}
	mu   sync.Mutex
	fns  map[int]func()
	next int
	err  error
}

func newOwnCtx() *ownCtx { return &ownCtx{done: make(chan struct{}), fns: map[int]func(){}} }

// registered reports how many AfterFunc registrations were made on c,
// and how many are still waiting for its end.
func (c *ownCtx) registered() (made, live int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next, len(c.fns)
}

func (c *ownCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (c *ownCtx) Done() <-chan struct{}       { return c.done }
func (c *ownCtx) Value(any) any               { return nil }

func (c *ownCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *ownCtx) AfterFunc(f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	k := c.next
	c.next++
	c.fns[k] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.fns[k]
		delete(c.fns, k)
		return ok
	}
}

func (c *ownCtx) cancel() {
	c.mu.Lock()
	c.err = context.Canceled
	close(c.done)
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for _, f := range fns {
		f()
	}
}

// TestDirectWaitPeerClose: the peer's Disconnect reaches a parked waiter
// first: it reads the end of the stream itself, and the connection closes
// as when the loop reads it (the receive flushed, DISCONNECTED on both
// ends, every descriptor closed).
func TestDirectWaitPeerClose(t *testing.T) {
	base := countFDs(t)
	p := newPair(t, pairOpts{})
	buf := make([]byte, 64)
	if err := p.cli.qp.PostRecv(&id.RecvWR{WRID: 6, Buf: buf, MR: reg(t, p.cli, buf, id.AccessLocalWrite)}); err != nil {
		t.Fatal(err)
	}
	errc := parkedOn(t, timeoutCtx(t, 10*time.Second), p.cli.qp, p.cli.qp.RecvCQ())
	if err := p.srv.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	if err := waitReturn(t, errc); err != nil {
		t.Fatal(err)
	}
	if wc := comp(t, p.cli.qp.RecvCQ()); wc.WRID != 6 || wc.Status != id.WCWRFlushErr {
		t.Fatalf("completion %+v, want the receive flushed", wc)
	}
	p.cliCh.want(t, id.EventDisconnected)
	p.srvCh.want(t, id.EventDisconnected)
	p.close()
	waitFor(t, func() bool { return countFDs(t) <= base })
}

// sendUnwaited has the server send 64 bytes of pattern seed to a receive
// the client posts and polls for without waiting on its queue, so that
// only the loop, or a claim that lingers, can read them: the receive
// completes with them. between, if not nil, runs after the receive is
// posted and before the Send.
func sendUnwaited(t *testing.T, p *rcPair, seed byte, between func()) {
	t.Helper()
	buf := make([]byte, 64)
	if err := p.cli.qp.PostRecv(&id.RecvWR{WRID: 3, Buf: buf, MR: reg(t, p.cli, buf, id.AccessLocalWrite)}); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		between()
	}
	sb := pattern(64, seed)
	if err := p.srv.qp.PostSend(&id.SendWR{Opcode: id.WRSend, Buf: sb, MR: reg(t, p.srv, sb, id.AccessLocalWrite)}); err != nil {
		t.Fatal(err)
	}
	var wc [1]id.WC
	waitFor(t, func() bool { return p.cli.qp.RecvCQ().Poll(wc[:]) == 1 })
	if wc[0].WRID != 3 || wc[0].Status != id.WCSuccess {
		t.Fatalf("completion %+v", wc[0])
	}
	sameBytes(t, buf, sb)
}
