package soft_test

import (
	"bytes"
	"context"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/sidr"
)

// pingPong sends a message each way over an established pair: the client
// to the ESTABLISHED address handle, the server back to the completion's
// source.
func pingPong(t *testing.T, p *udPair, size int) {
	t.Helper()
	sb, cb := regUD(t, p.srv, size), regUD(t, p.cli, size)
	if err := p.srv.PostRecv(1, sb.buf, sb.mr); err != nil {
		t.Fatal(err)
	}
	if err := p.cli.PostRecv(2, cb.buf, cb.mr); err != nil {
		t.Fatal(err)
	}
	msg := pattern(size, 3)
	copy(cb.buf[40:], msg)
	if err := p.cli.PostUDSend(3, cb.buf[40:40+size], cb.mr, id.SendSignaled, &p.est.AH, p.est.QPNum); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if wc, err := p.cli.GetSendComp(ctx); err != nil || wc.Status != id.WCSuccess || wc.WRID != 3 || wc.Opcode != id.WCSend || wc.ByteLen != uint32(size) {
		t.Fatalf("send completion %+v, %v", wc, err)
	}
	wc := recvComp(t, p.srv)
	cliQP := p.cli.QP().Num()
	if wc.Status != id.WCSuccess || wc.WRID != 1 || wc.Opcode != id.WCRecv || wc.ByteLen != uint32(40+size) ||
		!wc.GRH || wc.SrcQP != cliQP || wc.Src.Port() != uint16(cliQP) || wc.Src.Addr() != p.est.AH.Addr() || wc.QPNum != p.srv.QP().Num() {
		t.Fatalf("server receive %+v (client QP %d)", wc, cliQP)
	}
	if !bytes.Equal(sb.buf[40:40+size], msg) {
		t.Fatal("server received other bytes")
	}
	checkGRH(t, sb.buf[:40], wc.Src.Addr(), p.est.AH.Addr(), size)
	// Reply to where it came from.
	ah := id.AHAttr{DGID: wc.Src.Addr().As16(), DLID: wc.Src.Port()} // As16 maps IPv4
	copy(sb.buf[40:], invert(msg))
	if err := p.srv.PostUDSend(4, sb.buf[40:40+size], sb.mr, 0, &ah, wc.SrcQP); err != nil {
		t.Fatal(err)
	}
	wc = recvComp(t, p.cli)
	if wc.Status != id.WCSuccess || wc.WRID != 2 || wc.SrcQP != p.est.QPNum || wc.ByteLen != uint32(40+size) {
		t.Fatalf("client receive %+v", wc)
	}
	if !bytes.Equal(cb.buf[40:40+size], invert(msg)) {
		t.Fatal("client received other bytes")
	}
}

// checkGRH checks the GRH as RoCEv2 lays it out.
func checkGRH(t *testing.T, g []byte, src, dst netip.Addr, size int) {
	t.Helper()
	udpLen := 8 + sidr.DataHeaderLen + size
	if src.Is4() {
		h := g[20:]
		if !bytes.Equal(g[:20], make([]byte, 20)) || h[0] != 0x45 || h[9] != 17 || int(h[2])<<8|int(h[3]) != 20+udpLen ||
			netip.AddrFrom4([4]byte(h[12:16])) != src || netip.AddrFrom4([4]byte(h[16:20])) != dst {
			t.Fatalf("IPv4 GRH %x", g)
		}
		var sum uint32
		for k := 0; k < 20; k += 2 {
			sum += uint32(h[k])<<8 | uint32(h[k+1])
		}
		for sum > 0xFFFF {
			sum = sum>>16 + sum&0xFFFF
		}
		if sum != 0xFFFF {
			t.Fatalf("IPv4 GRH checksum: %x", g)
		}
		return
	}
	if g[0]>>4 != 6 || g[6] != 17 || int(g[4])<<8|int(g[5]) != udpLen ||
		netip.AddrFrom16([16]byte(g[8:24])) != src || netip.AddrFrom16([16]byte(g[24:40])) != dst {
		t.Fatalf("IPv6 GRH %x", g)
	}
}

