package soft_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestRCFlowAsync runs the whole RC flow on two channels and checks every
// event's fields: private data both ways, the new id's inheritance, the
// addresses each side reports, DISCONNECTED on both sides.
func TestRCFlowAsync(t *testing.T) {
	sch, cch := newChannel(t, nil), newChannel(t, nil)
	l := cmListen(t, sch, "server")
	defer l.Destroy()
	if !strings.HasPrefix(l.DeviceName(), "soft") || l.LocalAddr().Addr() != lo4 || l.SrcPort() == 0 {
		t.Fatalf("listener %s on %s", l.DeviceName(), l.LocalAddr())
	}
	cli := mkID(t, cch, "client", id.PSTCP)
	defer cli.Destroy()
	resolve(t, cch, cli, l.LocalAddr())
	if r := cli.Route(); r.MTU <= 0 || r.Dst != l.LocalAddr() || r.Device == "" || r.NumPaths != 1 {
		t.Fatalf("client route %+v", r)
	}
	req := bytes.Repeat([]byte("q"), id.MaxPrivateDataREQ)
	if err := cli.Connect(&id.ConnParam{PrivateData: req, ResponderResources: 2, InitiatorDepth: 3}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, sch, id.EventConnectRequest)
	child := ev.ID
	if ev.ListenID != l || child.Context() != "server" || child.Channel() != sch || !bytes.Equal(ev.Conn.PrivateData, req) {
		t.Fatalf("request: listen %v ctx %v pd %q", ev.ListenID == l, child.Context(), ev.Conn.PrivateData)
	}
	// Seen from the server: the client's initiator depth is what it must
	// provide as responder resources, and vice versa.
	if ev.Conn.ResponderResources != 3 || ev.Conn.InitiatorDepth != 2 {
		t.Fatalf("request params %+v", ev.Conn)
	}
	if child.RemoteAddr().Addr() != lo4 || child.LocalAddr() != l.LocalAddr() || child.State() != id.StateConnectRequest {
		t.Fatalf("child %s -> %s state %s", child.LocalAddr(), child.RemoteAddr(), child.State())
	}
	rep := bytes.Repeat([]byte("r"), id.MaxPrivateDataREP)
	if err := child.Accept(&id.ConnParam{PrivateData: rep, ResponderResources: 3, InitiatorDepth: 2}); err != nil {
		t.Fatal(err)
	}
	_ = ev.Ack()
	sev := next(t, sch, id.EventEstablished)
	if sev.ID != child || child.State() != id.StateEstablished {
		t.Fatalf("server ESTABLISHED for %d", sev.ID.Handle())
	}
	_ = sev.Ack()
	cev := next(t, cch, id.EventEstablished)
	if cev.ID != cli || !bytes.Equal(cev.Conn.PrivateData, rep) || cev.Status != 0 {
		t.Fatalf("client ESTABLISHED pd %d bytes status %d", len(cev.Conn.PrivateData), cev.Status)
	}
	_ = cev.Ack()
	if cli.RemoteAddr() != l.LocalAddr() || child.RemoteAddr().Port() != cli.SrcPort() {
		t.Fatalf("addresses: client %s -> %s, server child sees %s", cli.LocalAddr(), cli.RemoteAddr(), child.RemoteAddr())
	}
	if err := cli.Disconnect(); err != nil {
		t.Fatal(err)
	}
	_ = next(t, cch, id.EventDisconnected).Ack()
	dev := next(t, sch, id.EventDisconnected)
	if dev.ID != child {
		t.Fatal("server DISCONNECTED for the wrong id")
	}
	_ = dev.Ack()
	if err := child.Disconnect(); err != nil { // after the peer's: no new event
		t.Fatal(err)
	}
	if err := child.Destroy(); err != nil {
		t.Fatal(err)
	}
}

