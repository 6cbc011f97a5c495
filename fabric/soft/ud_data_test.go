package soft_test

import (
	"bytes"
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/id"
)

func TestUDMessageSize(t *testing.T) {
	f := udFabric(t)
	p := connectUD(t, f, id.PSUDP, lo4)
	max := udExt(t, p.cli).MaxMessageSize()
	mtu := p.cli.Route().MTU
	if want := min(mtu-28, 65507) - 16; max != want {
		t.Fatalf("max message %d, want %d (MTU %d)", max, want, mtu)
	}
	sb, cb := regUD(t, p.srv, max), regUD(t, p.cli, max+1)
	mustErrno(t, p.cli.PostUDSend(1, cb.buf[:max+1], cb.mr, id.SendSignaled, &p.est.AH, p.est.QPNum), syscall.EMSGSIZE)
	if err := p.srv.PostRecv(1, sb.buf, sb.mr); err != nil {
		t.Fatal(err)
	}
	msg := pattern(max, 11)
	copy(cb.buf, msg)
	if err := p.cli.PostUDSend(2, cb.buf[:max], cb.mr, 0, &p.est.AH, p.est.QPNum); err != nil {
		t.Fatal(err)
	}
	wc := recvComp(t, p.srv)
	if wc.Status != id.WCSuccess || wc.ByteLen != uint32(40+max) || !bytes.Equal(sb.buf[40:], msg) {
		t.Fatalf("largest message: %+v", wc)
	}
	// A message too long for the posted buffer completes it in error.
	small := regUD(t, p.srv, 10)
	if err := p.srv.PostRecv(3, small.buf, small.mr); err != nil {
		t.Fatal(err)
	}
	if err := p.cli.PostUDSend(4, cb.buf[:11], cb.mr, 0, &p.est.AH, p.est.QPNum); err != nil {
		t.Fatal(err)
	}
	if wc := recvComp(t, p.srv); wc.Status != id.WCLocLenErr || wc.WRID != 3 {
		t.Fatalf("short buffer: %+v", wc)
	}
}

func TestUDPostErrors(t *testing.T) {
	f := udFabric(t)
	p := connectUD(t, f, id.PSUDP, lo4)
	cb := regUD(t, p.cli, 64)
	other := make([]byte, 64)
	qp := p.cli.QP()
	for name, wr := range map[string]*id.SendWR{
		"no AH":       {Opcode: id.WRSend, Buf: cb.buf[:8], MR: cb.mr, RemoteQPN: p.est.QPNum},
		"RDMA write":  {Opcode: id.WRWrite, Buf: cb.buf[:8], MR: cb.mr, AH: &p.est.AH, RemoteQPN: p.est.QPNum},
		"foreign buf": {Opcode: id.WRSend, Buf: other, MR: cb.mr, AH: &p.est.AH, RemoteQPN: p.est.QPNum},
		"bad QPN":     {Opcode: id.WRSend, Buf: cb.buf[:8], MR: cb.mr, AH: &p.est.AH, RemoteQPN: 0x10000},
		"no address":  {Opcode: id.WRSend, Buf: cb.buf[:8], MR: cb.mr, AH: &id.AHAttr{}, RemoteQPN: p.est.QPNum},
	} {
		if err := qp.PostSend(wr); err == nil {
			t.Errorf("%s: posted", name)
		}
	}
	var v6 id.AHAttr
	v6.DGID[15] = 1 // ::1
	mustErrno(t, qp.PostSend(&id.SendWR{Opcode: id.WRSend, Buf: cb.buf[:8], MR: cb.mr, AH: &v6, RemoteQPN: p.est.QPNum}), syscall.EAFNOSUPPORT)
	mustErrno(t, qp.PostRecv(&id.RecvWR{Buf: other, MR: cb.mr}), syscall.EINVAL)
	// Inline sends need no region.
	sb := regUD(t, p.srv, 64)
	if err := p.srv.PostRecv(1, sb.buf, sb.mr); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(&id.SendWR{Opcode: id.WRSend, Flags: id.SendInline, Buf: []byte("inline"), AH: &p.est.AH,
		RemoteQPN: p.est.QPNum, RemoteQKey: id.UDPQKey}); err != nil {
		t.Fatal(err)
	}
	if wc := recvComp(t, p.srv); wc.Status != id.WCSuccess || string(sb.buf[40:46]) != "inline" {
		t.Fatalf("inline: %+v", wc)
	}
	// A wrong Q_Key is dropped by the receiver, as an IB port drops it.
	if err := p.srv.PostRecv(2, sb.buf, sb.mr); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(&id.SendWR{Opcode: id.WRSend, Flags: id.SendInline, Buf: []byte("x"), AH: &p.est.AH,
		RemoteQPN: p.est.QPNum, RemoteQKey: 0x1111}); err != nil {
		t.Fatal(err)
	}
	noRecv(t, p.srv, 100*time.Millisecond)
	// After DestroyQP posting fails.
	if err := p.cli.DestroyQP(); err != nil {
		t.Fatal(err)
	}
	if err := qp.PostSend(&id.SendWR{Opcode: id.WRSend, Flags: id.SendInline, Buf: []byte("x"), AH: &p.est.AH, RemoteQPN: p.est.QPNum}); err == nil {
		t.Fatal("post on a destroyed QP")
	}
}

