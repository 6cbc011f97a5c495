package soft_test

import (
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// oneByOne hides a QP's PostSendList, so that fabric.PostSendList posts
// its requests one PostSend at a time, as on a fabric without lists.
type oneByOne struct{ fabric.QP }

// TestRCPostSendListOneWrite posts an RDMA Write and the Send that
// announces it, as rsockets does for every message, on an idle
// connection: as a list the two leave with one write(2) (SentWrites),
// one PostSend after the other they mostly take two. Both ways the peer finds
// the Write's data when the Send arrives, and the completions come in
// posting order. The initiator asks for no P2P mode, so that no repeated
// RTR (a write of its own) is counted, and no test of the package runs
// in parallel, so the deltas are this test's.
func TestRCPostSendListOneWrite(t *testing.T) {
	const rounds, n = 20, 64
	for _, tc := range []struct {
		name string
		list bool
	}{
		{name: "list", list: true},
		{name: "one-by-one", list: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{srvFab: soft.New(), cliFab: soft.New(soft.WithP2P(0))})
			p.disconnect = true
			defer p.close()
			dst := make([]byte, n)
			dmr, err := p.srv.id.RegWrite(dst)
			if err != nil {
				t.Fatal(err)
			}
			src := make([]byte, n)
			smr := reg(t, p.cli, src, 0)
			word := make([]byte, 4)
			wmr := reg(t, p.srv, word, id.AccessLocalWrite)
			var qp fabric.QP = p.cli.qp
			if !tc.list {
				qp = oneByOne{qp}
			}
			var writes uint64
			for r := range rounds {
				if err := p.srv.id.PostRecv(uint64(r), word, wmr); err != nil {
					t.Fatal(err)
				}
				copy(src, pattern(n, byte(r)))
				wrs := [2]fabric.SendWR{
					{WRID: 2 * uint64(r), Opcode: fabric.WRWrite, Flags: fabric.SendSignaled, Buf: src, MR: smr,
						RemoteAddr: dmr.Addr(), RKey: dmr.RKey()},
					{WRID: 2*uint64(r) + 1, Opcode: fabric.WRSend, Flags: fabric.SendSignaled | fabric.SendInline,
						Buf: []byte{byte(r), 0, 0, 0}},
				}
				before := soft.Traffic()
				if k, err := fabric.PostSendList(qp, wrs[:]); k != 2 || err != nil {
					t.Fatalf("round %d: PostSendList: %d posted, %v", r, k, err)
				}
				for j := range 2 {
					wc := comp(t, p.cli.qp.SendCQ())
					if wc.Status != id.WCSuccess || wc.WRID != 2*uint64(r)+uint64(j) {
						t.Fatalf("round %d: completion %+v, want wr %d", r, wc, 2*r+j)
					}
				}
				wc := comp(t, p.srv.qp.RecvCQ())
				wantWC(t, wc, id.WCSuccess, id.WCRecv)
				writes += soft.Traffic().SentWrites - before.SentWrites
				sameBytes(t, dst, pattern(n, byte(r)))
				sameBytes(t, word, []byte{byte(r), 0, 0, 0})
			}
			t.Logf("%d rounds, %d write(2)s", rounds, writes)
			switch {
			case tc.list && writes != rounds:
				t.Fatalf("%d lists of a Write and a Send took %d write(2)s, want one each", rounds, writes)
			case !tc.list && writes <= rounds:
				// Mostly two each; one where the loop was busy with the
				// connection and took both (rcPath.post).
				t.Fatalf("%d Writes and Sends posted one by one took %d write(2)s, want more than %d", rounds, writes, rounds)
			}
			_ = p.srv.qp.DeregMR(dmr)
			_ = p.cli.qp.DeregMR(smr)
			_ = p.srv.qp.DeregMR(wmr)
		})
	}
}

