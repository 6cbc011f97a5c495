package soft_test

import (
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
)

// TestTraffic checks the fabric's counters over one RC connection: two
// ESTABLISHED (one per side), then one Send of 100 bytes counted once as
// sent and once as received, with its two completions, and as many bytes
// read as written (the payload and its framing). No test of the package
// runs in parallel, so the deltas are this test's. The initiator asks for
// no P2P mode: a P2P initiator repeats its RTR (a zero-length Write, a
// message) while the responder stays silent, and a repeat sent before the
// ESTABLISHED snapshot could be read after it (Received 2, seen in make
// test at load 7).
func TestTraffic(t *testing.T) {
	before := soft.Traffic()
	f := soft.New()
	p := newPair(t, pairOpts{srvFab: f, cliFab: soft.New(soft.WithP2P(0))})
	p.disconnect = true
	defer p.close()
	established := soft.Traffic()
	if n := established.Connections - before.Connections; n != 2 {
		t.Errorf("%d connections counted, want 2", n)
	}
	const n = 100
	rbuf := make([]byte, n)
	rmr := reg(t, p.srv, rbuf, fabric.AccessLocalWrite)
	if err := p.srv.qp.PostRecv(&fabric.RecvWR{WRID: 1, Buf: rbuf, MR: rmr}); err != nil {
		t.Fatal(err)
	}
	msg := pattern(n, 1)
	smr := reg(t, p.cli, msg, 0)
	if err := p.cli.qp.PostSend(&fabric.SendWR{WRID: 2, Opcode: fabric.WRSend, Flags: fabric.SendSignaled, Buf: msg, MR: smr}); err != nil {
		t.Fatal(err)
	}
	wantWC(t, comp(t, p.cli.qp.SendCQ()), fabric.WCSuccess, fabric.WCSend)
	wantWC(t, comp(t, p.srv.qp.RecvCQ()), fabric.WCSuccess, fabric.WCRecv)
	after := soft.Traffic()
	d := soft.Counters{
		Connections:      after.Connections - established.Connections,
		SentBytes:        after.SentBytes - established.SentBytes,
		ReceivedBytes:    after.ReceivedBytes - established.ReceivedBytes,
		SentMessages:     after.SentMessages - established.SentMessages,
		ReceivedMessages: after.ReceivedMessages - established.ReceivedMessages,
		Completions:      after.Completions - established.Completions,
	}
	if d.Connections != 0 || d.SentMessages != 1 || d.ReceivedMessages != 1 || d.Completions != 2 ||
		d.SentBytes < n || d.SentBytes != d.ReceivedBytes {
		t.Errorf("one Send of %d bytes counted as %+v", n, d)
	}
	_ = p.cli.qp.DeregMR(smr)
	_ = p.srv.qp.DeregMR(rmr)
}
