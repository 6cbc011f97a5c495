package soft_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// udFabric returns a private fabric with short SIDR retries and checks, when
// the test ends, that it left no goroutine and no descriptor behind.
func udFabric(t *testing.T, opts ...soft.Option) *soft.Fabric {
	t.Helper()
	ign := goleak.IgnoreCurrent()
	fds := countFDs(t)
	f := soft.New(append([]soft.Option{soft.WithName("ud-" + t.Name()), soft.WithSIDRRetry(20*time.Millisecond, 2)}, opts...)...)
	t.Cleanup(func() {
		f.Quiesce()
		goleak.VerifyNone(t, ign)
		if n := countFDs(t); n > fds {
			t.Errorf("%d descriptors open after the test, %d before", n, fds)
		}
	})
	return f
}

// listenUD makes a listening UD id on addr (port 0 picks one).
func listenUD(t *testing.T, ch *channel.Channel, ps id.PortSpace, addr netip.AddrPort, opts ...id.Option) *id.ID {
	t.Helper()
	l := create(t, ch, ps, opts...)
	if err := l.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	return l
}

// udBufs is a registered buffer for UD messages of up to size bytes (plus
// the GRH).
type udBufs struct {
	mr  id.MR
	buf []byte
}

func regUD(t *testing.T, i *id.ID, size int) *udBufs {
	t.Helper()
	b := make([]byte, size+40)
	mr, err := i.RegMsgs(b)
	if err != nil {
		t.Fatal(err)
	}
	return &udBufs{mr: mr, buf: b}
}

// recvComp waits for the next receive completion of i.
func recvComp(t *testing.T, i *id.ID) id.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc, err := i.GetRecvComp(ctx)
	if err != nil {
		t.Fatalf("receive completion: %v", err)
	}
	return wc
}

// noRecv fails the test if i completes a receive within d.
func noRecv(t *testing.T, i *id.ID, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if wc, err := i.GetRecvComp(ctx); err == nil {
		t.Fatalf("unexpected receive completion %+v", wc)
	}
}

func equalPrefix(t *testing.T, what string, got, want []byte, total int) {
	t.Helper()
	if len(got) != total || !bytes.Equal(got[:len(want)], want) {
		t.Fatalf("%s: %d bytes %x, want %d bytes starting %x", what, len(got), got, total, want)
	}
	for _, c := range got[len(want):] {
		if c != 0 {
			t.Fatalf("%s: padding not zero: %x", what, got)
		}
	}
}

// udPair connects an async UD client to an async UD listener and returns
// the client, the server's new id and the ESTABLISHED parameters.
type udPair struct {
	sch, cch *channel.Channel
	lis, srv *id.ID
	cli      *id.ID
	est      id.UDParam // what the client's ESTABLISHED said
	req      id.UDParam // what the CONNECT_REQUEST said
}

func connectUD(t *testing.T, f *soft.Fabric, ps id.PortSpace, addr netip.Addr, opts ...id.Option) *udPair {
	t.Helper()
	p := &udPair{sch: newChannel(t, f), cch: newChannel(t, f)}
	p.lis = listenUD(t, p.sch, ps, netip.AddrPortFrom(addr, 0), opts...)
	p.cli = create(t, p.cch, ps, opts...)
	resolve(t, p.cch, p.cli, p.lis.LocalAddr())
	if err := p.cli.CreateQP(nil); err != nil {
		t.Fatal(err)
	}
	reqPD := pattern(id.MaxPrivateDataSIDRREQ, 1)
	if err := p.cli.Connect(&id.ConnParam{PrivateData: reqPD}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, p.sch, id.EventConnectRequest)
	if ev.ListenID != p.lis || ev.ID == nil || ev.ID.QPType() != id.UD || ev.ID.PortSpace() != ps {
		t.Fatalf("request: listen id %v, new id %v", ev.ListenID, ev.ID)
	}
	p.srv = ev.ID
	t.Cleanup(func() { destroy(p.srv) })
	p.req = ev.UD
	p.req.PrivateData = append([]byte(nil), ev.UD.PrivateData...)
	ack(t, ev)
	equalPrefix(t, "request private data", p.req.PrivateData, reqPD, id.MaxPrivateDataSIDRREQ)
	if p.req.QPNum != p.cli.QP().Num() || p.req.QKey != id.UDPQKey || p.req.AH.Addr() != addr ||
		p.req.AH.DLID != uint16(p.cli.QP().Num()) {
		t.Fatalf("request UD params %+v, client QP %d", p.req, p.cli.QP().Num())
	}
	if err := p.srv.CreateQP(nil); err != nil {
		t.Fatal(err)
	}
	repPD := pattern(id.MaxPrivateDataSIDRREP, 9)
	if err := p.srv.Accept(&id.ConnParam{PrivateData: repPD}); err != nil {
		t.Fatal(err)
	}
	if s := p.srv.State(); s != id.StateEstablished {
		t.Fatalf("server id after UD accept: %s", s)
	}
	ev = next(t, p.cch, id.EventEstablished)
	p.est = ev.UD
	p.est.PrivateData = append([]byte(nil), ev.UD.PrivateData...)
	ack(t, ev)
	equalPrefix(t, "reply private data", p.est.PrivateData, repPD, id.MaxPrivateDataSIDRREP)
	if p.est.QPNum != p.srv.QP().Num() || p.est.QKey != id.UDPQKey || p.est.AH.Addr() != addr ||
		p.est.AH.DLID != uint16(p.srv.QP().Num()) || p.est.AH.IsGlobal != 1 {
		t.Fatalf("established UD params %+v, server QP %d", p.est, p.srv.QP().Num())
	}
	if a := p.est.AH.DGID; addr.Is4() && !bytes.Equal(a[:12], []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF}) {
		t.Fatalf("DGID %x is not IPv4-mapped", a)
	}
	quiet(t, p.sch, 100*time.Millisecond) // no passive ESTABLISHED
	return p
}

