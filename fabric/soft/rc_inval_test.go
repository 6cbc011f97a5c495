package soft_test

import (
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestRCSendWithInvalidate: a Send with Invalidate is received like a Send,
// then the region it names serves no remote access (a Read of it is a
// remote access error that terminates the stream) and no local one (a work
// request on it completes with a local protection error), yet stays
// registered until deregistered. A Send with Invalidate naming no region
// fails the receive with a remote invalid request error and terminates.
func TestRCSendWithInvalidate(t *testing.T) {
	for _, solicited := range []bool{false, true} {
		name := "send-inv"
		flags := id.SendSignaled
		if solicited {
			name, flags = "send-se-inv", flags|id.SendSolicited
		}
		t.Run(name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			defer p.close()
			target := pattern(64, 0x33)
			tm := reg(t, p.srv, target, rwAccess)
			// Readable before the invalidation.
			got := make([]byte, 64)
			gm := reg(t, p.cli, got, id.AccessLocalWrite)
			if err := p.cli.id.PostRead(1, got, gm, id.SendSignaled, tm.Addr(), tm.RKey()); err != nil {
				t.Fatal(err)
			}
			wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCRDMARead)
			sameBytes(t, got, target)

			rbuf := make([]byte, 16)
			if err := p.srv.id.PostRecv(7, rbuf, reg(t, p.srv, rbuf, id.AccessLocalWrite)); err != nil {
				t.Fatal(err)
			}
			msg := []byte("done with it")
			if err := p.cli.id.PostSendWithInv(2, msg, reg(t, p.cli, msg, 0), flags, tm.RKey()); err != nil {
				t.Fatal(err)
			}
			wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCSuccess, id.WCSend)
			wc := comp(t, p.srv.qp.RecvCQ())
			wantWC(t, wc, id.WCSuccess, id.WCRecv)
			if wc.WRID != 7 || int(wc.ByteLen) != len(msg) || !wc.Invalidated || wc.InvalidatedRKey != tm.RKey() ||
				wc.Solicited != solicited {
				t.Fatalf("receive %+v, want %d bytes, invalidated rkey %#x, solicited %v", wc, len(msg), tm.RKey(), solicited)
			}
			sameBytes(t, rbuf[:len(msg)], msg)

			// Local use of the invalidated region fails in its completion.
			if err := p.srv.qp.PostSend(&id.SendWR{WRID: 8, Opcode: id.WRSend, Flags: id.SendSignaled, Buf: target, MR: tm}); err != nil {
				t.Fatal(err)
			}
			if wc := comp(t, p.srv.qp.SendCQ()); wc.WRID != 8 || wc.Status != id.WCLocProtErr {
				t.Fatalf("send from the invalidated region: %+v, want a local protection error", wc)
			}
			// Remote use: the Read fails and the stream is terminated.
			if err := p.cli.id.PostRead(3, got, gm, id.SendSignaled, tm.Addr(), tm.RKey()); err != nil {
				t.Fatal(err)
			}
			wantWC(t, comp(t, p.cli.qp.SendCQ()), id.WCRemAccessErr, id.WCRDMARead)
			p.srvCh.want(t, id.EventDisconnected)
			p.cliCh.want(t, id.EventDisconnected)
			// Still registered: deregistered once.
			if err := p.srv.qp.DeregMR(tm); err != nil {
				t.Fatalf("dereg of the invalidated region: %v", err)
			}
			if err := p.srv.qp.DeregMR(tm); !isErrno(err, syscall.EINVAL) {
				t.Fatalf("second dereg: %v, want EINVAL", err)
			}
		})
	}

	// Issue 18 item 9: a peer may invalidate only a region it could reach.
	// Naming a local-only one (here the receive buffer itself, whose STag
	// a peer can learn or guess) fails the receive as an unknown STag does,
	// and the region is not invalidated.
	t.Run("local-only-region", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		rbuf := make([]byte, 16)
		rm, err := p.srv.id.RegMsgs(rbuf)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.srv.id.PostRecv(7, rbuf, rm); err != nil {
			t.Fatal(err)
		}
		if err := p.cli.id.PostSendWithInv(2, nil, nil, id.SendSignaled, rm.RKey()); err != nil {
			t.Fatal(err)
		}
		wc := comp(t, p.srv.qp.RecvCQ())
		if wc.WRID != 7 || wc.Status != id.WCRemInvReqErr || wc.Invalidated {
			t.Fatalf("receive %+v, want a remote invalid request error", wc)
		}
		p.srvCh.want(t, id.EventDisconnected)
		p.cliCh.want(t, id.EventDisconnected)
		if !soft.MRValid(rm) {
			t.Fatal("the peer invalidated a local-only region")
		}
	})

	t.Run("no-such-region", func(t *testing.T) {
		p := newPair(t, pairOpts{})
		defer p.close()
		tm := reg(t, p.srv, make([]byte, 8), rwAccess)
		for _, wrid := range []uint64{7, 8} {
			buf := make([]byte, 8)
			if err := p.srv.id.PostRecv(wrid, buf, reg(t, p.srv, buf, id.AccessLocalWrite)); err != nil {
				t.Fatal(err)
			}
		}
		if err := p.cli.id.PostSendWithInv(2, nil, nil, id.SendSignaled, tm.RKey()^0xff); err != nil {
			t.Fatal(err)
		}
		wc := comp(t, p.srv.qp.RecvCQ())
		if wc.WRID != 7 || wc.Status != id.WCRemInvReqErr || wc.Invalidated {
			t.Fatalf("receive %+v, want a remote invalid request error", wc)
		}
		wantWC(t, comp(t, p.srv.qp.RecvCQ()), id.WCWRFlushErr, id.WCRecv)
		p.srvCh.want(t, id.EventDisconnected)
		p.cliCh.want(t, id.EventDisconnected)
		// The region named by the right key is untouched.
		if !soft.PDHasSTag(p.srv.qp, tm.RKey()) {
			t.Fatal("a wrong key invalidated the region")
		}
	})
}
