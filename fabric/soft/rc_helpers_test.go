package soft_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// rcChan is a bare event channel over a fabric source: the RC tests read
// it with id.NextEvent and close the source themselves.
type rcChan struct{ src fabric.EventSource }

func (c *rcChan) Source() fabric.EventSource { return c.src }

func newRCChan(t testing.TB, f *soft.Fabric) *rcChan {
	t.Helper()
	src, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	return &rcChan{src: src}
}

// rcEvent is what tests keep of an event (the event itself is acked).
type rcEvent struct {
	Type   id.EventType
	ID     *id.ID
	Status int
}

// nextEv returns the next event within d, or ok false.
func (c *rcChan) nextEv(d time.Duration) (rcEvent, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := id.NextEvent(ctx, c.src, true)
	if err != nil {
		return rcEvent{}, false
	}
	r := rcEvent{Type: ev.Type, ID: ev.ID, Status: ev.Status}
	_ = ev.Ack()
	return r, true
}

// want returns the next event, failing unless it has type t.
func (c *rcChan) want(tb testing.TB, t id.EventType) rcEvent {
	tb.Helper()
	ev, ok := c.nextEv(10 * time.Second)
	if !ok {
		tb.Fatalf("no event, want %s", t)
	}
	if ev.Type != t {
		tb.Fatalf("event %s (status %d), want %s", ev.Type, ev.Status, t)
	}
	return ev
}

// none checks that no event arrives within d.
func (c *rcChan) none(tb testing.TB, d time.Duration) {
	tb.Helper()
	if ev, ok := c.nextEv(d); ok {
		tb.Fatalf("unexpected event %s (status %d)", ev.Type, ev.Status)
	}
}

// rcEnd is one side of a test connection.
type rcEnd struct {
	id *id.ID
	qp id.QP
}

// pairOpts configures rcPair.
type pairOpts struct {
	srvFab, cliFab *soft.Fabric
	attr           id.QPInitAttr
	param          *id.ConnParam                 // client's; nil: IRD/ORD 4
	prepSrv        func(tb testing.TB, e *rcEnd) // after CreateQP, before accept
	prepCli        func(tb testing.TB, e *rcEnd) // after CreateQP, before connect
}

// rcPair is a listener and one connection over loopback.
type rcPair struct {
	tb         testing.TB
	srvCh      *rcChan
	cliCh      *rcChan
	lis        *id.ID
	srv, cli   *rcEnd
	fabs       []*soft.Fabric
	keepSrvCh  bool
	disconnect bool
}

func listen(tb testing.TB, ch *rcChan) *id.ID {
	tb.Helper()
	lis, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		tb.Fatal(err)
	}
	if err := lis.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		tb.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		tb.Fatal(err)
	}
	return lis
}

// dial connects a new client id on ch to the listener's port, calling prep
// between CreateQP and Connect. It waits for ROUTE_RESOLVED only.
func dial(tb testing.TB, ch *rcChan, port uint16, attr id.QPInitAttr, param *id.ConnParam, prep func(testing.TB, *rcEnd)) *rcEnd {
	tb.Helper()
	cid, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		tb.Fatal(err)
	}
	if err := cid.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), time.Second); err != nil {
		tb.Fatal(err)
	}
	ch.want(tb, id.EventAddrResolved)
	if err := cid.ResolveRoute(time.Second); err != nil {
		tb.Fatal(err)
	}
	ch.want(tb, id.EventRouteResolved)
	if err := cid.CreateQP(&attr); err != nil {
		tb.Fatal(err)
	}
	e := &rcEnd{id: cid, qp: cid.QP()}
	if prep != nil {
		prep(tb, e)
	}
	if param == nil {
		param = &id.ConnParam{ResponderResources: 4, InitiatorDepth: 4}
	}
	if err := cid.Connect(param); err != nil {
		tb.Fatal(err)
	}
	return e
}

// acceptNext takes the next CONNECT_REQUEST on ch, creates the QP, runs
// prep and accepts.
func acceptNext(tb testing.TB, ch *rcChan, attr id.QPInitAttr, prep func(testing.TB, *rcEnd)) *rcEnd {
	tb.Helper()
	ev := ch.want(tb, id.EventConnectRequest)
	if err := ev.ID.CreateQP(&attr); err != nil {
		tb.Fatal(err)
	}
	e := &rcEnd{id: ev.ID, qp: ev.ID.QP()}
	if prep != nil {
		prep(tb, e)
	}
	if err := ev.ID.Accept(nil); err != nil {
		tb.Fatal(err)
	}
	return e
}

