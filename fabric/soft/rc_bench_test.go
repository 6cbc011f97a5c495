package soft_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

var benchSizes = []int{64, 4 << 10, 1 << 20}

// waitWC waits for one completion without allocating.
func waitWC(cq id.CQ, wc []id.WC) id.WC { return waitWCCtx(context.Background(), cq, wc) }

// waitWCCtx is waitWC with ctx for the waits.
func waitWCCtx(ctx context.Context, cq id.CQ, wc []id.WC) id.WC {
	for cq.Poll(wc[:1]) == 0 {
		_ = cq.Wait(ctx)
	}
	return wc[0]
}

// BenchmarkRCPingPong measures round trips of a Send and its echo over
// loopback, through the QP interface (work requests reused).
func BenchmarkRCPingPong(b *testing.B) { benchRCPingPong(b, benchSizes, context.Background()) }

// BenchmarkRCPingPongCancelCtx is BenchmarkRCPingPong at 64 B with both
// ends waiting with a cancelable context, as a server's request-scoped
// waits do (a direct wait registers the kick on its end once, not per
// wait: BENCHMARKS.md, finding 36).
func BenchmarkRCPingPongCancelCtx(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	benchRCPingPong(b, benchSizes[:1], ctx)
}

func benchRCPingPong(b *testing.B, sizes []int, ctx context.Context) {
	for _, n := range sizes {
		b.Run(sizeName(n), func(b *testing.B) {
			p := newPair(b, pairOpts{})
			defer p.close()
			p.disconnect = true
			cbuf, sbuf := make([]byte, n), make([]byte, n)
			cm, sm := reg(b, p.cli, cbuf, id.AccessLocalWrite), reg(b, p.srv, sbuf, id.AccessLocalWrite)
			crecv, srecv := &id.RecvWR{Buf: cbuf, MR: cm}, &id.RecvWR{Buf: sbuf, MR: sm}
			csend := &id.SendWR{Opcode: id.WRSend, Buf: cbuf, MR: cm}
			ssend := &id.SendWR{Opcode: id.WRSend, Buf: sbuf, MR: sm}
			_ = p.srv.qp.PostRecv(srecv)
			done := make(chan struct{})
			go func() { // echo
				defer close(done)
				var wc [1]id.WC
				for {
					if w := waitWCCtx(ctx, p.srv.qp.RecvCQ(), wc[:]); w.Status != id.WCSuccess {
						return
					}
					_ = p.srv.qp.PostRecv(srecv)
					_ = p.srv.qp.PostSend(ssend)
				}
			}()
			var wc [1]id.WC
			b.SetBytes(int64(2 * n))
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				_ = p.cli.qp.PostRecv(crecv)
				_ = p.cli.qp.PostSend(csend)
				if w := waitWCCtx(ctx, p.cli.qp.RecvCQ(), wc[:]); w.Status != id.WCSuccess {
					b.Fatalf("%+v", w)
				}
			}
			b.StopTimer()
			_ = p.cli.id.Disconnect()
			p.cliCh.want(b, id.EventDisconnected)
			p.srvCh.want(b, id.EventDisconnected)
			p.disconnect = false
			<-done
		})
	}
}

// BenchmarkRCStream measures one-way Send throughput: the client keeps
// two batches in flight and the server returns credit for each batch with
// a zero-length Send once it has reposted the receives.
func BenchmarkRCStream(b *testing.B) {
	const batch = 128
	for _, n := range benchSizes {
		b.Run(sizeName(n), func(b *testing.B) {
			attr := id.QPInitAttr{Cap: id.QPCap{MaxSendWR: 2 * batch, MaxRecvWR: 2 * batch}}
			p := newPair(b, pairOpts{attr: attr})
			defer p.close()
			p.disconnect = true
			sbuf := make([]byte, n)
			cm := reg(b, p.cli, sbuf, 0)
			rbufs := make([]byte, 2*batch*n)
			sm := reg(b, p.srv, rbufs, id.AccessLocalWrite)
			recvs := make([]id.RecvWR, 2*batch)
			for k := range recvs {
				recvs[k] = id.RecvWR{WRID: uint64(k), Buf: rbufs[k*n : (k+1)*n], MR: sm}
				_ = p.srv.qp.PostRecv(&recvs[k])
			}
			credit := &id.SendWR{Opcode: id.WRSend}
			creditRecv := &id.RecvWR{}
			send := &id.SendWR{Opcode: id.WRSend, Buf: sbuf, MR: cm}
			total := (b.N + batch - 1) / batch * batch
			done := make(chan struct{})
			go func() {
				defer close(done)
				var wc [1]id.WC
				for got := 0; got < total; {
					w := waitWC(p.srv.qp.RecvCQ(), wc[:])
					if w.Status != id.WCSuccess {
						return
					}
					_ = p.srv.qp.PostRecv(&recvs[w.WRID])
					if got++; got%batch == 0 {
						_ = p.srv.qp.PostSend(credit)
					}
				}
			}()
			for k := 0; k < 2; k++ {
				_ = p.cli.qp.PostRecv(creditRecv)
			}
			var wc [1]id.WC
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for sent := 0; sent < total; sent += batch {
				if sent >= 2*batch {
					if w := waitWC(p.cli.qp.RecvCQ(), wc[:]); w.Status != id.WCSuccess {
						b.Fatalf("%+v", w)
					}
					_ = p.cli.qp.PostRecv(creditRecv)
				}
				// At most two batches are unreceived, so unwritten: the
				// send queue (two batches deep) never fills.
				for k := 0; k < batch; k++ {
					if err := p.cli.qp.PostSend(send); err != nil {
						b.Fatal(err)
					}
				}
			}
			<-done
			b.StopTimer()
		})
	}
}

// BenchmarkRCCreateQP measures CreateQP and DestroyQP of a QP of the
// default depth on a route-resolved id (cmtime's create qp step).
func BenchmarkRCCreateQP(b *testing.B) {
	f := soft.New()
	ch := newRCChan(b, f)
	cid, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		b.Fatal(err)
	}
	if err := cid.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort("127.0.0.1:9"), time.Second); err != nil {
		b.Fatal(err)
	}
	ch.want(b, id.EventAddrResolved)
	if err := cid.ResolveRoute(time.Second); err != nil {
		b.Fatal(err)
	}
	ch.want(b, id.EventRouteResolved)
	b.ReportAllocs()
	for b.Loop() {
		if err := cid.CreateQP(&id.QPInitAttr{}); err != nil {
			b.Fatal(err)
		}
		if err := cid.DestroyQP(); err != nil {
			b.Fatal(err)
		}
	}
	_ = cid.Destroy()
	_ = ch.src.Close()
	quiesceFabs(b, f)
}
