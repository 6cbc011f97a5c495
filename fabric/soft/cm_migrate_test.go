package soft_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/cmrt/cmrt/id"
)

// TestMigrateMovesMulticastEvents: a join's queued MULTICAST_JOIN (which
// carries the join's uid, not the id's) moves with the id.
func TestMigrateMovesMulticastEvents(t *testing.T) {
	ch1, ch2 := newChannel(t, nil), newChannel(t, nil)
	cm := mkID(t, ch1, nil, id.PSUDP)
	defer cm.Destroy()
	if err := cm.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	group := netip.MustParseAddr("239.77.1.2")
	if err := cm.JoinMulticast(group, "ctx"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // let the join's event be queued on ch1
	if err := cm.Migrate(ch2); err != nil {
		t.Fatal(err)
	}
	ev, err := ch2.GetEventContext(timeoutCtx(t, 2*time.Second))
	if err != nil {
		t.Fatalf("no multicast event on the new channel: %v", err)
	}
	if ev.Type != id.EventMulticastJoin && ev.Type != id.EventMulticastError {
		t.Fatalf("got %s", ev.Type)
	}
	if ev.JoinContext != "ctx" {
		t.Fatalf("join context %v", ev.JoinContext)
	}
	_ = ev.Ack()
	ch1.SetNonblocking(true)
	if ev, err := ch1.GetEvent(); err == nil {
		t.Fatalf("old channel kept %s", ev.Type)
	}
	_ = cm.LeaveMulticast(group)
}

// TestMigrateEstablishedID: after migrating an established id, the peer's
// disconnect is reported on the new channel.
func TestMigrateEstablishedID(t *testing.T) {
	sch, cch, other := newChannel(t, nil), newChannel(t, nil), newChannel(t, nil)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := mkID(t, cch, nil, id.PSTCP)
	resolve(t, cch, cli, l.LocalAddr())
	_ = cli.Connect(nil)
	req := next(t, sch, id.EventConnectRequest)
	child := req.ID
	_ = child.Accept(nil)
	_ = req.Ack()
	_ = next(t, sch, id.EventEstablished).Ack()
	_ = next(t, cch, id.EventEstablished).Ack()
	if err := cli.Migrate(other); err != nil {
		t.Fatal(err)
	}
	_ = child.Disconnect()
	_ = next(t, sch, id.EventDisconnected).Ack()
	ev := next(t, other, id.EventDisconnected)
	if ev.ID != cli {
		t.Fatal("DISCONNECTED for the wrong id")
	}
	_ = ev.Ack()
	cch.SetNonblocking(true)
	if ev, err := cch.GetEvent(); err == nil {
		t.Fatalf("old channel got %s", ev.Type)
	}
	_ = cli.Destroy()
	_ = child.Destroy()
}
