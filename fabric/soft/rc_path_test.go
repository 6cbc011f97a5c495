package soft_test

import (
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

var rcSizes = []int{0, 1, 64 << 10, 16 << 20}

// crcModes are the CRC settings of server and client fabrics: CRC is on
// when either side asks for it.
var crcModes = []struct {
	name     string
	srv, cli bool
}{{"nocrc", false, false}, {"crc-srv", true, false}, {"crc-cli", false, true}, {"crc-both", true, true}}

func crcPair(t *testing.T, srv, cli bool, o pairOpts) *rcPair {
	o.srvFab, o.cliFab = soft.New(soft.WithCRC(srv)), soft.New(soft.WithCRC(cli))
	p := newPair(t, o)
	p.disconnect = true
	return p
}

func TestRCSendRecv(t *testing.T) {
	for _, mode := range crcModes {
		t.Run(mode.name, func(t *testing.T) {
			p := crcPair(t, mode.srv, mode.cli, pairOpts{})
			defer p.close()
			if got := soft.ConnCRC(p.srv.id.Endpoint()); got != (mode.srv || mode.cli) {
				t.Fatalf("crc %v", got)
			}
			for _, n := range rcSizes {
				// client -> server, then server -> client with SE
				for dir, e := range [][2]*rcEnd{{p.cli, p.srv}, {p.srv, p.cli}} {
					from, to := e[0], e[1]
					msg := pattern(n, byte(dir+1))
					rbuf := make([]byte, n+3)
					rmr := reg(t, to, rbuf, id.AccessLocalWrite)
					if err := to.qp.PostRecv(&id.RecvWR{WRID: 7, Buf: rbuf, MR: rmr}); err != nil {
						t.Fatal(err)
					}
					smr := reg(t, from, msg, 0)
					flags := id.SendSignaled
					if dir == 1 {
						flags |= id.SendSolicited
					}
					if err := from.qp.PostSend(&id.SendWR{WRID: 9, Opcode: id.WRSend, Flags: flags, Buf: msg, MR: smr}); err != nil {
						t.Fatal(err)
					}
					wc := comp(t, from.qp.SendCQ())
					wantWC(t, wc, id.WCSuccess, id.WCSend)
					if wc.WRID != 9 {
						t.Fatalf("send wr id %d", wc.WRID)
					}
					wc = comp(t, to.qp.RecvCQ())
					wantWC(t, wc, id.WCSuccess, id.WCRecv)
					if wc.WRID != 7 || int(wc.ByteLen) != n || wc.Solicited != (dir == 1) || wc.QPNum != to.qp.Num() {
						t.Fatalf("recv completion %+v, want %d bytes", wc, n)
					}
					sameBytes(t, rbuf[:n], msg)
					_ = from.qp.DeregMR(smr)
					_ = to.qp.DeregMR(rmr)
				}
			}
		})
	}
}

// TestRCWrite writes into the peer's memory, then tells it with a Send.
func TestRCWrite(t *testing.T) {
	for _, mode := range crcModes {
		t.Run(mode.name, func(t *testing.T) {
			p := crcPair(t, mode.srv, mode.cli, pairOpts{})
			defer p.close()
			for _, n := range rcSizes {
				t.Run(sizeName(n), func(t *testing.T) {
					dst := make([]byte, n+16)
					dmr, err := p.srv.id.RegWrite(dst)
					if err != nil {
						t.Fatal(err)
					}
					if err := p.srv.id.PostRecv(1, nil, nil); err != nil {
						t.Fatal(err)
					}
					src := pattern(n, 0x5a)
					smr := reg(t, p.cli, src, 0)
					// into the middle of the region
					if err := p.cli.id.PostWrite(2, src, smr, id.SendSignaled, dmr.Addr()+8, dmr.RKey()); err != nil {
						t.Fatal(err)
					}
					if err := p.cli.id.PostSend(3, nil, nil, id.SendSignaled); err != nil {
						t.Fatal(err)
					}
					wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCRDMAWrite)
					wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCSend)
					wc := comp(t, p.srv.qp.RecvCQ())
					wantWC(t, wc, id.WCSuccess, id.WCRecv)
					if wc.ByteLen != 0 {
						t.Fatalf("zero-length send received as %d bytes", wc.ByteLen)
					}
					sameBytes(t, dst[8:8+n], src)
					for _, b := range append(dst[:8:8], dst[8+n:]...) {
						if b != 0 {
							t.Fatal("write outside its target")
						}
					}
					_ = p.srv.qp.DeregMR(dmr)
					_ = p.cli.qp.DeregMR(smr)
				})
			}
		})
	}
}

