package soft_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// TestSharedCQ: a completion queue made apart from any QP (ID.CreateCQ)
// serves the QPs given it, as ibv_create_cq's queue does the QPs that name
// it as send_cq and recv_cq: two server connections share one queue for
// both directions, and each completion carries its QP's number and its
// work request's id. The queue outlives its QPs: its Destroy is EBUSY
// while a QP uses it and works once none does, when what the QPs queued
// has been taken or not; a second Destroy, and a QP asking for a destroyed
// queue or for one of another fabric, is EINVAL.
func TestSharedCQ(t *testing.T) {
	g := newCQRig(t, 4)
	cq := g.cq
	attr := id.QPInitAttr{SendCQ: cq, RecvCQ: cq}
	for k := range 2 {
		g.connect(t, attr, func(tb testing.TB, e *rcEnd) {
			buf := make([]byte, 64)
			if err := e.qp.PostRecv(&id.RecvWR{WRID: uint64(100 + k), Buf: buf, MR: reg(tb, e, buf, id.AccessLocalWrite)}); err != nil {
				tb.Fatal(err)
			}
		})
	}
	cli, srv := g.cli, g.srv
	for k := range srv {
		if srv[k].qp.SendCQ() != id.CQ(cq) || srv[k].qp.RecvCQ() != id.CQ(cq) {
			t.Fatalf("server QP %d: its queues are not the shared one", k)
		}
	}
	if srv[0].qp.Num() == srv[1].qp.Num() {
		t.Fatalf("two QPs numbered %d", srv[0].qp.Num())
	}

	// Each client sends one message; each server QP answers with one.
	for k, c := range cli {
		msg := []byte(fmt.Sprintf("to server QP %d", k))
		if err := c.qp.PostSend(&id.SendWR{WRID: uint64(k), Opcode: id.WRSend, Buf: msg, MR: reg(t, c, msg, id.AccessLocalWrite), Flags: id.SendInline}); err != nil {
			t.Fatal(err)
		}
	}
	for k, s := range srv {
		msg := []byte("reply")
		if err := s.qp.PostSend(&id.SendWR{WRID: uint64(200 + k), Opcode: id.WRSend, Buf: msg, MR: reg(t, s, msg, id.AccessLocalWrite), Flags: id.SendSignaled | id.SendInline}); err != nil {
			t.Fatal(err)
		}
	}
	type seen struct {
		qp   uint32
		wrID uint64
		op   id.WCOpcode
	}
	var got []seen
	for range 4 {
		wc := comp(t, cq)
		if wc.Status != id.WCSuccess {
			t.Fatalf("completion %+v", wc)
		}
		got = append(got, seen{wc.QPNum, wc.WRID, wc.Opcode})
	}
	want := []seen{
		{srv[0].qp.Num(), 100, id.WCRecv}, {srv[1].qp.Num(), 101, id.WCRecv},
		{srv[0].qp.Num(), 200, id.WCSend}, {srv[1].qp.Num(), 201, id.WCSend},
	}
	key := func(a, b seen) int { return int(a.wrID) - int(b.wrID) }
	slices.SortFunc(got, key)
	if !slices.Equal(got, want) {
		t.Fatalf("completions %+v, want %+v", got, want)
	}
	for _, c := range cli { // the clients' own queues: their receives are not posted, their sends unsignaled
		if n := c.qp.SendCQ().Poll(make([]id.WC, 4)); n != 0 {
			t.Fatalf("a client's own send queue holds %d completions", n)
		}
	}

	// Destroy: busy while a QP uses the queue, even one QP.
	mustErrno(t, cq.Destroy(), syscall.EBUSY)
	if err := srv[0].id.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	mustErrno(t, cq.Destroy(), syscall.EBUSY)
	if cq.Fd() < 0 {
		t.Fatal("the shared queue's descriptor went with a QP")
	}
	if err := srv[1].id.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatalf("Destroy once no QP uses the queue: %v", err)
	}
	mustErrno(t, cq.Destroy(), syscall.EINVAL)
	if cq.Fd() >= 0 {
		t.Fatal("a destroyed queue still has a descriptor")
	}
	mustErrno(t, srv[0].id.CreateQP(&attr), syscall.EINVAL)

	// A queue of another fabric.
	h := soft.New()
	hCh := newRCChan(t, h)
	other, err := id.Create(hCh, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	ocq, err := other.CreateCQ(1)
	if err != nil {
		t.Fatal(err)
	}
	mustErrno(t, srv[1].id.CreateQP(&id.QPInitAttr{RecvCQ: ocq}), syscall.EINVAL)
	if err := srv[1].id.CreateQP(&id.QPInitAttr{}); err != nil { // the failed attempt left nothing behind
		t.Fatal(err)
	}
	if err := ocq.Destroy(); err != nil {
		t.Fatalf("the other fabric's queue after a refused CreateQP: %v", err)
	}
	_ = other.Destroy()
	_ = hCh.src.Close()

	g.destroyIDs(t)
	g.close(t, h)
}

