package soft_test

import (
	"context"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// Verbs semantics that differ from librdmacm's (issue 16): where regions
// live, when a QP may send, what CreateQP and PostRecv need.

// TestCreateQPNeedsDevice: CreateQP needs the id bound to a device, as
// librdmacm's rdma_create_qp needs id->verbs: an id never bound, or bound
// to a wildcard address, gets EINVAL; bound to an address it works.
func TestCreateQPNeedsDevice(t *testing.T) {
	f := soft.New()
	ch := newRCChan(t, f)
	defer func() { _ = ch.src.Close(); quiesceFabs(t, f) }()
	for _, ps := range []id.PortSpace{id.PSTCP, id.PSUDP} {
		i, err := id.Create(ch, nil, ps)
		if err != nil {
			t.Fatal(err)
		}
		if err := i.CreateQP(nil); !isErrno(err, syscall.EINVAL) {
			t.Errorf("%s: CreateQP on an unbound id: %v, want EINVAL", ps, err)
		}
		if _, err := i.PD(); !isErrno(err, syscall.EINVAL) {
			t.Errorf("%s: PD of an unbound id: %v, want EINVAL", ps, err)
		}
		if _, err := i.RegMsgs(make([]byte, 8)); !isErrno(err, syscall.EINVAL) {
			t.Errorf("%s: RegMsgs on an unbound id: %v, want EINVAL", ps, err)
		}
		if err := i.Bind(netip.MustParseAddrPort("0.0.0.0:0")); err != nil {
			t.Fatal(err)
		}
		if err := i.CreateQP(nil); !isErrno(err, syscall.EINVAL) {
			t.Errorf("%s: CreateQP on an id bound to a wildcard: %v, want EINVAL", ps, err)
		}
		_ = i.Destroy()

		i, err = id.Create(ch, nil, ps)
		if err != nil {
			t.Fatal(err)
		}
		if err := i.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
			t.Fatal(err)
		}
		if err := i.CreateQP(nil); err != nil {
			t.Errorf("%s: CreateQP on a bound id: %v", ps, err)
		}
		_ = i.Destroy()
	}
}

// TestPDOutlivesQP: regions belong to the id's protection domain, not to
// its QP, as with librdmacm's id->pd: RegMsgs works before CreateQP once
// the id is bound, and a region survives DestroyQP + CreateQP, usable by
// the new QP and reachable by the peer. After Destroy the domain is gone.
func TestPDOutlivesQP(t *testing.T) {
	var early id.MR
	earlyBuf := make([]byte, 16)
	p := newPair(t, pairOpts{})
	p.disconnect = true
	defer p.close()

	// Before CreateQP, on a bound id.
	i, err := id.Create(p.cliCh, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := i.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if early, err = i.RegMsgs(earlyBuf); err != nil {
		t.Fatalf("RegMsgs before CreateQP: %v", err)
	}
	if err := i.CreateQP(nil); err != nil {
		t.Fatal(err)
	}
	if err := i.PostRecv(1, earlyBuf, early); err != nil {
		t.Fatalf("PostRecv with a region registered before CreateQP: %v", err)
	}
	_ = i.Destroy()
	if _, err := i.RegMsgs(earlyBuf); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("RegMsgs after Destroy: %v, want EINVAL", err)
	}

	// Across DestroyQP + CreateQP on a connected id.
	rbuf := make([]byte, 16)
	rm, err := p.srv.id.RegMsgs(rbuf)
	if err != nil {
		t.Fatal(err)
	}
	target := pattern(64, 9)
	tm, err := p.srv.id.RegRead(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.id.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.id.CreateQP(nil); err != nil {
		t.Fatal(err)
	}
	p.srv.qp = p.srv.id.QP()
	if err := p.srv.id.PostRecv(3, rbuf, rm); err != nil {
		t.Fatalf("PostRecv with a region of the destroyed QP's id: %v", err)
	}
	if err := p.cli.id.PostSend(4, []byte("after"), nil, id.SendInline|id.SendSignaled); err != nil {
		t.Fatal(err)
	}
	wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCSend)
	wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
	if string(rbuf[:5]) != "after" {
		t.Fatalf("received %q", rbuf[:5])
	}
	got := make([]byte, 64)
	gm, err := p.cli.id.RegMsgs(got)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cli.id.PostRead(5, got, gm, id.SendSignaled, tm.Addr(), tm.RKey()); err != nil {
		t.Fatal(err)
	}
	wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCRDMARead)
	sameBytes(t, got, target)
	if err := p.srv.id.DeregMR(tm); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.id.DeregMR(tm); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("second DeregMR: %v, want EINVAL", err)
	}
}

// TestPDIsolation: two connections to one listener. A region of one id is
// not usable in a work request of the other (EINVAL), and the other's peer
// cannot reach it by its STag: its Read fails with a remote access error.
func TestPDIsolation(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.disconnect = true
	defer p.close()
	q := dial(t, p.cliCh, p.lis.LocalAddr().Port(), id.QPInitAttr{}, nil, nil)
	qs := acceptNext(t, p.srvCh, id.QPInitAttr{}, nil)
	p.srvCh.want(t, id.EventEstablished)
	p.cliCh.want(t, id.EventEstablished)
	defer func() { _ = q.id.Destroy(); _ = qs.id.Destroy() }()

	secret := pattern(64, 5)
	sm, err := p.srv.id.RegRead(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := qs.id.PostRecv(1, secret, sm); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("PostRecv with another id's region: %v, want EINVAL", err)
	}
	if err := qs.id.DeregMR(sm); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("DeregMR of another id's region: %v, want EINVAL", err)
	}
	got := make([]byte, 64)
	gm, err := q.id.RegMsgs(got)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.id.PostRead(2, got, gm, id.SendSignaled, sm.Addr(), sm.RKey()); err != nil {
		t.Fatal(err)
	}
	wantWC(t, comp(t, q.qp.SendCQ()), id.WCRemAccessErr, id.WCRDMARead)
	p.cliCh.want(t, id.EventDisconnected)
	p.srvCh.want(t, id.EventDisconnected)
	if string(got) == string(secret) {
		t.Fatal("the other connection's peer read the region")
	}
}