// TestRCRead reads the peer's memory, including zero-length Reads (one
// empty Read Response).
func TestRCRead(t *testing.T) {
	for _, mode := range crcModes {
		t.Run(mode.name, func(t *testing.T) {
			p := crcPair(t, mode.srv, mode.cli, pairOpts{})
			defer p.close()
			for _, n := range rcSizes {
				t.Run(sizeName(n), func(t *testing.T) {
					src := pattern(n+4, 0xa5)
					smr, err := p.srv.id.RegRead(src)
					if err != nil {
						t.Fatal(err)
					}
					dst := make([]byte, n)
					dmr := reg(t, p.cli, dst, id.AccessLocalWrite)
					if err := p.cli.id.PostRead(4, dst, dmr, id.SendSignaled, smr.Addr()+4, smr.RKey()); err != nil {
						t.Fatal(err)
					}
					wc := comp(t, p.cli.qp.SendCQ())
					wantWC(t, wc, id.WCSuccess, id.WCRDMARead)
					if wc.WRID != 4 || int(wc.ByteLen) != n {
						t.Fatalf("read completion %+v", wc)
					}
					sameBytes(t, dst, src[4:])
					_ = p.srv.qp.DeregMR(smr)
					_ = p.cli.qp.DeregMR(dmr)
				})
			}
		})
	}
}

