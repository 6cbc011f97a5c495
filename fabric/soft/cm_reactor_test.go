package soft_test

import (
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// TestReactorMultiplexesChannelAndCompletionQueue: one reactor serves the
// server's event channel and the receive completion queue of the QP it
// accepts; every message arrives once, in order, through the CQ handler.
func TestReactorMultiplexesChannelAndCompletionQueue(t *testing.T) {
	const msgs, size = 200, 64
	sch, cch := newChannel(t, nil), newChannel(t, nil)
	r, err := reactor.New(reactor.WithWorkers(3))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())

	var (
		mu      sync.Mutex
		got     []uint32
		srv     *id.ID
		srvBufs = make([]byte, msgs*size)
		done    = make(chan struct{})
	)
	onRecv := reactor.CompletionFunc(func(wc *id.WC) error {
		if wc.Status != id.WCSuccess || wc.Opcode != id.WCRecv || wc.ByteLen != size {
			t.Errorf("completion %+v", wc)
		}
		seq := binary.BigEndian.Uint32(srvBufs[wc.WRID*size:])
		mu.Lock()
		got = append(got, seq)
		if len(got) == msgs {
			close(done)
		}
		mu.Unlock()
		return nil
	})
	mux := handlers.New().
		OnConnectRequest(func(ev *id.Event) error {
			srv = ev.ID
			if err := srv.CreateQP(nil); err != nil {
				return err
			}
			mr, err := srv.RegMsgs(srvBufs)
			if err != nil {
				return err
			}
			for k := 0; k < msgs; k++ {
				if err := srv.PostRecv(uint64(k), srvBufs[k*size:(k+1)*size], mr); err != nil {
					return err
				}
			}
			if err := r.RegisterCQ(srv.QP().RecvCQ(), onRecv); err != nil {
				return err
			}
			return srv.Accept(nil)
		}).
		DefaultFunc(func(*id.Event) error { return nil })
	if err := r.Register(sch, mux); err != nil {
		t.Fatal(err)
	}
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := mkID(t, cch, nil, id.PSTCP)
	defer cli.Destroy()
	resolve(t, cch, cli, l.LocalAddr())
	if err := cli.CreateQP(&id.QPInitAttr{SigAll: true}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, msgs*size)
	mr, err := cli.RegMsgs(buf)
	if err != nil {
		t.Fatal(err)
	}
	_ = cli.Connect(nil)
	_ = next(t, cch, id.EventEstablished).Ack()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for k := 0; k < msgs; k++ {
		m := buf[k*size : (k+1)*size]
		binary.BigEndian.PutUint32(m, uint32(k))
		if err := cli.PostSend(uint64(k), m, mr, 0); err != nil {
			t.Fatal(err)
		}
		if wc, err := cli.GetSendComp(ctx); err != nil || wc.Status != id.WCSuccess {
			t.Fatalf("send %d: %+v %v", k, wc, err)
		}
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("%d of %d messages through the reactor", len(got), msgs)
	}
	mu.Lock()
	for k, s := range got {
		if s != uint32(k) {
			t.Fatalf("message %d carried %d", k, s)
		}
	}
	mu.Unlock()
	_ = r.UnregisterCQ(srv.QP().RecvCQ())
	_ = r.Unregister(sch)
	_ = cli.Disconnect()
	_ = next(t, cch, id.EventDisconnected).Ack()
	_ = next(t, sch, id.EventDisconnected).Ack()
	_ = srv.Destroy()
}

// TestPerIDOrderOnPool: a reactor with workers serves many concurrent
// connections; every server-side id sees a legal event sequence, in order.
func TestPerIDOrderOnPool(t *testing.T) {
	const conns = 60
	sch, cch := newChannel(t, nil), newChannel(t, nil)
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
		resolve(t, cch, cli, l.LocalAddr())
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
