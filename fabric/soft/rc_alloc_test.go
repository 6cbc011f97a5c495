package soft_test

import (
	"testing"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestIDPostDoesNotAllocate: posting through the librdmacm-shaped methods
// on the id (rdma_post_recv, rdma_post_send) allocates nothing per call.
func TestIDPostDoesNotAllocate(t *testing.T) {
	p := newPair(t, pairOpts{})
	defer p.close()
	p.disconnect = true
	cbuf, sbuf := make([]byte, 64), make([]byte, 64)
	cm, err := p.cli.id.RegMsgs(cbuf)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := p.srv.id.RegMsgs(sbuf)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	allocs := testing.AllocsPerRun(200, func() {
		if err := p.srv.id.PostRecv(1, sbuf, sm); err != nil {
			t.Fatal(err)
		}
		if err := p.cli.id.PostSend(2, cbuf, cm, id.SendSignaled); err != nil {
			t.Fatal(err)
		}
		if wc, err := p.srv.id.GetRecvComp(ctx); err != nil || wc.Status != id.WCSuccess {
			t.Fatalf("recv %+v %v", wc, err)
		}
		if wc, err := p.cli.id.GetSendComp(ctx); err != nil || wc.Status != id.WCSuccess {
			t.Fatalf("send %+v %v", wc, err)
		}
	})
	if allocs > 0 && !soft.RaceEnabled {
		t.Fatalf("%.1f allocations per post/complete round", allocs)
	}
	_ = p.cli.id.Disconnect()
	p.cliCh.want(t, id.EventDisconnected)
	p.srvCh.want(t, id.EventDisconnected)
	p.disconnect = false
}