// TestRCReadsBeyondORD posts more Reads than the negotiated ORD: they are
// paced, never more outstanding than the peer's IRD, and all complete in
// order, interleaved with Sends.
func TestRCReadsBeyondORD(t *testing.T) {
	p := newPair(t, pairOpts{param: &id.ConnParam{ResponderResources: 1, InitiatorDepth: 2}})
	p.disconnect = true
	defer p.close()
	if ord := soft.ConnORD(p.cli.id.Endpoint()); ord != 2 {
		t.Fatalf("ORD %d, want 2", ord)
	}
	src := pattern(1<<20, 3)
	smr, _ := p.srv.id.RegRead(src)
	const n = 20
	dst := make([]byte, n*4096)
	dmr := reg(t, p.cli, dst, id.AccessLocalWrite)
	for k := 0; k < n; k++ {
		if err := p.srv.id.PostRecv(uint64(k), nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < n; k++ {
		if err := p.cli.id.PostRead(uint64(2*k), dst[k*4096:(k+1)*4096], dmr, 0, smr.Addr()+uint64(k*4096), smr.RKey()); err != nil {
			t.Fatal(err)
		}
		if err := p.cli.id.PostSend(uint64(2*k+1), nil, nil, id.SendSignaled); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < n; k++ {
		wc := comp(t, p.cli.qp.SendCQ())
		if wc.WRID != uint64(2*k+1) || wc.Status != id.WCSuccess {
			t.Fatalf("completion %d: %+v", k, wc)
		}
		wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
	}
	sameBytes(t, dst, src[:n*4096])
}

// TestRCManyIDs runs many connections at once on one fabric, each with
// its own ping-pong traffic.
func TestRCManyIDs(t *testing.T) {
	f := soft.New()
	srvCh := newRCChan(t, f)
	lis := listen(t, srvCh)
	port := lis.LocalAddr().Port()
	const conns, rounds, size = 24, 20, 1000

	// The server echoes every message back until DISCONNECTED.
	var wg sync.WaitGroup
	srvDone := make(chan struct{})
	var ids []*id.ID
	go func() {
		defer close(srvDone)
		disc := 0
		for disc < conns {
			ev, ok := srvCh.nextEv(20 * time.Second)
			if !ok {
				t.Error("server: no event")
				return
			}
			switch ev.Type {
			case id.EventConnectRequest:
				if err := ev.ID.CreateQP(nil); err != nil {
					t.Error(err)
					return
				}
				ids = append(ids, ev.ID)
				buf, out := make([]byte, size), make([]byte, size)
				m, _ := ev.ID.RegMsgs(buf)
				om, _ := ev.ID.RegMsgs(out)
				_ = ev.ID.PostRecv(0, buf, m)
				if err := ev.ID.Accept(nil); err != nil {
					t.Error(err)
				}
				wg.Add(1)
				go func(s *id.ID) {
					defer wg.Done()
					for {
						wc := comp(t, s.QP().RecvCQ())
						if wc.Status != id.WCSuccess {
							return // flushed at disconnect
						}
						// The client waits for the echo, so the previous
						// one is out of the send buffer.
						n := copy(out, buf[:wc.ByteLen])
						_ = s.PostRecv(0, buf, m)
						if err := s.PostSend(1, out[:n], om, 0); err != nil {
							t.Error(err)
							return
						}
					}
				}(ev.ID)
			case id.EventDisconnected:
				disc++
			}
		}
	}()

	var cw sync.WaitGroup
	for k := 0; k < conns; k++ {
		cw.Add(1)
		go func(k int) {
			defer cw.Done()
			ch := newRCChan(t, f)
			defer ch.src.Close()
			e := dial(t, ch, port, id.QPInitAttr{}, nil, nil)
			ch.want(t, id.EventEstablished)
			rbuf := make([]byte, size)
			rm, _ := e.id.RegMsgs(rbuf)
			for r := 0; r < rounds; r++ {
				msg := pattern(size, byte(k^r))
				_ = e.id.PostRecv(0, rbuf, rm)
				sm, _ := e.id.RegMsgs(msg)
				if err := e.id.PostSend(1, msg, sm, 0); err != nil {
					t.Error(err)
					return
				}
				wc := comp(t, e.qp.RecvCQ())
				if wc.Status != id.WCSuccess || int(wc.ByteLen) != size {
					t.Errorf("conn %d round %d: %+v", k, r, wc)
					return
				}
				sameBytes(t, rbuf, msg)
				_ = e.id.DeregMR(sm)
			}
			_ = e.id.Disconnect()
			ch.want(t, id.EventDisconnected)
			_ = e.id.Destroy()
		}(k)
	}
	cw.Wait()
	<-srvDone
	wg.Wait()
	for _, i := range ids {
		_ = i.Destroy()
	}
	_ = lis.Destroy()
	_ = srvCh.src.Close()
	quiesceFabs(t, f)
}

// TestRCRecvExhaustion: a Send finding no posted receive terminates the
// connection (DDP MSN_NOBUF), both ids see DISCONNECTED and outstanding
// work requests are flushed; one finding too small a receive completes
// it with a length error.
func TestRCRecvExhaustion(t *testing.T) {
	t.Run("none", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		if err := p.srv.id.PostRecv(1, nil, nil); err != nil {
			t.Fatal(err)
		}
		cbuf := make([]byte, 16)
		cm, _ := p.cli.id.RegMsgs(cbuf)
		_ = p.cli.id.PostRecv(5, cbuf, cm)
		for k := 0; k < 2; k++ {
			if err := p.cli.id.PostSend(uint64(10+k), nil, nil, id.SendSignaled); err != nil {
				t.Fatal(err)
			}
		}
		wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
		p.srvCh.want(t, id.EventDisconnected)
		p.cliCh.want(t, id.EventDisconnected)
		for k := 0; k < 2; k++ {
			wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCSend) // both were on the wire
		}
		wantWC(t, comp(t, p.cli.qp.RecvCQ()), id.WCWRFlushErr, id.WCRecv)
		// After the connection is gone, new requests are flushed at once.
		_ = p.cli.id.PostSend(12, nil, nil, 0)
		wc := comp(t, p.cli.qp.SendCQ())
		if wc.WRID != 12 || wc.Status != id.WCWRFlushErr {
			t.Fatalf("post after terminate: %+v", wc)
		}
		_ = p.srv.id.PostRecv(2, nil, nil)
		wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCWRFlushErr, id.WCRecv)
	})
	t.Run("too-small", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		rbuf := make([]byte, 10)
		rm, _ := p.srv.id.RegMsgs(rbuf)
		_ = p.srv.id.PostRecv(1, rbuf, rm)
		_ = p.srv.id.PostRecv(2, rbuf, rm)
		msg := make([]byte, 100)
		_ = p.cli.id.PostSend(3, msg, nil, id.SendInline)
		wc := comp(t, p.srv.qp.RecvCQ())
		wantWC(t, wc, id.WCLocLenErr, id.WCRecv)
		wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCWRFlushErr, id.WCRecv)
		p.srvCh.want(t, id.EventDisconnected)
		p.cliCh.want(t, id.EventDisconnected)
	})
}