func newPair(tb testing.TB, o pairOpts) *rcPair {
	tb.Helper()
	if o.srvFab == nil {
		o.srvFab = soft.New()
	}
	if o.cliFab == nil {
		o.cliFab = o.srvFab
	}
	p := &rcPair{tb: tb, fabs: []*soft.Fabric{o.srvFab, o.cliFab}}
	p.srvCh, p.cliCh = newRCChan(tb, o.srvFab), newRCChan(tb, o.cliFab)
	p.lis = listen(tb, p.srvCh)
	p.cli = dial(tb, p.cliCh, p.lis.LocalAddr().Port(), o.attr, o.param, o.prepCli)
	p.srv = acceptNext(tb, p.srvCh, o.attr, o.prepSrv)
	p.srvCh.want(tb, id.EventEstablished)
	p.cliCh.want(tb, id.EventEstablished)
	return p
}

// close disconnects (if still connected), destroys everything and checks
// that no goroutine outlives the fabrics.
func (p *rcPair) close() {
	tb := p.tb
	tb.Helper()
	if p.disconnect {
		_ = p.cli.id.Disconnect()
		p.cliCh.want(tb, id.EventDisconnected)
		p.srvCh.want(tb, id.EventDisconnected)
	}
	for _, i := range []*id.ID{p.cli.id, p.srv.id, p.lis} {
		if err := i.Destroy(); err != nil {
			tb.Error(err)
		}
	}
	_ = p.srvCh.src.Close()
	_ = p.cliCh.src.Close()
	quiesceFabs(tb, p.fabs...)
}

// quiesceFabs quiesces fabs and checks that no goroutine outlives them.
func quiesceFabs(tb testing.TB, fabs ...*soft.Fabric) {
	tb.Helper()
	for _, f := range fabs {
		f.Quiesce()
	}
	if t, ok := tb.(*testing.T); ok {
		goleak.VerifyNone(t)
	}
}

// reg registers a buffer or fails.
func reg(tb testing.TB, e *rcEnd, buf []byte, a id.Access) id.MR {
	tb.Helper()
	if len(buf) == 0 {
		buf = make([]byte, 1)
	}
	m, err := e.qp.RegMR(buf, a)
	if err != nil {
		tb.Fatal(err)
	}
	return m
}

const rwAccess = id.AccessLocalWrite | id.AccessRemoteRead | id.AccessRemoteWrite

// comp waits for the next completion on cq.
func comp(tb testing.TB, cq id.CQ) id.WC {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wc [1]id.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			tb.Fatalf("waiting for a completion: %v", err)
		}
	}
}

// wantWC checks a completion's status and opcode.
func wantWC(tb testing.TB, wc id.WC, st id.WCStatus, op id.WCOpcode) {
	tb.Helper()
	if wc.Status != st || wc.Opcode != op {
		tb.Fatalf("completion %+v: status %s opcode %d, want %s %d", wc, wc.Status, wc.Opcode, st, op)
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// recrc recomputes the CRC of a whole, hand-edited FPDU.
func recrc(b []byte, crc bool) []byte {
	if crc {
		n := len(b) - iwarp.CRCLen
		binary.LittleEndian.PutUint32(b[n:], iwarp.CRC32c(b[:n]))
	}
	return b
}

// rawULPDU wraps arbitrary ULPDU bytes into an FPDU.
func rawULPDU(u []byte, crc bool) []byte {
	b, _ := iwarp.AppendFPDU(nil, nil, u, crc)
	return b
}

// readMPA reads one MPA frame from a raw peer connection; extra bytes
// that came with it are returned too.
func readMPA(tb testing.TB, c net.Conn) (iwarp.MPAFrame, []byte) {
	tb.Helper()
	var buf []byte
	var tmp [512]byte
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		var f iwarp.MPAFrame
		n, err := iwarp.ParseMPA(buf, &f)
		if err == nil {
			f.PrivateData = append([]byte(nil), f.PrivateData...)
			return f, buf[n:]
		}
		if !errors.Is(err, iwarp.ErrShort) {
			tb.Fatalf("MPA frame: %v", err)
		}
		k, err := c.Read(tmp[:])
		if err != nil {
			tb.Fatalf("reading the MPA frame: %v", err)
		}
		buf = append(buf, tmp[:k]...)
	}
}

// readAll reads until EOF (or an error) and returns the FPDUs' ULPDUs.
func readULPDUs(tb testing.TB, c net.Conn, crc bool, pre []byte) [][]byte {
	tb.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	rest, _ := io.ReadAll(c)
	b := append(pre, rest...)
	var out [][]byte
	for len(b) > 0 {
		u, n, err := iwarp.ParseFPDU(b, crc)
		if err != nil {
			tb.Fatalf("FPDU from the fabric: %v (%x)", err, b)
		}
		out = append(out, append([]byte(nil), u...))
		b = b[n:]
	}
	return out
}