// TestPostSendBeforeRTS: a send queue not in RTS refuses posts (EINVAL),
// as verbs do: the active side before ESTABLISHED, the passive side before
// Accept. From Accept's return on the passive side, posts are legal and
// delivered (the responder's hold only delays them).
func TestPostSendBeforeRTS(t *testing.T) {
	f := soft.New()
	srvCh, cliCh := newRCChan(t, f), newRCChan(t, f)
	lis := listen(t, srvCh)
	cbuf := make([]byte, 16)
	var cm id.MR
	cli := dial(t, cliCh, lis.LocalAddr().Port(), id.QPInitAttr{}, nil, func(tb testing.TB, e *rcEnd) {
		if err := e.id.PostSend(1, []byte("early"), nil, id.SendInline); !isErrno(err, syscall.EINVAL) {
			tb.Errorf("active PostSend before connect: %v, want EINVAL", err)
		}
		cm = reg(tb, e, cbuf, id.AccessLocalWrite)
		if err := e.id.PostRecv(2, cbuf, cm); err != nil {
			tb.Fatal(err)
		}
	})
	ev := srvCh.want(t, id.EventConnectRequest)
	if err := ev.ID.CreateQP(nil); err != nil {
		t.Fatal(err)
	}
	if err := ev.ID.PostSend(3, []byte("early"), nil, id.SendInline); !isErrno(err, syscall.EINVAL) {
		t.Errorf("passive PostSend before accept: %v, want EINVAL", err)
	}
	if err := ev.ID.Accept(nil); err != nil {
		t.Fatal(err)
	}
	if err := ev.ID.PostSend(4, []byte("after accept"), nil, id.SendInline|id.SendSignaled); err != nil {
		t.Fatalf("passive PostSend right after accept: %v", err)
	}
	srvCh.want(t, id.EventEstablished)
	cliCh.want(t, id.EventEstablished)
	wc := comp(t, cli.qp.RecvCQ())
	if wc.WRID != 2 || wc.Status != id.WCSuccess || string(cbuf[:wc.ByteLen]) != "after accept" {
		t.Fatalf("client receive %+v %q", wc, cbuf)
	}
	_ = cli.id.Disconnect()
	cliCh.want(t, id.EventDisconnected)
	srvCh.want(t, id.EventDisconnected)
	for _, i := range []*id.ID{cli.id, ev.ID, lis} {
		_ = i.Destroy()
	}
	_ = srvCh.src.Close()
	_ = cliCh.src.Close()
	quiesceFabs(t, f)
}

// TestPostRecvNeedsBuffer: a receive naming a region but no buffer is
// EINVAL, as a scatter entry outside its region is with verbs; a receive
// with neither (for a zero-length Send) is legal.
func TestPostRecvNeedsBuffer(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.disconnect = true
	defer p.close()
	buf := make([]byte, 8)
	m := reg(t, p.srv, buf, id.AccessLocalWrite)
	if err := p.srv.id.PostRecv(1, nil, m); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("PostRecv(nil buffer, region): %v, want EINVAL", err)
	}
	if err := p.srv.qp.PostRecv(&id.RecvWR{WRID: 2, Buf: buf[:0], MR: m}); !isErrno(err, syscall.EINVAL) {
		t.Fatalf("PostRecv(empty buffer, region): %v, want EINVAL", err)
	}
	if err := p.srv.id.PostRecv(3, nil, nil); err != nil {
		t.Fatalf("zero-length receive: %v", err)
	}
	_ = p.cli.id.PostSend(4, nil, nil, 0)
	if wc := comp(t, p.srv.qp.RecvCQ()); wc.WRID != 3 || wc.Status != id.WCSuccess || wc.ByteLen != 0 {
		t.Fatalf("zero-length receive: %+v", wc)
	}
}

// TestCompErrorIsNotSuccess: an errored GetRecvComp or GetSendComp returns
// a WC that does not read as a successful completion.
func TestCompErrorIsNotSuccess(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.disconnect = true
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	for name, get := range map[string]func(context.Context) (id.WC, error){
		"recv": p.srv.id.GetRecvComp, "send": p.srv.id.GetSendComp,
	} {
		wc, err := get(ctx)
		if err == nil {
			t.Fatalf("%s: a completion out of nothing: %+v", name, wc)
		}
		if wc.Status == id.WCSuccess || wc.Status != id.WCGeneralErr {
			t.Fatalf("%s: errored call returned status %q, want %q", name, wc.Status, id.WCGeneralErr)
		}
	}
	// An id without a QP: the same.
	i, err := id.Create(p.cliCh, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = i.Destroy() }()
	if wc, err := i.GetRecvComp(ctx); err == nil || wc.Status == id.WCSuccess {
		t.Fatalf("no QP: %+v %v", wc, err)
	}
}