// TestRCProtection covers remote protection errors (the peer terminates,
// the Read completes with a remote access error) and local ones (EINVAL at
// post time, or a local protection error for a region deregistered after
// the post).
func TestRCProtection(t *testing.T) {
	type target struct {
		name   string
		access id.Access
		off    uint64 // from the region's address
		n      int
		badKey bool
	}
	for _, tc := range []target{
		{name: "bad-stag", access: rwAccess, n: 8, badKey: true},
		{name: "out-of-bounds", access: rwAccess, off: 60, n: 8},
		{name: "before-region", access: rwAccess, off: ^uint64(0), n: 8},
		{name: "no-access", access: id.AccessLocalWrite, n: 8},
	} {
		for _, op := range []id.WROpcode{id.WRRead, id.WRWrite} {
			name := "read-"
			if op == id.WRWrite {
				name = "write-"
			}
			t.Run(name+tc.name, func(t *testing.T) {
				p := newPair(t, pairOpts{})
				defer p.close()
				buf := make([]byte, 64)
				m := reg(t, p.srv, buf, tc.access)
				key := m.RKey()
				if tc.badKey {
					key ^= 0xff // same index, wrong key
				}
				local := make([]byte, tc.n)
				lm := reg(t, p.cli, local, id.AccessLocalWrite)
				cbuf := make([]byte, 8)
				if err := p.cli.id.PostRecv(20, cbuf, reg(t, p.cli, cbuf, id.AccessLocalWrite)); err != nil {
					t.Fatal(err)
				}
				err := p.cli.qp.PostSend(&id.SendWR{WRID: 1, Opcode: op, Flags: id.SendSignaled, Buf: local, MR: lm,
					RemoteAddr: m.Addr() + tc.off, RKey: key})
				if err != nil {
					t.Fatal(err)
				}
				_ = p.cli.id.PostSend(2, nil, nil, id.SendSignaled)
				p.srvCh.want(t, id.EventDisconnected)
				p.cliCh.want(t, id.EventDisconnected)
				wc := comp(t, p.cli.qp.SendCQ())
				if op == id.WRRead {
					wantWC(t, wc, id.WCRemAccessErr, id.WCRDMARead)
				} else {
					// A Write completes once on the wire (iWARP has no
					// acknowledgement); the Terminate then flushes the rest.
					wantWC(t, wc, id.WCSuccess, id.WCRDMAWrite)
				}
				wc = comp(t, p.cli.qp.SendCQ())
				if wc.WRID != 2 || (wc.Status != id.WCWRFlushErr && wc.Status != id.WCSuccess) {
					t.Fatalf("second completion %+v", wc)
				}
				wantWC(t, comp(t, p.cli.qp.RecvCQ()), id.WCWRFlushErr, id.WCRecv)
			})
		}
	}

	t.Run("local", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		p.disconnect = true
		defer p.close()
		buf := make([]byte, 64)
		m := reg(t, p.cli, buf, id.AccessLocalWrite)
		other := make([]byte, 8)
		for _, wr := range []id.SendWR{
			{Opcode: id.WRSend, Buf: other, MR: m},                   // outside the region
			{Opcode: id.WRSend, Buf: buf},                            // no region
			{Opcode: id.WRSend, Buf: buf, MR: reg(t, p.srv, buf, 0)}, // another QP's
			{Opcode: 9}, // no such opcode
			{Opcode: id.WRRead, Buf: buf, MR: m, Flags: id.SendInline},
			{Opcode: id.WRSend, Buf: make([]byte, 1<<20), Flags: id.SendInline},
			{Opcode: id.WRSend, RemoteQPN: 5},
		} {
			if err := p.cli.qp.PostSend(&wr); !isErrno(err, syscall.EINVAL) {
				t.Errorf("PostSend(%+v) = %v, want EINVAL", wr.Opcode, err)
			}
		}
		ro := reg(t, p.cli, make([]byte, 8), 0)
		if err := p.cli.qp.PostRecv(&id.RecvWR{Buf: make([]byte, 8), MR: ro}); !isErrno(err, syscall.EINVAL) {
			t.Errorf("PostRecv outside region = %v", err)
		}
		if err := p.cli.id.PostRead(1, buf, ro, 0, 0, 1); !isErrno(err, syscall.EINVAL) {
			t.Errorf("Read into a region without local write = %v", err)
		}
		// The connection is still fine.
		_ = p.srv.id.PostRecv(1, nil, nil)
		_ = p.cli.id.PostSend(2, nil, nil, id.SendSignaled)
		wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCSend)
		wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
	})

	t.Run("deregistered-after-post", func(t *testing.T) {
		// The responder of an initiator that asks for no P2P mode holds
		// its sends until the initiator's first FPDU: a Send posted after
		// Accept waits, its region is deregistered, and when the hold ends
		// it completes with a local protection error while the next one
		// goes through.
		var (
			m   id.MR
			buf = make([]byte, 32)
		)
		p := newPair(t, pairOpts{srvFab: soft.New(soft.WithResponderHold(time.Hour), soft.WithP2P(0)), prepCli: func(tb testing.TB, e *rcEnd) {
			_ = e.qp.PostRecv(&id.RecvWR{WRID: 3})
			_ = e.qp.PostRecv(&id.RecvWR{WRID: 4})
		}, prepSrv: func(tb testing.TB, e *rcEnd) {
			m = reg(tb, e, buf, id.AccessLocalWrite)
			_ = e.qp.PostRecv(&id.RecvWR{WRID: 5})
		}})
		p.disconnect = true
		defer p.close()
		sq := p.srv.qp
		if err := sq.PostSend(&id.SendWR{WRID: 1, Opcode: id.WRSend, Flags: id.SendSignaled, Buf: buf, MR: m}); err != nil {
			t.Fatal(err)
		}
		if err := sq.DeregMR(m); err != nil {
			t.Fatal(err)
		}
		_ = sq.PostSend(&id.SendWR{WRID: 2, Opcode: id.WRSend, Flags: id.SendSignaled})
		if n := sq.SendCQ().Poll(make([]id.WC, 2)); n != 0 {
			t.Fatalf("%d completions during the hold", n)
		}
		// The initiator's first FPDU ends the hold.
		_ = p.cli.qp.PostSend(&id.SendWR{WRID: 6, Opcode: id.WRSend})
		wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
		wc := comp(t, sq.SendCQ())
		if wc.WRID != 1 || wc.Status != id.WCLocProtErr {
			t.Fatalf("%+v, want a local protection error", wc)
		}
		wantWC(t, comp(t, sq.SendCQ()), id.WCSuccess, id.WCSend)
		wantWC(t, comp(t, p.cli.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
	})
}

// TestRCQPLifecycle: receives posted before connect are used; a QP created
// after ESTABLISHED attaches; a QP destroyed leaves the connection up; the
// QP of a rejected connection is flushed.
func TestRCQPLifecycle(t *testing.T) {
	t.Run("after-established", func(t *testing.T) {
		f := soft.New()
		srvCh, cliCh := newRCChan(t, f), newRCChan(t, f)
		lis := listen(t, srvCh)
		cid, _ := id.Create(cliCh, nil, id.PSTCP)
		_ = cid.ResolveAddr(netip.AddrPort{}, lis.LocalAddr(), time.Second)
		cliCh.want(t, id.EventAddrResolved)
		_ = cid.ResolveRoute(time.Second)
		cliCh.want(t, id.EventRouteResolved)
		// No QP yet on either side.
		_ = cid.Connect(nil)
		ev := srvCh.want(t, id.EventConnectRequest)
		sid := ev.ID
		_ = sid.Accept(nil)
		srvCh.want(t, id.EventEstablished)
		cliCh.want(t, id.EventEstablished)
		if err := sid.CreateQP(nil); err != nil {
			t.Fatal(err)
		}
		if err := cid.CreateQP(nil); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 5)
		m, _ := sid.RegMsgs(buf)
		_ = sid.PostRecv(1, buf, m)
		time.Sleep(20 * time.Millisecond) // let the QPs attach
		_ = cid.PostSend(2, []byte("hello"), nil, id.SendInline|id.SendSignaled)
		wantWC(t, comp(t, cid.QP().SendCQ()), id.WCSuccess, id.WCSend)
		wantWC(t, comp(t, sid.QP().RecvCQ()), id.WCSuccess, id.WCRecv)
		if string(buf) != "hello" {
			t.Fatalf("got %q", buf)
		}
		// Destroying a QP leaves the connection up.
		if err := sid.DestroyQP(); err != nil {
			t.Fatal(err)
		}
		srvCh.none(t, 50*time.Millisecond)
		_ = cid.Disconnect()
		cliCh.want(t, id.EventDisconnected)
		srvCh.want(t, id.EventDisconnected)
		for _, i := range []*id.ID{cid, sid, lis} {
			_ = i.Destroy()
		}
		_ = srvCh.src.Close()
		_ = cliCh.src.Close()
		quiesceFabs(t, f)
	})
	t.Run("rejected", func(t *testing.T) {
		f := soft.New()
		srvCh, cliCh := newRCChan(t, f), newRCChan(t, f)
		lis := listen(t, srvCh)
		e := dial(t, cliCh, lis.LocalAddr().Port(), id.QPInitAttr{}, nil, func(tb testing.TB, e *rcEnd) {
			_ = e.id.PostRecv(1, nil, nil)
		})
		ev := srvCh.want(t, id.EventConnectRequest)
		_ = ev.ID.Reject(nil)
		cliCh.want(t, id.EventRejected)
		wantWC(t, comp(t, e.qp.RecvCQ()), id.WCWRFlushErr, id.WCRecv)
		// A send posted once the QP is in error completes at once, flushed.
		_ = e.id.PostSend(2, nil, nil, 0)
		wantWC(t, comp(t, e.qp.SendCQ()), id.WCWRFlushErr, id.WCSend)
		_ = e.id.Destroy()
		_ = ev.ID.Destroy()
		_ = lis.Destroy()
		_ = srvCh.src.Close()
		_ = cliCh.src.Close()
		quiesceFabs(t, f)
	})
	t.Run("queue-full", func(t *testing.T) {
		p := newPair(t, pairOpts{attr: id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 2, MaxRecvWR: 1}}})
		p.disconnect = true
		defer p.close()
		_ = p.cli.id.PostRecv(1, nil, nil)
		if err := p.cli.id.PostRecv(2, nil, nil); !isErrno(err, syscall.ENOMEM) {
			t.Fatalf("third receive: %v, want ENOMEM", err)
		}
	})
}