// TestRCPostSendListPartial checks ibv_post_send's list semantics: the
// requests are taken in order; at the first that cannot be posted the
// error comes back with its index, the requests before it are posted and
// complete in order, and the ones from it on are not posted.
func TestRCPostSendListPartial(t *testing.T) {
	const depth = 4
	p := newPair(t, pairOpts{attr: id.QPInitAttr{Cap: id.QPCap{MaxSendWR: depth}}})
	p.disconnect = true
	defer p.close()
	lp, ok := p.cli.qp.(fabric.SendListPoster)
	if !ok {
		t.Fatal("the soft fabric's RC QP posts no lists")
	}
	send := func(wrid uint64) fabric.SendWR {
		return fabric.SendWR{WRID: wrid, Opcode: fabric.WRSend, Flags: fabric.SendSignaled}
	}
	bad := map[string]fabric.SendWR{
		"opcode":        {WRID: 99, Opcode: fabric.WRSendWithImm},
		"no region":     {WRID: 99, Opcode: fabric.WRSend, Buf: make([]byte, 8)},
		"inline read":   {WRID: 99, Opcode: fabric.WRRead, Flags: fabric.SendInline},
		"inline length": {WRID: 99, Opcode: fabric.WRSend, Flags: fabric.SendInline, Buf: make([]byte, 1<<12)},
		"UD addressing": {WRID: 99, Opcode: fabric.WRSend, RemoteQPN: 3},
	}
	next := uint64(0) // the receives posted, and the Sends that consumed them
	for name, b := range bad {
		t.Run("bad "+name, func(t *testing.T) {
			for range 2 {
				if err := p.srv.id.PostRecv(next, nil, nil); err != nil {
					t.Fatal(err)
				}
				next++
			}
			wrs := []fabric.SendWR{send(1), b, send(3)}
			k, err := lp.PostSendList(wrs)
			if k != 1 || !isErrno(err, syscall.EINVAL) {
				t.Fatalf("list with a bad request at 1: %d posted, %v; want 1, EINVAL", k, err)
			}
			// Only the first was posted: the next Send's completion
			// comes right after it, and the peer got exactly two.
			if err := p.cli.id.PostSend(4, nil, nil, id.SendSignaled); err != nil {
				t.Fatal(err)
			}
			for _, want := range []uint64{1, 4} {
				wc := comp(t, p.cli.qp.SendCQ())
				if wc.Status != id.WCSuccess || wc.Opcode != id.WCSend || wc.WRID != want {
					t.Fatalf("completion %+v, want Send %d", wc, want)
				}
			}
			for range 2 {
				wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
			}
		})
	}
	t.Run("queue full", func(t *testing.T) {
		// The queue is empty; it fills within the list, which is queued
		// under one hold of the QP's lock, before anything completes.
		for range depth {
			if err := p.srv.id.PostRecv(next, nil, nil); err != nil {
				t.Fatal(err)
			}
			next++
		}
		wrs := make([]fabric.SendWR, depth+2)
		for k := range wrs {
			wrs[k] = send(uint64(10 + k))
		}
		k, err := lp.PostSendList(wrs)
		if k != depth || !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("list of %d on a queue of %d: %d posted, %v; want %d, ENOMEM", len(wrs), depth, k, err, depth)
		}
		for j := range depth {
			wc := comp(t, p.cli.qp.SendCQ())
			if wc.Status != id.WCSuccess || wc.WRID != uint64(10+j) {
				t.Fatalf("completion %+v, want Send %d", wc, 10+j)
			}
		}
		for range depth {
			wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
		}
		var wc [1]id.WC
		if p.cli.qp.SendCQ().Poll(wc[:]) != 0 {
			t.Fatalf("completion %+v of a request not posted", wc[0])
		}
	})
	t.Run("empty", func(t *testing.T) {
		if k, err := lp.PostSendList(nil); k != 0 || err != nil {
			t.Fatalf("empty list: %d, %v", k, err)
		}
	})
	t.Run("inline copied", func(t *testing.T) {
		rbuf := make([]byte, 16)
		rmr := reg(t, p.srv, rbuf, id.AccessLocalWrite)
		defer func() { _ = p.srv.qp.DeregMR(rmr) }()
		if err := p.srv.qp.PostRecv(&fabric.RecvWR{WRID: next, Buf: rbuf, MR: rmr}); err != nil {
			t.Fatal(err)
		}
		next++
		msg := []byte("list of one")
		wrs := []fabric.SendWR{{WRID: 20, Opcode: fabric.WRSend, Flags: fabric.SendInline | fabric.SendSignaled, Buf: msg}}
		if k, err := lp.PostSendList(wrs); k != 1 || err != nil {
			t.Fatalf("PostSendList: %d, %v", k, err)
		}
		copy(msg, "XXXXXXXXXXX")
		wrs[0] = fabric.SendWR{}
		wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCSend)
		wc := comp(t, p.srv.qp.RecvCQ())
		wantWC(t, wc, id.WCSuccess, id.WCRecv)
		sameBytes(t, rbuf[:wc.ByteLen], []byte("list of one"))
	})
}

// TestRCPostSendListStates checks a list on a QP that cannot send: before
// RTS and once destroyed nothing is posted (EINVAL at index 0); after the
// connection is gone every request is posted and flushed, in order.
func TestRCPostSendListStates(t *testing.T) {
	two := []fabric.SendWR{{WRID: 1, Opcode: fabric.WRSend, Flags: fabric.SendSignaled},
		{WRID: 2, Opcode: fabric.WRSend}}
	var early struct {
		k   int
		err error
	}
	p := newPair(t, pairOpts{prepCli: func(tb testing.TB, e *rcEnd) {
		early.k, early.err = e.qp.(fabric.SendListPoster).PostSendList(two)
	}})
	defer p.close()
	if early.k != 0 || !isErrno(early.err, syscall.EINVAL) {
		t.Fatalf("before RTS: %d posted, %v; want 0, EINVAL", early.k, early.err)
	}
	if err := p.cli.id.Disconnect(); err != nil {
		t.Fatal(err)
	}
	p.cliCh.want(t, id.EventDisconnected)
	p.srvCh.want(t, id.EventDisconnected)
	if k, err := p.cli.id.PostSendList(two); k != 2 || err != nil {
		t.Fatalf("after the connection: %d posted, %v; want 2 flushed", k, err)
	}
	for _, want := range []uint64{1, 2} { // flushed: reported signaled or not
		wc := comp(t, p.cli.qp.SendCQ())
		if wc.Status != id.WCWRFlushErr || wc.WRID != want {
			t.Fatalf("completion %+v, want wr %d flushed", wc, want)
		}
	}
	qp := p.cli.qp
	if err := p.cli.id.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	if k, err := qp.(fabric.SendListPoster).PostSendList(two); k != 0 || !isErrno(err, syscall.EINVAL) {
		t.Fatalf("destroyed QP: %d posted, %v; want 0, EINVAL", k, err)
	}
	if k, err := p.cli.id.PostSendList(two); k != 0 || !isErrno(err, syscall.EINVAL) {
		t.Fatalf("id without a QP: %d posted, %v; want 0, EINVAL", k, err)
	}
}