func TestUDConnectAcceptAndData(t *testing.T) {
	for _, c := range []struct {
		name string
		ps   id.PortSpace
		opts []id.Option
	}{
		{"UDP", id.PSUDP, nil},
		{"IPoIB", id.PSIPoIB, nil},
		{"IB-UD", id.PSIB, []id.Option{id.WithQPType(id.UD)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := udFabric(t)
			p := connectUD(t, f, c.ps, lo4, c.opts...)
			pingPong(t, p, 100)
			if r := p.srv.Route(); r.Src.Addr() != lo4 || r.Src.Port() != p.lis.LocalAddr().Port() || r.Dst != p.cli.LocalAddr() || r.Device == "" {
				t.Fatalf("server route %+v, client at %s", r, p.cli.LocalAddr())
			}
		})
	}
}

func TestUDIPv6(t *testing.T) {
	if !haveIPv6Loopback() {
		t.Skip("no IPv6 loopback")
	}
	f := udFabric(t)
	p := connectUD(t, f, id.PSUDP, lo6)
	pingPong(t, p, 1000)
}

func TestUDPrivateDataLimits(t *testing.T) {
	f := udFabric(t)
	sch, cch := newChannel(t, f), newChannel(t, f)
	lis := listenUD(t, sch, id.PSUDP, netip.AddrPortFrom(lo4, 0))
	cli := create(t, cch, id.PSUDP)
	resolve(t, cch, cli, lis.LocalAddr())
	mustErrno(t, cli.Connect(&id.ConnParam{PrivateData: make([]byte, id.MaxPrivateDataSIDRREQ+1)}), syscall.EINVAL)
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, sch, id.EventConnectRequest)
	srv := ev.ID
	t.Cleanup(func() { destroy(srv) })
	if len(ev.UD.PrivateData) != id.MaxPrivateDataSIDRREQ || ev.UD.QPNum != 0 || ev.UD.AH.DLID != cli.LocalAddr().Port() {
		t.Fatalf("request without a QP: %+v", ev.UD)
	}
	ack(t, ev)
	mustErrno(t, srv.Accept(&id.ConnParam{PrivateData: make([]byte, id.MaxPrivateDataSIDRREP+1)}), syscall.EINVAL)
	mustErrno(t, srv.Reject(make([]byte, id.MaxPrivateDataSIDRREP+1)), syscall.EINVAL)
	// Without a QP the reply carries the parameter's QP number.
	if err := srv.Accept(&id.ConnParam{QPNum: 4242}); err != nil {
		t.Fatal(err)
	}
	ev = next(t, cch, id.EventEstablished)
	if ev.UD.QPNum != 4242 || len(ev.UD.PrivateData) != id.MaxPrivateDataSIDRREP {
		t.Fatalf("established %+v", ev.UD)
	}
	ack(t, ev)
	mustErrno(t, srv.Accept(nil), syscall.EINVAL) // answered already
}

func TestUDReject(t *testing.T) {
	f := udFabric(t)
	sch, cch := newChannel(t, f), newChannel(t, f)
	lis := listenUD(t, sch, id.PSUDP, netip.AddrPortFrom(lo4, 0))
	cli := create(t, cch, id.PSUDP)
	resolve(t, cch, cli, lis.LocalAddr())
	if err := cli.Connect(&id.ConnParam{PrivateData: []byte("hi")}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, sch, id.EventConnectRequest)
	srv := ev.ID
	ack(t, ev)
	pd := pattern(id.MaxPrivateDataSIDRREP, 5)
	if err := srv.Reject(pd); err != nil {
		t.Fatal(err)
	}
	ev = next(t, cch, id.EventUnreachable)
	if ev.Status != int(sidr.StatusReject) {
		t.Fatalf("UNREACHABLE status %d, want 2 (IB_SIDR_REJECT)", ev.Status)
	}
	equalPrefix(t, "reject private data", ev.UD.PrivateData, pd, id.MaxPrivateDataSIDRREP)
	ack(t, ev)
	if s := cli.State(); s != id.StateFailed {
		t.Fatalf("client state %s", s)
	}
	if err := srv.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// A request whose new id is destroyed unanswered is rejected, as the IB CM
// rejects it.
func TestUDDestroyUnansweredRejects(t *testing.T) {
	f := udFabric(t)
	sch, cch := newChannel(t, f), newChannel(t, f)
	lis := listenUD(t, sch, id.PSUDP, netip.AddrPortFrom(lo4, 0))
	cli := create(t, cch, id.PSUDP)
	resolve(t, cch, cli, lis.LocalAddr())
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, sch, id.EventConnectRequest)
	srv := ev.ID
	ack(t, ev)
	if err := srv.Destroy(); err != nil {
		t.Fatal(err)
	}
	ev = next(t, cch, id.EventUnreachable)
	if ev.Status != int(sidr.StatusReject) {
		t.Fatalf("status %d", ev.Status)
	}
	ack(t, ev)
}