// TestRCP2PNoQPYet: a P2P initiator sends its RTR even when its QP is
// created only after ESTABLISHED.
func TestRCP2PNoQPYet(t *testing.T) {
	for _, rtr := range []soft.RTR{soft.RTRWrite, soft.RTRRead} {
		fs, fc := soft.New(), soft.New(soft.WithP2P(rtr))
		srvCh, cliCh := newRCChan(t, fs), newRCChan(t, fc)
		lis := listen(t, srvCh)
		cid, _ := id.Create(cliCh, nil, id.PSTCP)
		_ = cid.ResolveAddr(netip.AddrPort{}, lis.LocalAddr(), time.Second)
		cliCh.want(t, id.EventAddrResolved)
		_ = cid.ResolveRoute(time.Second)
		cliCh.want(t, id.EventRouteResolved)
		_ = cid.Connect(nil)
		ev := srvCh.want(t, id.EventConnectRequest)
		_ = ev.ID.Accept(nil)
		cliCh.want(t, id.EventEstablished)
		srvCh.want(t, id.EventEstablished) // the RTR arrived
		_ = cid.Disconnect()
		cliCh.want(t, id.EventDisconnected)
		srvCh.want(t, id.EventDisconnected)
		for _, i := range []*id.ID{cid, ev.ID, lis} {
			_ = i.Destroy()
		}
		_ = srvCh.src.Close()
		_ = cliCh.src.Close()
		quiesceFabs(t, fs, fc)
	}
}