// TestCreateCQErrors: ID.CreateCQ needs the id bound to a device, as
// CreateQP does (EINVAL before, and after Destroy), and a depth of at
// least 1 (EINVAL); a QP's own queue cannot be destroyed apart from it
// (EINVAL).
func TestCreateCQErrors(t *testing.T) {
	f := soft.New()
	ch := newRCChan(t, f)
	defer func() { _ = ch.src.Close(); quiesceFabs(t, f) }()
	i, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	_, err = i.CreateCQ(1)
	mustErrno(t, err, syscall.EINVAL)
	if err := i.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	_, err = i.CreateCQ(0)
	mustErrno(t, err, syscall.EINVAL)
	if err := i.CreateQP(nil); err != nil {
		t.Fatal(err)
	}
	own, ok := i.QP().SendCQ().(id.SharedCQ)
	if !ok {
		t.Fatal("a soft QP's queue is not a SharedCQ")
	}
	mustErrno(t, own.Destroy(), syscall.EINVAL)
	if err := i.Destroy(); err != nil {
		t.Fatal(err)
	}
	_, err = i.CreateCQ(1)
	mustErrno(t, err, syscall.EINVAL)
}

// TestSharedCQUD: a UD QP's sends and receives complete on a shared queue
// too, a receive's completion with its sender's address and QP number as
// on the QP's own queue.
func TestSharedCQUD(t *testing.T) {
	f := udFabric(t)
	p := connectUD(t, f, id.PSUDP, lo4)
	x := create(t, p.cch, id.PSUDP)
	defer destroy(x)
	if err := x.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	cq, err := x.CreateCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.CreateQP(&id.QPInitAttr{SendCQ: cq, RecvCQ: cq}); err != nil {
		t.Fatal(err)
	}
	xb, sb := regUD(t, x, 16), regUD(t, p.srv, 16)
	if err := x.PostRecv(1, xb.buf, xb.mr); err != nil {
		t.Fatal(err)
	}
	if err := p.srv.PostRecv(2, sb.buf, sb.mr); err != nil {
		t.Fatal(err)
	}
	if err := x.PostUDSend(3, []byte("ping"), nil, id.SendInline|id.SendSignaled, &p.est.AH, p.est.QPNum); err != nil {
		t.Fatal(err)
	}
	if wc := comp(t, cq); wc.Status != id.WCSuccess || wc.Opcode != id.WCSend || wc.WRID != 3 || wc.QPNum != x.QP().Num() {
		t.Fatalf("send completion %+v", wc)
	}
	wc := recvComp(t, p.srv)
	ah, err := id.AHFromWC(&wc, sb.buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.srv.PostUDSend(4, []byte("pong"), nil, id.SendInline, &ah, wc.SrcQP); err != nil {
		t.Fatal(err)
	}
	got := comp(t, cq)
	if got.Status != id.WCSuccess || got.Opcode != id.WCRecv || got.WRID != 1 || got.QPNum != x.QP().Num() ||
		got.SrcQP != p.srv.QP().Num() || got.Src.Addr() != lo4 || string(xb.buf[40:44]) != "pong" {
		t.Fatalf("receive completion %+v, data %q; want from QP %d at %s", got, xb.buf[40:44], p.srv.QP().Num(), lo4)
	}
	mustErrno(t, cq.Destroy(), syscall.EBUSY)
	if err := x.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	if err := cq.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestSharedCQReactor: a shared queue registered once with a reactor
// (its descriptor, which the connections' loops keep readable while
// completions wait) hands the receives of several connections to one
// handler, each naming its QP; the queue outlives a connection's QP and
// keeps serving the others.
func TestSharedCQReactor(t *testing.T) {
	g := newCQRig(t, 16)
	cq := g.cq
	r, err := reactor.New(reactor.WithWorkers(2))
	if err != nil {
		t.Fatal(err)
	}
	type recv struct {
		qp   uint32
		wrID uint64
	}
	got := make(chan recv, 16)
	if err := r.RegisterCQ(cq, reactor.CompletionFunc(func(wc *id.WC) error {
		if wc.Status == id.WCSuccess {
			got <- recv{wc.QPNum, wc.WRID}
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	const conns = 3
	attr := id.QPInitAttr{RecvCQ: cq}
	bufs := make([][]byte, conns)
	mrs := make([]id.MR, conns)
	for k := range conns {
		g.connect(t, attr, func(tb testing.TB, e *rcEnd) {
			bufs[k] = make([]byte, 64)
			mrs[k] = reg(tb, e, bufs[k], id.AccessLocalWrite)
		})
	}
	cli, srv := g.cli, g.srv
	round := func(n int, live []int) {
		t.Helper()
		want := map[recv]bool{}
		for _, k := range live {
			wr := uint64(1000*n + k)
			if err := srv[k].qp.PostRecv(&id.RecvWR{WRID: wr, Buf: bufs[k], MR: mrs[k]}); err != nil {
				t.Fatal(err)
			}
			want[recv{srv[k].qp.Num(), wr}] = true
			msg := []byte("hello")
			if err := cli[k].qp.PostSend(&id.SendWR{Opcode: id.WRSend, Buf: msg, MR: reg(t, cli[k], msg, id.AccessLocalWrite), Flags: id.SendInline}); err != nil {
				t.Fatal(err)
			}
		}
		for range live {
			select {
			case c := <-got:
				if !want[c] {
					t.Fatalf("completion %+v, want one of %v", c, want)
				}
				delete(want, c)
			case <-time.After(10 * time.Second):
				t.Fatalf("completions missing: %v", want)
			}
		}
	}
	round(1, []int{0, 1, 2})
	if err := srv[1].id.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	round(2, []int{0, 2})

	if err := r.UnregisterCQ(cq); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.destroyIDs(t)
	if err := cq.Destroy(); err != nil {
		t.Fatalf("Destroy once every id is gone: %v", err)
	}
	g.close(t)
}

// cqRig is a listener on a software fabric with a completion queue made
// on it (ID.CreateCQ), and the connections made to it.
type cqRig struct {
	f            *soft.Fabric
	srvCh, cliCh *rcChan
	lis          *id.ID
	cq           id.SharedCQ
	cli, srv     []*rcEnd
}

// newCQRig listens on a new fabric and makes a queue of depth entries on
// the listener.
func newCQRig(t *testing.T, depth int) *cqRig {
	t.Helper()
	g := &cqRig{f: soft.New()}
	g.srvCh, g.cliCh = newRCChan(t, g.f), newRCChan(t, g.f)
	g.lis = listen(t, g.srvCh)
	var err error
	if g.cq, err = g.lis.CreateCQ(depth); err != nil {
		t.Fatal(err)
	}
	return g
}

// connect makes one more connection: the client's QP has its own queues,
// the server's takes attr, and prep runs on it before the accept.
func (g *cqRig) connect(t *testing.T, attr id.QPInitAttr, prep func(testing.TB, *rcEnd)) {
	t.Helper()
	g.cli = append(g.cli, dial(t, g.cliCh, g.lis.LocalAddr().Port(), id.QPInitAttr{}, nil, nil))
	g.srv = append(g.srv, acceptNext(t, g.srvCh, attr, prep))
	g.srvCh.want(t, id.EventEstablished)
	g.cliCh.want(t, id.EventEstablished)
}

// destroyIDs destroys the connections' ids and the listener.
func (g *cqRig) destroyIDs(t *testing.T) {
	t.Helper()
	for _, e := range append(g.cli, g.srv...) {
		if err := e.id.Destroy(); err != nil {
			t.Error(err)
		}
	}
	if err := g.lis.Destroy(); err != nil {
		t.Error(err)
	}
}

// close closes the channels and checks that no goroutine outlives the
// rig's fabric and more.
func (g *cqRig) close(t *testing.T, more ...*soft.Fabric) {
	t.Helper()
	_ = g.srvCh.src.Close()
	_ = g.cliCh.src.Close()
	quiesceFabs(t, append(more, g.f)...)
}