func TestUDTimeout(t *testing.T) {
	f := udFabric(t) // 20 ms, 2 retries: 20+40+80 = 140 ms
	cch := newChannel(t, f)
	// A bound socket that never answers (no ICMP either).
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: lo4.As4()}); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	port := sa.(*unix.SockaddrInet4).Port
	cli := create(t, cch, id.PSUDP)
	resolve(t, cch, cli, netip.AddrPortFrom(lo4, uint16(port)))
	start := time.Now()
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, cch, id.EventUnreachable)
	took := time.Since(start)
	if ev.Status != -int(syscall.ETIMEDOUT) {
		t.Fatalf("status %d", ev.Status)
	}
	ack(t, ev)
	if took < 130*time.Millisecond || took > 3*time.Second {
		t.Fatalf("timed out after %v, want about 140ms", took)
	}
	// The request was sent three times (first try and two retries).
	var buf [512]byte
	n := 0
	for {
		k, _, err := unix.Recvfrom(fd, buf[:], unix.MSG_DONTWAIT)
		if err != nil {
			break
		}
		var m sidr.Message
		if err := sidr.Parse(buf[:k], &m); err != nil || m.Type != sidr.TypeREQ {
			t.Fatalf("not a REQ: %x", buf[:k])
		}
		n++
	}
	if n != 3 {
		t.Fatalf("%d requests sent, want 3", n)
	}
}

// A request sent once Listen has returned is a request to a listener, even
// when the loop had attached the socket in an earlier turn and had not yet
// looked at the listen (CI saw TestUDDuplicateRequests lose its requests
// that way: answered "unsupported" before the listen took effect).
func TestUDRequestRightAfterListenIsReported(t *testing.T) {
	f := udFabric(t)
	sch := newChannel(t, f)
	lis := create(t, sch, id.PSUDP)
	if err := lis.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	release := soft.HoldLoopAfterUDSockStart(f)
	defer release()
	errc := make(chan error, 1)
	go func() { errc <- lis.Listen(0) }()
	peer := newRawPeer(t)
	req, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(id.PSUDP), TID: 5, QKey: id.UDPQKey})
	select {
	case err := <-errc:
		// Listen returned while its loop was held: the request now reaches
		// the socket before the loop's next turn.
		if err != nil {
			t.Fatal(err)
		}
		peer.send(lis.LocalAddr(), req)
		time.Sleep(50 * time.Millisecond)
		release()
	case <-time.After(200 * time.Millisecond):
		// Listen waits for the loop to apply it.
		release()
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		peer.send(lis.LocalAddr(), req)
	}
	ev := next(t, sch, id.EventConnectRequest)
	t.Cleanup(func() { destroy(ev.ID) })
	ack(t, ev)
	if b := peer.recv(); b != nil {
		t.Fatalf("answered before accept: %x", b)
	}
}

func TestUDDuplicateRequests(t *testing.T) {
	f := udFabric(t)
	sch := newChannel(t, f)
	lis := listenUD(t, sch, id.PSUDP, netip.AddrPortFrom(lo4, 0))
	peer := newRawPeer(t)
	req, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(id.PSUDP), TID: 77, QPN: 1234, QKey: id.UDPQKey, PrivateData: []byte("dup")})
	peer.send(lis.LocalAddr(), req)
	peer.send(lis.LocalAddr(), req)
	ev := next(t, sch, id.EventConnectRequest)
	srv := ev.ID
	t.Cleanup(func() { destroy(srv) })
	ack(t, ev)
	peer.send(lis.LocalAddr(), req)
	quiet(t, sch, 200*time.Millisecond) // the retransmissions made no second request
	if b := peer.recv(); b != nil {
		t.Fatalf("answer before accept: %x", b)
	}
	if err := srv.Accept(&id.ConnParam{QPNum: 99, PrivateData: []byte("ok")}); err != nil {
		t.Fatal(err)
	}
	var m sidr.Message
	first := peer.recv()
	if err := sidr.Parse(first, &m); err != nil || m.Type != sidr.TypeREP || m.TID != 77 || m.Status != 0 || m.QPN != 99 || string(m.PrivateData) != "ok" {
		t.Fatalf("REP %x: %v %+v", first, err, m)
	}
	// A retransmission after the answer gets the same answer, no request.
	peer.send(lis.LocalAddr(), req)
	if again := peer.recv(); !bytes.Equal(again, first) {
		t.Fatalf("second REP %x, first %x", again, first)
	}
	quiet(t, sch, 100*time.Millisecond)
	// A new transaction is a new request.
	req2, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(id.PSUDP), TID: 78, QKey: id.UDPQKey})
	peer.send(lis.LocalAddr(), req2)
	ev = next(t, sch, id.EventConnectRequest)
	srv2 := ev.ID
	ack(t, ev)
	if err := srv2.Destroy(); err != nil { // rejects it
		t.Fatal(err)
	}
	if err := sidr.Parse(peer.recv(), &m); err != nil || m.TID != 78 || m.Status != sidr.StatusReject {
		t.Fatalf("REP for the destroyed id: %v %+v", err, m)
	}
}