// TestRCP2P runs Go initiators asking for peer-to-peer mode against the Go
// responder, with each RTR type.
func TestRCP2P(t *testing.T) {
	for _, rtr := range []soft.RTR{soft.RTRWrite, soft.RTRRead, soft.RTRWrite | soft.RTRRead} {
		t.Run(fmt.Sprint(rtr), func(t *testing.T) {
			p := newPair(t, pairOpts{srvFab: soft.New(), cliFab: soft.New(soft.WithP2P(rtr)), prepSrv: func(tb testing.TB, e *rcEnd) {
				_ = e.id.PostRecv(1, nil, nil)
			}})
			p.disconnect = true
			defer p.close()
			if !soft.ConnP2PRequested(p.srv.id.Endpoint()) {
				t.Fatal("no P2P request")
			}
			// The responder may send right away: the RTR came first.
			_ = p.cli.id.PostRecv(2, nil, nil)
			_ = p.srv.id.PostSend(3, nil, nil, 0)
			wantWC(t, comp(t, p.cli.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
			_ = p.cli.id.PostSend(4, nil, nil, 0)
			wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCSuccess, id.WCRecv)
		})
	}
}

// TestRCPostSendWithoutTheLoop: a Send posted on an idle connection is
// written, and completes, on the posting goroutine, so it reaches the peer
// while the connection's loop is stuck; posts that follow it in a burst
// wait for the loop, and everything arrives in posting order.
func TestRCPostSendWithoutTheLoop(t *testing.T) {
	const n = 5
	rbufs := make([][]byte, n)
	p := newPair(t, pairOpts{srvFab: soft.New(), cliFab: soft.New(), prepSrv: func(tb testing.TB, e *rcEnd) {
		for k := range rbufs {
			rbufs[k] = make([]byte, 64)
			m := reg(tb, e, rbufs[k], id.AccessLocalWrite)
			if err := e.qp.PostRecv(&id.RecvWR{WRID: uint64(k), Buf: rbufs[k], MR: m}); err != nil {
				tb.Fatal(err)
			}
		}
	}})
	p.disconnect = true
	defer p.close()
	msgs := make([][]byte, n)
	mrs := make([]id.MR, n)
	for k := range msgs {
		msgs[k] = pattern(64, byte(k+1))
		mrs[k] = reg(t, p.cli, msgs[k], 0)
	}
	release := soft.StallLoop(p.cli.id.Endpoint())
	released := false
	defer func() {
		if !released {
			release()
		}
	}()
	if err := p.cli.qp.PostSend(&id.SendWR{WRID: 100, Opcode: id.WRSend, Flags: id.SendSignaled, Buf: msgs[0], MR: mrs[0]}); err != nil {
		t.Fatal(err)
	}
	var wc [1]id.WC
	if p.cli.qp.SendCQ().Poll(wc[:]) != 1 || wc[0].WRID != 100 || wc[0].Status != id.WCSuccess {
		t.Fatalf("no send completion when PostSend returned (loop stuck): %+v", wc[0])
	}
	got := comp(t, p.srv.qp.RecvCQ())
	if got.WRID != 0 || got.Status != id.WCSuccess {
		t.Fatalf("first receive %+v", got)
	}
	sameBytes(t, rbufs[0][:got.ByteLen], msgs[0])
	for k := 1; k < n; k++ {
		if err := p.cli.qp.PostSend(&id.SendWR{WRID: uint64(100 + k), Opcode: id.WRSend, Buf: msgs[k], MR: mrs[k]}); err != nil {
			t.Fatal(err)
		}
	}
	release()
	released = true
	for k := 1; k < n; k++ {
		got := comp(t, p.srv.qp.RecvCQ())
		if got.WRID != uint64(k) || got.Status != id.WCSuccess {
			t.Fatalf("receive %d: %+v", k, got)
		}
		sameBytes(t, rbufs[k][:got.ByteLen], msgs[k])
	}
}

// TestRCServerFirstWithoutHold: between two cmrt fabrics the initiator asks
// for P2P mode, so a server that speaks first is not held (the hold is for
// initiators that ask for nothing, such as siw's): its first message,
// posted as Accept returns, arrives long before the responder hold, here
// 5 s, would have let it go.
func TestRCServerFirstWithoutHold(t *testing.T) {
	const hold = 5 * time.Second
	cbuf := make([]byte, 64)
	var got id.WC
	p := newPair(t, pairOpts{srvFab: soft.New(soft.WithResponderHold(hold)), cliFab: soft.New(),
		prepCli: func(tb testing.TB, e *rcEnd) {
			if err := e.qp.PostRecv(&id.RecvWR{WRID: 1, Buf: cbuf, MR: reg(tb, e, cbuf, id.AccessLocalWrite)}); err != nil {
				tb.Fatal(err)
			}
		}})
	p.disconnect = true
	defer p.close()
	t0 := time.Now()
	if err := p.srv.id.PostSend(2, []byte("greeting"), nil, id.SendInline); err != nil {
		t.Fatal(err)
	}
	got = comp(t, p.cli.qp.RecvCQ())
	if d := time.Since(t0); d > hold/2 {
		t.Fatalf("the server's first message took %v: held", d)
	}
	if got.Status != id.WCSuccess || string(cbuf[:got.ByteLen]) != "greeting" {
		t.Fatalf("%+v %q", got, cbuf[:got.ByteLen])
	}
	if !soft.ConnP2PRequested(p.srv.id.Endpoint()) {
		t.Error("the initiator asked for no P2P mode")
	}
}

// TestRCMSSReadAtFirstNeed: a data path reads the socket's MSS
// (TCP_MAXSEG) when a message first needs it, one with more payload than
// the least FPDU, not as each end enters RTS (two system calls per
// connection that most never needed); messages of either kind cross whole.
func TestRCMSSReadAtFirstNeed(t *testing.T) {
	p := newPair(t, pairOpts{attr: id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}})
	p.disconnect = true
	defer p.close()
	ends := []*rcEnd{p.cli, p.srv}
	for _, e := range ends {
		if soft.PathMSSRead(e.id.Endpoint()) {
			t.Fatal("MSS read as the connection entered RTS")
		}
	}
	sendOver(t, p.cli, p.srv, 24, pattern(24, 24))
	sendOver(t, p.srv, p.cli, 64, pattern(64, 64))
	for _, e := range ends {
		if soft.PathMSSRead(e.id.Endpoint()) {
			t.Fatal("MSS read for messages that fit the least FPDU")
		}
	}
	sendOver(t, p.cli, p.srv, 256<<10, pattern(256<<10, 0))
	if !soft.PathMSSRead(p.cli.id.Endpoint()) {
		t.Fatal("a 256 KiB Send did not read the MSS")
	}
	if soft.PathMSSRead(p.srv.id.Endpoint()) {
		t.Fatal("the receiver read the MSS")
	}
}

