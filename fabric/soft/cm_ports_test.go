package soft_test

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// occupiedTuple holds a TCP connection from 127.0.0.1:port to the returned
// address, whose listener is already closed, so a cmrt listener can take
// the address and an id connecting to it from port finds the connection
// there: connect(2) says EADDRNOTAVAIL, as for a TIME_WAIT one, but without
// the kernel's timestamp rules that let TIME_WAIT be reused after a second.
func occupiedTuple(t *testing.T, port uint16) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := net.Dialer{
		LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: int(port)},
		Control: func(_, _ string, rc syscall.RawConn) error {
			var serr error
			err := rc.Control(func(fd uintptr) {
				serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
			})
			if err != nil {
				return err
			}
			return serr
		},
	}
	cli, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	dst := netip.MustParseAddrPort(ln.Addr().String())
	_ = ln.Close()
	t.Cleanup(func() {
		_ = cli.Close()
		_ = srv.Close()
	})
	return dst
}

// freePortPair returns a port p with p and p+1 free on 127.0.0.1.
func freePortPair(t *testing.T) uint16 {
	t.Helper()
	for range 50 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		p := uint16(a.Addr().(*net.TCPAddr).Port)
		b, err := net.Listen("tcp", netip.AddrPortFrom(lo4, p+1).String())
		_ = a.Close()
		if err == nil {
			_ = b.Close()
			if p < 65535 {
				return p
			}
		}
	}
	t.Fatal("no two adjacent free ports")
	return 0
}

// listenAt makes a listening RC id on addr.
func listenAt(t *testing.T, ch *channel.Channel, addr netip.AddrPort) *id.ID {
	t.Helper()
	lis := mkID(t, ch, nil, id.PSTCP)
	if err := lis.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(1); err != nil {
		t.Fatal(err)
	}
	return lis
}

func TestConnectMovesAutoPortOffExistingConnection(t *testing.T) {
	p := freePortPair(t)
	dst := occupiedTuple(t, p)

	srvCh := newChannel(t, nil)
	lis := listenAt(t, srvCh, dst)
	defer lis.Destroy()

	f := soft.New(soft.WithName("soft-redial"))
	soft.SetPortRange(f, int(p), int(p)+1, func(int) int { return 0 })
	ch := newChannel(t, f)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	resolve(t, ch, cm, dst)
	if got := cm.SrcPort(); got != p {
		t.Fatalf("resolved to source port %d, want %d (the scan's first)", got, p)
	}
	if err := cm.Connect(&id.ConnParam{}); err != nil {
		t.Fatalf("connect: %v", err)
	}
	req := next(t, srvCh, id.EventConnectRequest)
	child := req.ID
	if got := child.DstPort(); got != p+1 {
		t.Errorf("request from port %d, want %d", got, p+1)
	}
	if err := child.Accept(&id.ConnParam{}); err != nil {
		t.Fatal(err)
	}
	_ = req.Ack()
	_ = next(t, ch, id.EventEstablished).Ack()
	_ = next(t, srvCh, id.EventEstablished).Ack()
	if got := cm.SrcPort(); got != p+1 {
		t.Errorf("connected from port %d, want %d", got, p+1)
	}
	if err := cm.Disconnect(); err != nil {
		t.Fatal(err)
	}
	_ = next(t, ch, id.EventDisconnected).Ack()
	_ = next(t, srvCh, id.EventDisconnected).Ack()
	_ = child.Destroy()
}

func TestConnectFromExplicitPortWithExistingConnection(t *testing.T) {
	p := freePortPair(t)
	dst := occupiedTuple(t, p)
	srvCh := newChannel(t, nil)
	lis := listenAt(t, srvCh, dst)
	defer lis.Destroy()

	ch := newChannel(t, nil)
	before := countFDs(t)
	cm := mkID(t, ch, nil, id.PSTCP)
	if err := cm.Bind(netip.AddrPortFrom(lo4, p)); err != nil {
		t.Fatal(err)
	}
	resolve(t, ch, cm, dst)
	// The user chose the port: the call fails, as siw's connect does, and
	// the id stays where it was.
	mustErrno(t, cm.Connect(&id.ConnParam{}), syscall.EADDRNOTAVAIL)
	if st := cm.State(); st != id.StateRouteResolved {
		t.Fatalf("state %s after the failed connect, want %s", st, id.StateRouteResolved)
	}
	if got := cm.SrcPort(); got != p {
		t.Fatalf("source port %d, want %d", got, p)
	}
	if err := cm.Destroy(); err != nil {
		t.Fatal(err)
	}
	if n := countFDs(t); n > before {
		t.Fatalf("%d descriptors after destroy, %d before", n, before)
	}
}

// WithPortRange bounds the ports ids bound to port 0 get: two ids take the
// range's two ports, a third finds none (EADDRNOTAVAIL, as rdma_cm when its
// range is used up); a range that is no range is ignored.
func TestWithPortRange(t *testing.T) {
	p := freePortPair(t)
	f := soft.New(soft.WithName("soft-port-range"), soft.WithPortRange(int(p), int(p)+1))
	ch := newChannel(t, f)
	got := map[uint16]bool{}
	for range 2 {
		cm := mkID(t, ch, nil, id.PSTCP)
		defer cm.Destroy()
		if err := cm.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
			t.Fatal(err)
		}
		got[cm.SrcPort()] = true
	}
	if !got[p] || !got[p+1] {
		t.Fatalf("bound ports %v, want %d and %d", got, p, p+1)
	}
	third := mkID(t, ch, nil, id.PSTCP)
	defer third.Destroy()
	if err := third.Bind(netip.AddrPortFrom(lo4, 0)); !errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Fatalf("third bind in a range of two: %v, want EADDRNOTAVAIL", err)
	}

	for _, r := range [][2]int{{0, 10}, {20, 10}, {1, 1 << 16}} {
		g := soft.New(soft.WithName("soft-port-range-ignored"), soft.WithPortRange(r[0], r[1]))
		cm := mkID(t, newChannel(t, g), nil, id.PSTCP)
		if err := cm.Bind(netip.AddrPortFrom(lo4, 0)); err != nil || cm.SrcPort() == 0 {
			t.Errorf("range %v: bind %v, port %d; want the default range used", r, err, cm.SrcPort())
		}
		_ = cm.Destroy()
	}
}