// TestRCFlowSync runs a synchronous server (GetRequest/Accept) against a
// synchronous client, each call blocking until its event.
func TestRCFlowSync(t *testing.T) {
	l, err := id.Create(nil, "srv", id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Destroy()
	if err := l.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(1); err != nil {
		t.Fatal(err)
	}
	srvErr := make(chan error, 1)
	go func() {
		child, err := l.GetRequest()
		if err != nil {
			srvErr <- err
			return
		}
		defer child.Destroy()
		if got := string(child.Event().PrivateData()); got != "sync hello" {
			srvErr <- errorString("request pd " + got)
			return
		}
		if err := child.Accept(&id.ConnParam{PrivateData: []byte("sync welcome")}); err != nil {
			srvErr <- err
			return
		}
		if child.Event().Type != id.EventEstablished {
			srvErr <- errorString("accept returned " + child.Event().Type.String())
			return
		}
		srvErr <- child.Disconnect() // waits for the client's DISCONNECTED
	}()
	cli, err := id.Create(nil, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Destroy()
	if err := cli.ResolveAddr(netip.AddrPort{}, l.LocalAddr(), time.Second); err != nil || cli.Event().Type != id.EventAddrResolved {
		t.Fatalf("resolve: %v", err)
	}
	if err := cli.ResolveRoute(time.Second); err != nil || cli.Event().Type != id.EventRouteResolved {
		t.Fatalf("route: %v", err)
	}
	if err := cli.Connect(&id.ConnParam{PrivateData: []byte("sync hello")}); err != nil {
		t.Fatal(err)
	}
	if ev := cli.Event(); ev.Type != id.EventEstablished || string(ev.PrivateData()) != "sync welcome" {
		t.Fatalf("connect event %s %q", ev.Type, ev.PrivateData())
	}
	if err := cli.Disconnect(); err != nil || cli.Event().Type != id.EventDisconnected {
		t.Fatalf("disconnect: %v", err)
	}
	select {
	case err := <-srvErr:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("sync server stuck")
	}
}

func TestRejectCarriesPrivateData(t *testing.T) {
	sch, cch := newChannel(t, nil), newChannel(t, nil)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := mkID(t, cch, nil, id.PSTCP)
	defer cli.Destroy()
	resolve(t, cch, cli, l.LocalAddr())
	_ = cli.Connect(nil)
	ev := next(t, sch, id.EventConnectRequest)
	why := bytes.Repeat([]byte("n"), id.MaxPrivateDataREJ)
	if err := ev.ID.Reject(why); err != nil {
		t.Fatal(err)
	}
	child := ev.ID
	_ = ev.Ack()
	rej := next(t, cch, id.EventRejected)
	// iWARP reports a peer's reject as a reset (siw: -ECONNRESET).
	if rej.Status != -int(syscall.ECONNRESET) || !bytes.Equal(rej.Conn.PrivateData, why) || cli.State() != id.StateFailed {
		t.Fatalf("REJECTED status %d pd %d bytes state %s", rej.Status, len(rej.Conn.PrivateData), cli.State())
	}
	_ = rej.Ack()
	mustErrno(t, cli.Connect(nil), syscall.EINVAL) // a rejected id is spent
	_ = child.Destroy()
}

func TestSyncRejectIsECONNREFUSED(t *testing.T) {
	sch := newChannel(t, nil)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	go func() {
		ev, err := sch.GetEvent()
		if err != nil {
			return
		}
		_ = ev.ID.Reject([]byte("go away"))
		child := ev.ID
		_ = ev.Ack()
		_ = child.Destroy()
	}()
	cli, _ := id.Create(nil, nil, id.PSTCP)
	defer cli.Destroy()
	_ = cli.ResolveAddr(netip.AddrPort{}, l.LocalAddr(), time.Second)
	_ = cli.ResolveRoute(time.Second)
	err := cli.Connect(nil)
	mustErrno(t, err, syscall.ECONNREFUSED)
	if ev := cli.Event(); ev.Type != id.EventRejected || !strings.HasPrefix(string(ev.PrivateData()), "go away") {
		t.Fatalf("event %s %q", ev.Type, ev.PrivateData())
	}
}

func TestNoListenerIsRejectedConnRefused(t *testing.T) {
	// A port nobody listens on: bind one and release it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	cch := newChannel(t, nil)
	cli := mkID(t, cch, nil, id.PSTCP)
	defer cli.Destroy()
	resolve(t, cch, cli, dst)
	_ = cli.Connect(nil)
	ev := next(t, cch, id.EventRejected)
	if ev.Status != -int(syscall.ECONNREFUSED) {
		t.Fatalf("status %d, want -ECONNREFUSED", ev.Status)
	}
	_ = ev.Ack()
	sync, _ := id.Create(nil, nil, id.PSTCP)
	defer sync.Destroy()
	_ = sync.ResolveAddr(netip.AddrPort{}, dst, time.Second)
	_ = sync.ResolveRoute(time.Second)
	mustErrno(t, sync.Connect(nil), syscall.ECONNREFUSED)
}

// silentPeer accepts TCP connections and never answers the MPA Request.
func silentPeer(t *testing.T) netip.AddrPort {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return netip.MustParseAddrPort(ln.Addr().String())
}

func TestUnansweredConnectIsUnreachable(t *testing.T) {
	dst := silentPeer(t)
	t.Run("ack timeout option", func(t *testing.T) {
		cch := newChannel(t, nil)
		cli := mkID(t, cch, nil, id.PSTCP)
		defer cli.Destroy()
		// 4.096µs·2^15 ≈ 134ms per try, RetryCount 1: about 268ms.
		if err := cli.SetAckTimeout(15); err != nil {
			t.Fatal(err)
		}
		resolve(t, cch, cli, dst)
		start := time.Now()
		_ = cli.Connect(&id.ConnParam{RetryCount: 1, ResponderResources: 1, InitiatorDepth: 1})
		ev := next(t, cch, id.EventUnreachable)
		if el := time.Since(start); ev.Status != -int(syscall.ETIMEDOUT) || el < 200*time.Millisecond || el > 3*time.Second {
			t.Fatalf("UNREACHABLE status %d after %v", ev.Status, el)
		}
		_ = ev.Ack()
	})
	t.Run("fabric timeout, sync", func(t *testing.T) {
		f := soft.New(soft.WithName("soft-fast"), soft.WithConnectTimeout(150*time.Millisecond))
		cli, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Destroy()
		_ = cli.ResolveAddr(netip.AddrPort{}, dst, time.Second)
		_ = cli.ResolveRoute(time.Second)
		mustErrno(t, cli.Connect(nil), syscall.ETIMEDOUT)
		if cli.Event().Type != id.EventUnreachable {
			t.Fatalf("event %s", cli.Event().Type)
		}
	})
	t.Run("context deadline, sync", func(t *testing.T) {
		cli, _ := id.Create(nil, nil, id.PSTCP)
		defer cli.Destroy()
		_ = cli.ResolveAddr(netip.AddrPort{}, dst, time.Second)
		_ = cli.ResolveRoute(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := cli.ConnectContext(ctx, nil)
		if !errors.Is(err, id.ErrCanceled) || !errors.Is(err, context.DeadlineExceeded) || cli.State() != id.StateCanceled {
			t.Fatalf("ConnectContext = %v, state %s", err, cli.State())
		}
	})
}

// TestSelfConnectIsRefused: an id bound to the very address and port it
// connects to makes TCP connect to itself (simultaneous open); with no
// listener that is REJECTED -ECONNREFUSED, not a protocol error.
func TestSelfConnectIsRefused(t *testing.T) {
	ch := newChannel(t, nil)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	if err := cm.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	self := cm.LocalAddr()
	resolve(t, ch, cm, self)
	if err := cm.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, ch, id.EventRejected)
	if ev.Status != -int(syscall.ECONNREFUSED) {
		t.Fatalf("status %d, want -ECONNREFUSED", ev.Status)
	}
	_ = ev.Ack()
}