// TestRCRTRWithoutTxBuffer: the initiator's RTR and the responder's
// answer, zero-length RDMA Writes, are written without allocating a tx
// buffer (each allocated one, 2 of a connection's allocations, finding 25);
// messages then cross both ways, in the buffer made by the first.
func TestRCRTRWithoutTxBuffer(t *testing.T) {
	for _, m := range crcModes {
		t.Run(m.name, func(t *testing.T) {
			p := crcPair(t, m.srv, m.cli, pairOpts{attr: id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}})
			defer p.close()
			ends := map[string]*rcEnd{"client": p.cli, "server": p.srv}
			for name, e := range ends {
				deadline := time.Now().Add(10 * time.Second)
				for {
					done, txCap, ok := soft.PathStart(e.id.Endpoint())
					if !ok {
						t.Fatalf("%s: no data path with a QP", name)
					}
					if done {
						if txCap != 0 {
							t.Errorf("%s: a %d-byte tx buffer for the RTR exchange", name, txCap)
						}
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%s: the RTR exchange did not end", name)
					}
					time.Sleep(time.Millisecond)
				}
			}
			for _, dir := range [][2]*rcEnd{{p.cli, p.srv}, {p.srv, p.cli}} {
				sendOver(t, dir[0], dir[1], 64, pattern(48, 7))
			}
		})
	}
}

// sendOver sends msg from one end to the other, into a receive of room
// bytes the receiver posts first: both complete successfully, and the
// receive holds msg.
func sendOver(t *testing.T, from, to *rcEnd, room int, msg []byte) {
	t.Helper()
	in := make([]byte, room)
	if err := to.qp.PostRecv(&id.RecvWR{WRID: 1, Buf: in, MR: reg(t, to, in, id.AccessLocalWrite)}); err != nil {
		t.Fatal(err)
	}
	if err := from.qp.PostSend(&id.SendWR{WRID: 2, Opcode: id.WRSend, Flags: id.SendSignaled, Buf: msg, MR: reg(t, from, msg, 0)}); err != nil {
		t.Fatal(err)
	}
	wantWC(t, comp(t, from.qp.SendCQ()), id.WCSuccess, id.WCSend)
	wc := comp(t, to.qp.RecvCQ())
	wantWC(t, wc, id.WCSuccess, id.WCRecv)
	sameBytes(t, in[:wc.ByteLen], msg)
}