func TestUDMalformedAndForeignDatagrams(t *testing.T) {
	f := udFabric(t)
	sch, cch := newChannel(t, f), newChannel(t, f)
	lis := listenUD(t, sch, id.PSUDP, netip.AddrPortFrom(lo4, 0))
	peer := newRawPeer(t)
	good, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(id.PSUDP), TID: 5, QKey: id.UDPQKey, PrivateData: []byte("abc")})
	bad := [][]byte{
		{}, {1}, []byte("garbage that is long enough to be a header, but is not one"),
		append([]byte{2}, good[1:]...),       // version
		good[:len(good)-1],                   // truncated private data
		append(append([]byte{}, good...), 0), // trailing byte
		func() []byte { b := append([]byte{}, good...); b[13] = 200; return b }(), // length over the limit
		make([]byte, 16), // a data header's size, all zero
	}
	for _, b := range bad {
		peer.send(lis.LocalAddr(), b)
	}
	// An unexpected REP is dropped too.
	rep, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREP, TID: 1})
	peer.send(lis.LocalAddr(), rep)
	quiet(t, sch, 150*time.Millisecond)
	if b := peer.recv(); b != nil {
		t.Fatalf("answered a malformed datagram: %x", b)
	}
	// Another port space on the port is answered "unsupported".
	other, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(id.PSIPoIB), TID: 6, QKey: id.UDPQKey})
	peer.send(lis.LocalAddr(), other)
	var m sidr.Message
	if err := sidr.Parse(peer.recv(), &m); err != nil || m.Status != sidr.StatusUnsupported || m.TID != 6 {
		t.Fatalf("answer to another port space: %v %+v", err, m)
	}
	// The listener still works.
	cli := create(t, cch, id.PSUDP)
	resolve(t, cch, cli, lis.LocalAddr())
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, sch, id.EventConnectRequest)
	srv := ev.ID
	t.Cleanup(func() { destroy(srv) })
	ack(t, ev)
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	ack(t, next(t, cch, id.EventEstablished))
}

func TestUDPortSpaceMismatch(t *testing.T) {
	f := udFabric(t)
	sch, cch := newChannel(t, f), newChannel(t, f)
	lis := listenUD(t, sch, id.PSIPoIB, netip.AddrPortFrom(lo4, 0))
	cli := create(t, cch, id.PSUDP)
	resolve(t, cch, cli, lis.LocalAddr())
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, cch, id.EventUnreachable)
	if ev.Status != int(sidr.StatusUnsupported) {
		t.Fatalf("status %d", ev.Status)
	}
	ack(t, ev)
	quiet(t, sch, 50*time.Millisecond)
}

