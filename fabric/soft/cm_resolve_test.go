package soft_test

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestResolveKeepsSpecificBoundAddress: an id bound to 127.0.0.1 keeps that
// source when it resolves an address the route would reach from another.
func TestResolveKeepsSpecificBoundAddress(t *testing.T) {
	devs, _ := soft.Default().Devices()
	var other netip.Addr
	for _, d := range devs {
		for _, a := range d.Addrs {
			if a.Is4() && !a.IsLoopback() {
				other = a
			}
		}
	}
	if !other.IsValid() {
		t.Skip("no IPv4 address besides loopback")
	}
	ch := mkChan(t, nil)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	if err := cm.Bind(netip.AddrPortFrom(loopback, 0)); err != nil {
		t.Fatal(err)
	}
	bound := cm.LocalAddr()
	if err := cm.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(other, 7471), time.Second); err != nil {
		t.Fatal(err)
	}
	_ = await(t, ch, id.EventAddrResolved).Ack()
	if cm.LocalAddr() != bound {
		t.Fatalf("local address moved from %s to %s", bound, cm.LocalAddr())
	}
}

// TestMigrateMovesMulticastEvents: a join's queued MULTICAST_JOIN (which
// carries the join's uid, not the id's) moves with the id.
func TestMigrateMovesMulticastEvents(t *testing.T) {
	ch1, ch2 := mkChan(t, nil), mkChan(t, nil)
	cm := mkID(t, ch1, nil, id.PSUDP)
	defer cm.Destroy()
	if err := cm.Bind(netip.AddrPortFrom(loopback, 0)); err != nil {
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

// TestSelfConnectIsRefused: an id bound to the very address and port it
// connects to makes TCP connect to itself (simultaneous open); with no
// listener that is REJECTED -ECONNREFUSED, not a protocol error.
func TestSelfConnectIsRefused(t *testing.T) {
	ch := mkChan(t, nil)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	if err := cm.Bind(netip.AddrPortFrom(loopback, 0)); err != nil {
		t.Fatal(err)
	}
	self := cm.LocalAddr()
	routeTo(t, ch, cm, self)
	if err := cm.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ev := await(t, ch, id.EventRejected)
	if ev.Status != -int(syscall.ECONNREFUSED) {
		t.Fatalf("status %d, want -ECONNREFUSED", ev.Status)
	}
	_ = ev.Ack()
}
