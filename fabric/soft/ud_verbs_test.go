package soft_test

import (
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/id"
)

// TestUDPostRecvNeedsGRH: a UD receive must hold the 40-byte GRH every
// datagram starts with: a shorter buffer (1 byte, or none with a region)
// could never complete and is EINVAL at post time.
func TestUDPostRecvNeedsGRH(t *testing.T) {
	f := udFabric(t)
	p := connectUD(t, f, id.PSUDP, lo4)
	b := regUD(t, p.srv, 8)
	mustErrno(t, p.srv.PostRecv(1, b.buf[:1], b.mr), syscall.EINVAL)
	mustErrno(t, p.srv.PostRecv(2, nil, b.mr), syscall.EINVAL)
	mustErrno(t, p.srv.PostRecv(3, b.buf[:39], b.mr), syscall.EINVAL)
	if err := p.srv.PostRecv(4, b.buf[:40], b.mr); err != nil {
		t.Fatalf("a GRH-sized receive: %v", err)
	}
}

// TestUDReplyWithAHFromWC: the server answers the sender of a datagram
// with the address handle AHFromWC builds from the receive completion (as
// ibv_init_ah_from_wc), and the reply arrives.
func TestUDReplyWithAHFromWC(t *testing.T) {
	f := udFabric(t)
	p := connectUD(t, f, id.PSUDP, lo4)
	sb, cb := regUD(t, p.srv, 16), regUD(t, p.cli, 16)
	if err := p.srv.PostRecv(1, sb.buf, sb.mr); err != nil {
		t.Fatal(err)
	}
	if err := p.cli.PostRecv(2, cb.buf, cb.mr); err != nil {
		t.Fatal(err)
	}
	if err := p.cli.PostUDSend(3, []byte("ping"), nil, id.SendInline, &p.est.AH, p.est.QPNum); err != nil {
		t.Fatal(err)
	}
	wc := recvComp(t, p.srv)
	if wc.Status != id.WCSuccess {
		t.Fatalf("receive %+v", wc)
	}
	ah, err := id.AHFromWC(&wc, sb.buf)
	if err != nil {
		t.Fatal(err)
	}
	if ah.Addr() != lo4 || ah.DLID != uint16(p.cli.QP().Num()) || ah.IsGlobal != 1 || ah.HopLimit != 0xFF {
		t.Fatalf("address handle %+v, want %s port %d", ah, lo4, p.cli.QP().Num())
	}
	if err := p.srv.PostUDSend(4, []byte("pong"), nil, id.SendInline, &ah, wc.SrcQP); err != nil {
		t.Fatal(err)
	}
	if wc := recvComp(t, p.cli); wc.Status != id.WCSuccess || string(cb.buf[40:44]) != "pong" {
		t.Fatalf("reply %+v %q", wc, cb.buf[40:44])
	}
	// Not a successful receive: EINVAL.
	for _, bad := range []id.WC{{Status: id.WCGeneralErr, Opcode: id.WCRecv, Src: wc.Src}, {Opcode: id.WCSend, Src: wc.Src}, {Opcode: id.WCRecv}} {
		if _, err := id.AHFromWC(&bad, nil); !isErrno(err, syscall.EINVAL) {
			t.Errorf("AHFromWC(%+v): %v, want EINVAL", bad, err)
		}
	}
}