// A datagram arriving with no receive posted is dropped: no error, no
// completion, and the next receive gets the next datagram.
func TestUDDropWithoutReceive(t *testing.T) {
	f := udFabric(t)
	p := connectUD(t, f, id.PSUDP, lo4)
	sb, cb := regUD(t, p.srv, 16), regUD(t, p.cli, 16)
	send := func(wrid uint64, s string) {
		copy(cb.buf, s)
		if err := p.cli.PostUDSend(wrid, cb.buf[:len(s)], cb.mr, id.SendSignaled, &p.est.AH, p.est.QPNum); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if wc, err := p.cli.GetSendComp(ctx); err != nil || wc.Status != id.WCSuccess {
			t.Fatalf("send %q: %+v %v", s, wc, err)
		}
	}
	send(1, "first")
	ext := udExt(t, p.srv)
	waitFor(t, func() bool { return ext.Dropped() == 1 })
	if err := p.srv.PostRecv(7, sb.buf, sb.mr); err != nil {
		t.Fatal(err)
	}
	send(2, "second")
	wc := recvComp(t, p.srv)
	if wc.Status != id.WCSuccess || wc.WRID != 7 || string(sb.buf[40:wc.ByteLen]) != "second" {
		t.Fatalf("%+v %q", wc, sb.buf[40:wc.ByteLen])
	}
	noRecv(t, p.srv, 50*time.Millisecond)
}

// Loss tolerance: a receiver posting fewer receives than datagrams sent
// completes what it posted, and the rest is dropped without an error.
func TestUDLossTolerance(t *testing.T) {
	f := udFabric(t)
	p := connectUD(t, f, id.PSUDP, lo4)
	const posted, sent = 3, 10
	bufs := make([]*udBufs, posted)
	for k := range bufs {
		bufs[k] = regUD(t, p.srv, 32)
		if err := p.srv.PostRecv(uint64(k), bufs[k].buf, bufs[k].mr); err != nil {
			t.Fatal(err)
		}
	}
	cb := regUD(t, p.cli, 32)
	for k := 0; k < sent; k++ {
		cb.buf[0] = byte(k)
		if err := p.cli.PostUDSend(uint64(k), cb.buf[:32], cb.mr, 0, &p.est.AH, p.est.QPNum); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < posted; k++ {
		wc := recvComp(t, p.srv)
		if wc.Status != id.WCSuccess || wc.WRID != uint64(k) || bufs[k].buf[40] != byte(k) {
			t.Fatalf("receive %d: %+v, first byte %d", k, wc, bufs[k].buf[40])
		}
	}
	ext := udExt(t, p.srv)
	waitFor(t, func() bool { return ext.Dropped() == sent-posted })
	noRecv(t, p.srv, 50*time.Millisecond)
	if n := p.cli.QP().SendCQ().Poll(make([]id.WC, 16)); n != 0 {
		t.Fatalf("%d completions for unsignaled sends", n)
	}
}