func TestUDDestroyedListenerStopsAnswering(t *testing.T) {
	f := udFabric(t)
	sch, cch := newChannel(t, f), newChannel(t, f)
	lis := listenUD(t, sch, id.PSUDP, netip.AddrPortFrom(lo4, 0))
	addr := lis.LocalAddr()
	peer := newRawPeer(t)
	// A request queued, never seen by the user: destroying the listener
	// rejects it.
	req, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(id.PSUDP), TID: 1, QKey: id.UDPQKey})
	peer.send(addr, req)
	time.Sleep(50 * time.Millisecond)
	if err := lis.Destroy(); err != nil {
		t.Fatal(err)
	}
	var m sidr.Message
	if err := sidr.Parse(peer.recv(), &m); err != nil || m.Status != sidr.StatusReject {
		t.Fatalf("queued request on destroy: %v %+v", err, m)
	}
	req2, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(id.PSUDP), TID: 2, QKey: id.UDPQKey})
	peer.send(addr, req2)
	if b := peer.recv(); b != nil {
		t.Fatalf("destroyed listener answered %x", b)
	}
	// Nothing holds the port any more: the host answers with an ICMP port
	// unreachable, and the connect ends at once, IB_SIDR_UNSUPPORTED.
	cli := create(t, cch, id.PSUDP)
	resolve(t, cch, cli, addr)
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, cch, id.EventUnreachable)
	status := ev.Status
	ack(t, ev)
	if status != int(sidr.StatusUnsupported) {
		t.Fatalf("status %d, want %d", status, sidr.StatusUnsupported)
	}
	quiet(t, sch, 50*time.Millisecond)
}

// A request accepted after its listener is gone is still answered.
func TestUDAcceptAfterListenerDestroyed(t *testing.T) {
	f := udFabric(t, soft.WithSIDRRetry(200*time.Millisecond, 3))
	sch, cch := newChannel(t, f), newChannel(t, f)
	lis := listenUD(t, sch, id.PSUDP, netip.AddrPortFrom(lo4, 0))
	cli := create(t, cch, id.PSUDP)
	resolve(t, cch, cli, lis.LocalAddr())
	if err := cli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, sch, id.EventConnectRequest)
	srv := ev.ID
	t.Cleanup(func() { destroy(srv) })
	ack(t, ev)
	if err := lis.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Accept(&id.ConnParam{QPNum: 7}); err != nil {
		t.Fatal(err)
	}
	ev = next(t, cch, id.EventEstablished)
	if ev.UD.QPNum != 7 {
		t.Fatalf("%+v", ev.UD)
	}
	ack(t, ev)
}

func TestUDSync(t *testing.T) {
	f := udFabric(t)
	lis, err := id.Create(nil, "lis", id.PSUDP, id.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	defer destroy(lis)
	if err := lis.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	type result struct {
		srv *id.ID
		err error
	}
	done := make(chan result, 2)
	go func() {
		for k := 0; k < 2; k++ {
			srv, err := lis.GetRequest()
			if err == nil {
				if ev := srv.Event(); ev == nil || ev.Type != id.EventConnectRequest || string(ev.UD.PrivateData[:4]) != "sync" {
					err = syscall.EPROTO
				} else if k == 0 {
					if err = srv.CreateQP(nil); err == nil {
						err = srv.Accept(&id.ConnParam{PrivateData: []byte("welcome")})
					}
				} else {
					err = srv.Reject([]byte("go away"))
				}
			}
			done <- result{srv, err}
		}
	}()
	dial := func() (*id.ID, error) {
		cli, err := id.Create(nil, "cli", id.PSUDP, id.WithFabric(f))
		if err != nil {
			t.Fatal(err)
		}
		if err := cli.ResolveAddr(netip.AddrPort{}, lis.LocalAddr(), time.Second); err != nil {
			t.Fatal(err)
		}
		if err := cli.ResolveRoute(time.Second); err != nil {
			t.Fatal(err)
		}
		if err := cli.CreateQP(nil); err != nil {
			t.Fatal(err)
		}
		return cli, cli.Connect(&id.ConnParam{PrivateData: []byte("sync")})
	}
	cli, err := dial()
	defer destroy(cli)
	if err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer destroy(r.srv)
	ev := cli.Event()
	if ev.Type != id.EventEstablished || ev.UD.QPNum != r.srv.QP().Num() || ev.UD.QKey != id.UDPQKey || string(ev.UD.PrivateData[:7]) != "welcome" {
		t.Fatalf("sync established: %s %+v", ev.Type, ev.UD)
	}
	cli2, err := dial()
	defer destroy(cli2)
	mustErrno(t, err, syscall.Errno(2)) // UNREACHABLE status 2 (IB_SIDR_REJECT) becomes errno 2
	if ev := cli2.Event(); ev.Type != id.EventUnreachable || ev.Status != 2 || string(ev.UD.PrivateData[:7]) != "go away" {
		t.Fatalf("sync reject: %s %d", ev.Type, ev.Status)
	}
	r = <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	destroy(r.srv)
}

func invert(b []byte) []byte {
	out := make([]byte, len(b))
	for k, c := range b {
		out[k] = ^c
	}
	return out
}
