package kernel_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// deviceOf returns a device of the given transport with an IPv4 address,
// or skips.
func deviceOf(t *testing.T, transport string) (fabric.Device, netip.Addr) {
	t.Helper()
	src, err := kernel.Default().Open()
	if err != nil {
		t.Skipf("kernel RDMA CM unavailable: %v", err)
	}
	_ = src.Close()
	devs, err := kernel.Default().Devices()
	if err != nil {
		t.Skipf("no RDMA devices: %v", err)
	}
	for _, d := range devs {
		if d.Transport != transport {
			continue
		}
		for _, a := range d.Addrs {
			if a.Is4() {
				return d, a
			}
		}
	}
	t.Skipf("no %s device with an IPv4 address among %v", transport, devs)
	return fabric.Device{}, netip.Addr{}
}

// comp waits for one completion of cq.
func comp(t *testing.T, cq id.CQ) id.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]id.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for a completion: %v", err)
		}
	}
	return wc[0]
}

func wantWC(t *testing.T, what string, wc id.WC, wrid uint64, op id.WCOpcode, n uint32) {
	t.Helper()
	if wc.Status != id.WCSuccess || wc.WRID != wrid || wc.Opcode != op || (n != ^uint32(0) && wc.ByteLen != n) {
		t.Fatalf("%s: %+v (status %s), want wr_id %d opcode %d %d bytes", what, wc, wc.Status, wrid, op, n)
	}
}

// rcPair connects a client and a server id with QPs on addr, each with a
// receive posted, and returns them established.
func rcPair(t *testing.T, addr netip.Addr, iwarp bool) (c, s *id.ID, cbuf, sbuf []byte, cmr, smr id.MR, sch *channel.Channel) {
	t.Helper()
	sch = newChannel(t)
	cch := newChannel(t)
	l, laddr := listen(t, sch, id.PSTCP, addr)
	t.Cleanup(func() { destroy(t, l) })
	c = create(t, cch, id.PSTCP)
	resolve(t, cch, c, laddr)
	attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxInlineData: 64}}
	if err := c.CreateQP(attr); err != nil {
		t.Fatal(err)
	}
	cbuf = make([]byte, 8192)
	var err error
	if cmr, err = c.RegWrite(cbuf); err != nil {
		t.Fatal(err)
	}
	if err := c.PostRecv(100, cbuf[:4096], cmr); err != nil {
		t.Fatal(err)
	}
	if err := c.Connect(&id.ConnParam{ResponderResources: 4, InitiatorDepth: 4, RetryCount: 7, RNRRetryCount: 7}); err != nil {
		t.Fatal(err)
	}
	ev := want(t, sch, id.EventConnectRequest)
	s = ev.ID
	if !iwarp && ev.Conn.QPNum != c.QP().Num() { // iWARP's MPA carries no QP number
		t.Errorf("request names QP %#x, the client's is %#x", ev.Conn.QPNum, c.QP().Num())
	}
	_ = ev.Ack()
	if err := s.CreateQP(attr); err != nil {
		t.Fatal(err)
	}
	sbuf = make([]byte, 8192)
	if smr, err = s.RegRead(sbuf); err != nil {
		t.Fatal(err)
	}
	if err := s.PostRecv(200, sbuf[:4096], smr); err != nil {
		t.Fatal(err)
	}
	if err := s.Accept(nil); err != nil {
		t.Fatal(err)
	}
	// The client's CONNECT_RESPONSE is handled by the fabric: RTR, RTS,
	// RTU, and the client sees ESTABLISHED.
	ev = want(t, cch, id.EventEstablished)
	if !iwarp && ev.Conn.QPNum != s.QP().Num() {
		t.Errorf("reply names QP %#x, the server's is %#x", ev.Conn.QPNum, s.QP().Num())
	}
	_ = ev.Ack()
	_ = want(t, sch, id.EventEstablished).Ack()
	t.Cleanup(func() {
		destroy(t, c, s)
	})
	return c, s, cbuf, sbuf, cmr, smr, sch
}