// rawPeer is a plain UDP socket speaking SIDR by hand.
type rawPeer struct {
	t  *testing.T
	fd int
}

func newRawPeer(t *testing.T) *rawPeer {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: lo4.As4()}); err != nil {
		t.Fatal(err)
	}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 300000})
	return &rawPeer{t: t, fd: fd}
}

func (r *rawPeer) send(to netip.AddrPort, b []byte) {
	if err := unix.Sendto(r.fd, b, 0, &unix.SockaddrInet4{Addr: to.Addr().As4(), Port: int(to.Port())}); err != nil {
		r.t.Fatal(err)
	}
}

// recv returns the next datagram, or nil after 300 ms.
func (r *rawPeer) recv() []byte {
	var buf [2048]byte
	n, _, err := unix.Recvfrom(r.fd, buf[:], 0)
	if err != nil {
		return nil
	}
	return append([]byte(nil), buf[:n]...)
}

type udQPExt interface {
	MaxMessageSize() int
	Dropped() uint64
	SetMulticastLoopback(on bool) error
}

func udExt(t *testing.T, i *id.ID) udQPExt {
	t.Helper()
	x, ok := i.QP().(udQPExt)
	if !ok {
		t.Fatalf("QP %T has no UD extensions", i.QP())
	}
	return x
}

// randomGroup returns an IPv4 group and a port no other run of these tests
// is likely to use at the same time.
func randomGroup() (netip.Addr, uint16) {
	return netip.AddrFrom4([4]byte{239, byte(1 + rand.IntN(250)), byte(rand.IntN(256)), byte(1 + rand.IntN(250))}),
		uint16(20000 + rand.IntN(10000))
}

// mcMember is a UD id joined to a group, with a QP and receives posted.
type mcMember struct {
	ch  *channel.Channel
	id  *id.ID
	ud  id.UDParam
	buf *udBufs
}

// joinGroup binds (or resolves to the group, mckey's way) and joins.
func joinGroup(t *testing.T, f *soft.Fabric, local, group netip.Addr, flags id.JoinFlags, resolveToGroup bool, recvs int) *mcMember {
	t.Helper()
	m := &mcMember{ch: newChannel(t, f)}
	m.id = create(t, m.ch, id.PSUDP)
	if resolveToGroup {
		if err := m.id.ResolveAddr(netip.AddrPortFrom(local, 0), netip.AddrPortFrom(group, 0), time.Second); err != nil {
			t.Fatal(err)
		}
		ack(t, next(t, m.ch, id.EventAddrResolved))
	} else if err := m.id.Bind(netip.AddrPortFrom(local, 0)); err != nil {
		t.Fatal(err)
	}
	if err := m.id.CreateQP(nil); err != nil {
		t.Fatal(err)
	}
	m.buf = regUD(t, m.id, 64*max(recvs, 1))
	for k := 0; k < recvs; k++ {
		if err := m.id.PostRecv(uint64(k), m.buf.buf[k*64:(k+1)*64], m.buf.mr); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.id.JoinMulticastContext(context.Background(), group, flags, "ctx"); err != nil {
		t.Fatal(err)
	}
	ev := next(t, m.ch, id.EventMulticastJoin)
	m.ud = ev.UD
	if ev.Group != group || ev.JoinContext != "ctx" || ev.UD.QPNum != 0xFFFFFF || ev.UD.QKey != id.UDPQKey || ev.UD.AH.Addr() != group || ev.UD.AH.IsGlobal != 1 {
		t.Fatalf("MULTICAST_JOIN: group %s ctx %v %+v", ev.Group, ev.JoinContext, ev.UD)
	}
	ack(t, ev)
	return m
}

func (m *mcMember) send(t *testing.T, wrid uint64, msg string) {
	t.Helper()
	copy(m.buf.buf, msg)
	if err := m.id.PostUDSend(wrid, m.buf.buf[:len(msg)], m.buf.mr, 0, &m.ud.AH, m.ud.QPNum); err != nil {
		t.Fatal(err)
	}
}

func (m *mcMember) expect(t *testing.T, wrid uint64, msg string, from *mcMember, group netip.Addr) {
	t.Helper()
	wc := recvComp(t, m.id)
	b := m.buf.buf[wrid*64 : (wrid+1)*64]
	if wc.Status != id.WCSuccess || wc.WRID != wrid || string(b[40:wc.ByteLen]) != msg ||
		wc.SrcQP != from.id.QP().Num() || wc.Src.Addr() != from.id.LocalAddr().Addr() || !wc.GRH {
		t.Fatalf("receive %+v %q, want %d %q from QP %d", wc, b[40:wc.ByteLen], wrid, msg, from.id.QP().Num())
	}
	var dst netip.Addr
	if group.Is4() {
		dst = netip.AddrFrom4([4]byte(b[36:40]))
	} else {
		dst = netip.AddrFrom16([16]byte(b[24:40]))
	}
	if dst != group {
		t.Fatalf("GRH destination %s, want %s", dst, group)
	}
}