// TestDeviceVerbs runs the data path on the host's devices: RC on RoCE and
// iWARP (sends, inline sends, RDMA Write and Read, immediate data where
// the device has it, the CQ descriptor in a reactor, flushes after
// disconnect), UD and multicast on RoCE. It skips without devices.
func TestDeviceVerbs(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tr := range []string{"InfiniBand", "iWARP"} {
		t.Run("RC-"+tr, func(t *testing.T) {
			dev, addr := deviceOf(t, tr)
			t.Logf("device %s, address %s", dev.Name, addr)
			iwarp := tr == "iWARP"
			c, s, cbuf, sbuf, cmr, smr, sch := rcPair(t, addr, iwarp)

			// Send: the server's receive gets it.
			copy(cbuf[4096:], "ping from the client")
			if err := c.PostSend(1, cbuf[4096:4096+20], cmr, id.SendSignaled); err != nil {
				t.Fatal(err)
			}
			wantWC(t, "client send", comp(t, c.QP().SendCQ()), 1, id.WCSend, 20)
			wc := comp(t, s.QP().RecvCQ())
			wantWC(t, "server receive", wc, 200, id.WCRecv, 20)
			if string(sbuf[:20]) != "ping from the client" {
				t.Fatalf("server got %q", sbuf[:20])
			}

			// Inline send, its buffer reused at once.
			msg := []byte("inline pong")
			if err := s.PostSend(2, msg, nil, id.SendSignaled|id.SendInline); err != nil {
				t.Fatal(err)
			}
			copy(msg, "XXXXXXXXXXX")
			wantWC(t, "server inline send", comp(t, s.QP().SendCQ()), 2, id.WCSend, 11)
			wantWC(t, "client receive", comp(t, c.QP().RecvCQ()), 100, id.WCRecv, 11)
			if string(cbuf[:11]) != "inline pong" {
				t.Fatalf("client got %q", cbuf[:11])
			}

			// RDMA Write into the client's region, then RDMA Read of the
			// server's region into the client's.
			copy(sbuf[1024:], bytes.Repeat([]byte("w"), 3000))
			if err := s.PostWrite(3, sbuf[1024:4024], smr, id.SendSignaled, cmr.Addr()+2000, cmr.RKey()); err != nil {
				t.Fatal(err)
			}
			wantWC(t, "RDMA Write", comp(t, s.QP().SendCQ()), 3, id.WCRDMAWrite, ^uint32(0))
			// On iWARP a Write completes once the bytes are handed to TCP,
			// before the peer has placed them (as siw, and the software
			// fabric); on RoCE once the peer acknowledged them. Placement
			// follows within a bounded time either way.
			for deadline := time.Now().Add(5 * time.Second); !bytes.Equal(cbuf[2000:5000], sbuf[1024:4024]); {
				if !iwarp || time.Now().After(deadline) {
					t.Fatal("RDMA Write did not place the data")
				}
				time.Sleep(time.Millisecond)
			}
			copy(sbuf[5000:], "read me back")
			if err := c.PostRead(4, cbuf[6000:6012], cmr, id.SendSignaled, smr.Addr()+5000, smr.RKey()); err != nil {
				t.Fatal(err)
			}
			wantWC(t, "RDMA Read", comp(t, c.QP().SendCQ()), 4, id.WCRDMARead, ^uint32(0))
			if string(cbuf[6000:6012]) != "read me back" {
				t.Fatalf("RDMA Read got %q", cbuf[6000:6012])
			}

			// Send with immediate data: RoCE carries it; iWARP refuses it.
			if !iwarp {
				if err := s.PostRecv(201, sbuf[:64], smr); err != nil {
					t.Fatal(err)
				}
			}
			err := c.QP().PostSend(&id.SendWR{WRID: 5, Opcode: fabric.WRSendWithImm, Flags: id.SendSignaled,
				Buf: cbuf[4096:4100], MR: cmr, ImmData: 0xC0FFEE})
			if iwarp {
				if !errors.Is(err, syscall.EINVAL) {
					t.Fatalf("send with immediate on iWARP: %v", err)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				wantWC(t, "send with immediate", comp(t, c.QP().SendCQ()), 5, id.WCSend, 4)
				wc := comp(t, s.QP().RecvCQ())
				wantWC(t, "receive with immediate", wc, 201, id.WCRecv, 4)
				if !wc.WithImm || wc.ImmData != 0xC0FFEE {
					t.Fatalf("immediate data: %v %#x", wc.WithImm, wc.ImmData)
				}
			}

			// The server's receive queue in a reactor: its descriptor is
			// readable while completions are queued.
			r, err := reactor.New()
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close(context.Background())
			got := make(chan id.WC, 16)
			if err := r.RegisterCQ(s.QP().RecvCQ(), reactor.CompletionFunc(func(wc *id.WC) error {
				got <- *wc
				return nil
			})); err != nil {
				t.Fatal(err)
			}
			for k := 0; k < 4; k++ {
				if err := s.PostRecv(uint64(300+k), sbuf[k*100:k*100+100], smr); err != nil {
					t.Fatal(err)
				}
			}
			for k := 0; k < 4; k++ {
				if err := c.PostSend(uint64(10+k), cbuf[4096:4096+8], cmr, 0); err != nil {
					t.Fatal(err)
				}
			}
			for k := 0; k < 4; k++ {
				select {
				case wc := <-got:
					wantWC(t, "reactor completion", wc, uint64(300+k), id.WCRecv, 8)
				case <-time.After(10 * time.Second):
					t.Fatalf("reactor: %d of 4 completions", k)
				}
			}
			_ = r.Close(context.Background())

			// Disconnect: the server's outstanding receive flushes when
			// its DISCONNECTED is read; later receives flush at once.
			if err := s.PostRecv(400, sbuf[:64], smr); err != nil {
				t.Fatal(err)
			}
			if err := c.Disconnect(); err != nil {
				t.Fatal(err)
			}
			_ = want(t, sch, id.EventDisconnected).Ack()
			wc = comp(t, s.QP().RecvCQ())
			if wc.WRID != 400 || wc.Status != id.WCWRFlushErr {
				t.Fatalf("outstanding receive after disconnect: %+v", wc)
			}
			if err := c.PostRecv(101, cbuf[:64], cmr); err != nil {
				t.Fatal(err)
			}
			if wc := comp(t, c.QP().RecvCQ()); wc.WRID != 101 || wc.Status != id.WCWRFlushErr {
				t.Fatalf("receive after disconnect: %+v", wc)
			}
			if err := c.DeregMR(cmr); err != nil {
				t.Fatal(err)
			}
			if err := c.DeregMR(cmr); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("second dereg: %v", err)
			}
		})
	}

	t.Run("UD", func(t *testing.T) {
		_, addr := deviceOf(t, "InfiniBand")
		sch, cch := newChannel(t), newChannel(t)
		l, laddr := listen(t, sch, id.PSUDP, addr)
		defer destroy(t, l)
		c := create(t, cch, id.PSUDP)
		resolve(t, cch, c, laddr)
		attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 8, MaxRecvWR: 8}}
		if err := c.CreateQP(attr); err != nil {
			t.Fatal(err)
		}
		cbuf := make([]byte, 2048)
		cmr, err := c.RegMsgs(cbuf)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.PostRecv(1, cbuf[:1024], cmr); err != nil {
			t.Fatal(err)
		}
		if err := c.Connect(nil); err != nil {
			t.Fatal(err)
		}
		ev := want(t, sch, id.EventConnectRequest)
		s := ev.ID
		_ = ev.Ack()
		if err := s.CreateQP(attr); err != nil {
			t.Fatal(err)
		}
		sbuf := make([]byte, 2048)
		smr, err := s.RegMsgs(sbuf)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PostRecv(2, sbuf[:1024], smr); err != nil {
			t.Fatal(err)
		}
		if err := s.Accept(nil); err != nil {
			t.Fatal(err)
		}
		ev = want(t, cch, id.EventEstablished)
		ah, rqpn := ev.UD.AH, ev.UD.QPNum
		_ = ev.Ack()
		if rqpn != s.QP().Num() {
			t.Fatalf("SIDR reply names QP %#x, the server's is %#x", rqpn, s.QP().Num())
		}
		copy(cbuf[1024:], "datagram")
		if err := c.PostUDSend(3, cbuf[1024:1032], cmr, id.SendSignaled, &ah, rqpn); err != nil {
			t.Fatal(err)
		}
		wantWC(t, "UD send", comp(t, c.QP().SendCQ()), 3, id.WCSend, 8)
		wc := comp(t, s.QP().RecvCQ())
		wantWC(t, "UD receive", wc, 2, id.WCRecv, 48)
		if !wc.GRH || wc.SrcQP != c.QP().Num() || wc.Src.Addr() != addr || string(sbuf[40:48]) != "datagram" {
			t.Fatalf("UD receive: %+v, data %q", wc, sbuf[40:48])
		}
		// The reply goes where the datagram came from, through an address
		// handle built from the completion, as udaddy's server builds it.
		back := id.AHAttr{DGID: wc.Src.Addr().As16(), IsGlobal: 1, HopLimit: 64, PortNum: 1}
		if err := s.PostUDSend(4, sbuf[40:48], smr, id.SendSignaled, &back, wc.SrcQP); err != nil {
			t.Fatal(err)
		}
		wantWC(t, "UD reply", comp(t, s.QP().SendCQ()), 4, id.WCSend, 8)
		wantWC(t, "UD reply received", comp(t, c.QP().RecvCQ()), 1, id.WCRecv, 48)
		destroy(t, c, s)
	})

	t.Run("Multicast", func(t *testing.T) {
		_, addr := deviceOf(t, "InfiniBand")
		g := netip.MustParseAddr("239.1.2.9")
		var ids [2]*id.ID
		var bufs [2][]byte
		var mrs [2]id.MR
		var ahs [2]id.AHAttr
		for k := range ids {
			ch := newChannel(t)
			j := create(t, ch, id.PSUDP)
			if err := j.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
				t.Fatal(err)
			}
			if err := j.CreateQP(&id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 4, MaxRecvWR: 4}}); err != nil {
				t.Fatal(err)
			}
			bufs[k] = make([]byte, 1024)
			var err error
			if mrs[k], err = j.RegMsgs(bufs[k]); err != nil {
				t.Fatal(err)
			}
			if err := j.PostRecv(uint64(k), bufs[k][:512], mrs[k]); err != nil {
				t.Fatal(err)
			}
			if err := j.JoinMulticast(g, nil); err != nil {
				t.Fatal(err)
			}
			ev := want(t, ch, id.EventMulticastJoin)
			ahs[k] = ev.UD.AH
			_ = ev.Ack()
			ids[k] = j
		}
		copy(bufs[0][512:], "to the group")
		if err := ids[0].PostUDSend(9, bufs[0][512:524], mrs[0], id.SendSignaled, &ahs[0], fabric.MulticastQPNum); err != nil {
			t.Fatal(err)
		}
		wantWC(t, "multicast send", comp(t, ids[0].QP().SendCQ()), 9, id.WCSend, 12)
		wc := comp(t, ids[1].QP().RecvCQ())
		wantWC(t, "multicast receive", wc, 1, id.WCRecv, 52)
		if string(bufs[1][40:52]) != "to the group" {
			t.Fatalf("member got %q", bufs[1][40:52])
		}
		for _, j := range ids {
			if err := j.LeaveMulticast(g); err != nil {
				t.Fatal(err)
			}
		}
		destroy(t, ids[0], ids[1])
	})

	t.Run("Errors", func(t *testing.T) {
		_, addr := deviceOf(t, "InfiniBand")
		ch := newChannel(t)
		// An id bound to no device cannot have a QP.
		u := create(t, ch, id.PSTCP)
		if err := u.CreateQP(nil); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("QP on an unbound id: %v", err)
		}
		b := create(t, ch, id.PSTCP)
		if err := b.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
			t.Fatal(err)
		}
		if err := b.CreateQP(&id.QPInitAttr{Cap: id.QPCap{MaxSendWR: -1}}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("negative queue depth: %v", err)
		}
		if err := b.CreateQP(&id.QPInitAttr{Cap: id.QPCap{MaxInlineData: 1 << 20}}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("inline size over the device's: %v", err)
		}
		if err := b.CreateQP(nil); err != nil {
			t.Fatal(err)
		}
		if err := b.CreateQP(nil); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("second QP: %v", err)
		}
		if _, err := b.RegMsgs(nil); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("empty region: %v", err)
		}
		qp := b.QP()
		if err := b.DestroyQP(); err != nil {
			t.Fatal(err)
		}
		if err := qp.Destroy(); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("second destroy: %v", err)
		}
		if err := qp.PostSend(&id.SendWR{Opcode: id.WRSend}); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("send on a destroyed QP: %v", err)
		}
		if qp.SendCQ().Fd() != -1 {
			t.Error("destroyed QP's CQ has a descriptor")
		}
		destroy(t, u, b)
	})
}

// TestDeviceVerbsSync is rdma_server/rdma_client's flow on synchronous ids
// with CreateEP-like QPs: a passive id's QP created on the request.
func TestDeviceVerbsSync(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	_, addr := deviceOf(t, "InfiniBand")
	kf := id.WithFabric(kernel.Default())
	lis, err := id.Create(nil, nil, id.PSTCP, kf)
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Destroy()
	if err := lis.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxInlineData: 16}, SigAll: true}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		s, err := lis.GetRequestContext(ctx)
		if err != nil {
			done <- err
			return
		}
		defer s.Destroy()
		if err := s.CreateQP(attr); err != nil {
			done <- err
			return
		}
		buf := make([]byte, 16)
		mr, err := s.RegMsgs(buf)
		if err == nil {
			err = s.PostRecv(1, buf, mr)
		}
		if err == nil {
			err = s.AcceptContext(ctx, nil)
		}
		if err == nil {
			var wc id.WC
			if wc, err = s.GetRecvComp(ctx); err == nil && (wc.Status != id.WCSuccess || binary.BigEndian.Uint32(buf) != 0xABCD) {
				err = errors.New("bad message")
			}
		}
		if err == nil {
			err = s.PostSend(2, buf, nil, id.SendInline)
		}
		if err == nil {
			_, err = s.GetSendComp(ctx)
		}
		done <- err
		// Both sides disconnect at once (each one's DISCONNECTED needs
		// the other's disconnect on IB).
		_ = s.DisconnectContext(ctx)
		close(done)
	}()
	c, err := id.Create(nil, nil, id.PSTCP, kf)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Destroy()
	if err := c.ResolveAddrContext(ctx, netip.AddrPort{}, lis.LocalAddr(), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.ResolveRouteContext(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateQP(attr); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	mr, err := c.RegMsgs(buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.PostRecv(1, buf, mr); err != nil {
		t.Fatal(err)
	}
	if err := c.ConnectContext(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if c.Event().Type != id.EventEstablished {
		t.Fatalf("connect returned with %s", c.Event().Type)
	}
	msg := make([]byte, 16)
	binary.BigEndian.PutUint32(msg, 0xABCD)
	if err := c.PostSend(2, msg, nil, id.SendInline); err != nil {
		t.Fatal(err)
	}
	if wc, err := c.GetRecvComp(ctx); err != nil || wc.Status != id.WCSuccess || binary.BigEndian.Uint32(buf) != 0xABCD {
		t.Fatalf("echo: %+v %v %x", wc, err, buf[:4])
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
	if err := c.DisconnectContext(ctx); err != nil {
		t.Errorf("disconnect: %v", err)
	}
	<-done

}

// TestDeviceSharedCQ: a completion queue made on the device apart from
// any QP (ID.CreateCQ, ibv_create_cq's queue) serves the server QPs of two
// connections in both directions, each completion naming its QP; it is
// busy (EBUSY) while a QP uses it and destroyed once none does (EINVAL a
// second time, and for a QP asking for it after); a UD QP's receive queue
// cannot be shared (EOPNOTSUPP).
func TestDeviceSharedCQ(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	for _, tr := range []string{"InfiniBand", "iWARP"} {
		t.Run(tr, func(t *testing.T) {
			_, addr := deviceOf(t, tr)
			sch, cch := newChannel(t), newChannel(t)
			l, laddr := listen(t, sch, id.PSTCP, addr)
			defer destroy(t, l)
			cq, err := l.CreateCQ(16)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cq.Destroy() }) // after a failure: it holds the device
			attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxInlineData: 64}, SendCQ: cq, RecvCQ: cq}
			own := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxInlineData: 64}}
			var cli, srv [2]*id.ID
			for k := range cli {
				cli[k] = create(t, cch, id.PSTCP)
				resolve(t, cch, cli[k], laddr)
				if err := cli[k].CreateQP(own); err != nil {
					t.Fatal(err)
				}
				cbuf := make([]byte, 64) // for the server's reply (on IB an unposted receive is an RNR retry)
				cmr, err := cli[k].RegMsgs(cbuf)
				if err != nil {
					t.Fatal(err)
				}
				if err := cli[k].PostRecv(uint64(300+k), cbuf, cmr); err != nil {
					t.Fatal(err)
				}
				if err := cli[k].Connect(&id.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7}); err != nil {
					t.Fatal(err)
				}
				ev := want(t, sch, id.EventConnectRequest)
				srv[k] = ev.ID
				_ = ev.Ack()
				if err := srv[k].CreateQP(attr); err != nil {
					t.Fatal(err)
				}
				buf := make([]byte, 64)
				mr, err := srv[k].RegMsgs(buf)
				if err != nil {
					t.Fatal(err)
				}
				if err := srv[k].PostRecv(uint64(100+k), buf, mr); err != nil {
					t.Fatal(err)
				}
				if err := srv[k].Accept(nil); err != nil {
					t.Fatal(err)
				}
				_ = want(t, cch, id.EventEstablished).Ack()
				_ = want(t, sch, id.EventEstablished).Ack()
			}
			defer destroy(t, cli[0], cli[1], srv[0], srv[1])
			for k := range cli {
				msg := []byte("to the shared queue")
				if err := cli[k].PostSend(uint64(k), msg, nil, id.SendInline|id.SendSignaled); err != nil {
					t.Fatal(err)
				}
				wantWC(t, "client send", comp(t, cli[k].QP().SendCQ()), uint64(k), id.WCSend, uint32(len(msg)))
				if err := srv[k].PostSend(uint64(200+k), []byte("reply"), nil, id.SendInline|id.SendSignaled); err != nil {
					t.Fatal(err)
				}
			}
			got := map[uint64]uint32{}
			for range 4 {
				wc := comp(t, cq)
				if wc.Status != id.WCSuccess {
					t.Fatalf("completion %+v (status %s)", wc, wc.Status)
				}
				got[wc.WRID] = wc.QPNum
			}
			for k, s := range srv {
				if got[uint64(100+k)] != s.QP().Num() || got[uint64(200+k)] != s.QP().Num() {
					t.Fatalf("completions by wr_id %v; server QP %d is %#x", got, k, s.QP().Num())
				}
				wantWC(t, "client receive", comp(t, cli[k].QP().RecvCQ()), uint64(300+k), id.WCRecv, 5)
			}
			if err := cq.Destroy(); !errors.Is(err, syscall.EBUSY) {
				t.Fatalf("Destroy while QPs use it: %v, want EBUSY", err)
			}
			for _, s := range srv {
				if err := s.DestroyQP(); err != nil {
					t.Fatal(err)
				}
			}
			if err := cq.Destroy(); err != nil {
				t.Fatalf("Destroy once no QP uses it: %v", err)
			}
			if err := cq.Destroy(); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("second Destroy: %v, want EINVAL", err)
			}
			if err := srv[0].CreateQP(attr); !errors.Is(err, syscall.EINVAL) {
				t.Fatalf("CreateQP on a destroyed queue: %v, want EINVAL", err)
			}

			// UD: the send queue may be shared, the receive queue not.
			ucq, err := l.CreateCQ(4)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = ucq.Destroy() })
			defer func() {
				if err := ucq.Destroy(); err != nil {
					t.Error(err)
				}
			}()
			u := create(t, cch, id.PSUDP)
			defer destroy(t, u)
			if err := u.Bind(netip.AddrPortFrom(addr, 0)); err != nil {
				t.Fatal(err)
			}
			// (siw has no UD QPs at all: EOPNOTSUPP too, saying so.)
			if err := u.CreateQP(&id.QPInitAttr{RecvCQ: ucq}); !errors.Is(err, syscall.EOPNOTSUPP) || u.QP() != nil {
				t.Fatalf("a UD QP on a shared receive queue: %v, want EOPNOTSUPP", err)
			}
		})
	}
}
