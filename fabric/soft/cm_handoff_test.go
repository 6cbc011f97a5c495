package soft_test

import (
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// The set-up calls that need no loop do not wait for one: each test holds a
// fabric's loop busy and checks that the call returns and its peer
// progresses. Each such trip to the loop was a goroutine hand-off (and a
// wakeup) in every connection's set-up.

// TestAcceptWithoutLoop: Accept writes the MPA Reply on the caller's
// goroutine, so it returns, and the initiator is ESTABLISHED, while the
// responder's loop is busy; the responder's ESTABLISHED (P2P: on the RTR,
// which the loop reads) follows once the loop runs.
func TestAcceptWithoutLoop(t *testing.T) {
	sf, cf := soft.New(soft.WithName("srv-accept")), soft.New(soft.WithName("cli-accept"))
	defer sf.Quiesce()
	defer cf.Quiesce()
	sch, cch := newChannel(t, sf), newChannel(t, cf)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := connectRC(t, cch, l.LocalAddr(), "hold")
	defer cli.Destroy()
	ev := next(t, sch, id.EventConnectRequest)
	child := ev.ID
	defer child.Destroy()
	_ = ev.Ack()

	release := soft.HoldLoop(sf)
	defer release()
	done := make(chan error, 1)
	go func() { done <- child.Accept(nil) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
	case <-time.After(2 * time.Second):
		release()
		<-done
		t.Fatal("accept waited for the responder's loop")
	}
	_ = next(t, cch, id.EventEstablished).Ack()
	release()
	_ = next(t, sch, id.EventEstablished).Ack()
}

// TestConnectRequestWithoutLoop: when TCP is up as connect(2) returns (on
// loopback it is), Connect writes the MPA Request itself, so the responder
// gets its CONNECT_REQUEST while the initiator's loop is busy; the
// initiator's ESTABLISHED (its loop reads the Reply) follows once the
// loop runs.
func TestConnectRequestWithoutLoop(t *testing.T) {
	sf, cf := soft.New(soft.WithName("srv-connect")), soft.New(soft.WithName("cli-connect"))
	defer sf.Quiesce()
	defer cf.Quiesce()
	sch, cch := newChannel(t, sf), newChannel(t, cf)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := mkID(t, cch, nil, id.PSTCP)
	defer cli.Destroy()
	resolve(t, cch, cli, l.LocalAddr())

	release := soft.HoldLoop(cf)
	defer release()
	if err := cli.Connect(&id.ConnParam{PrivateData: []byte("early")}); err != nil {
		t.Fatal(err)
	}
	ev, err := nextWithin(sch, 2*time.Second)
	if err != nil {
		t.Fatalf("no CONNECT_REQUEST while the initiator's loop is busy: %v", err)
	}
	if ev.Type != id.EventConnectRequest || string(ev.Conn.PrivateData) != "early" {
		_ = ev.Ack()
		t.Fatalf("got %s with %q", ev.Type, ev.Conn.PrivateData)
	}
	child := ev.ID
	defer child.Destroy()
	_ = ev.Ack()
	if err := child.Accept(nil); err != nil {
		t.Fatal(err)
	}
	release()
	_ = next(t, cch, id.EventEstablished).Ack()
	_ = next(t, sch, id.EventEstablished).Ack()
}

// TestDisconnectWithoutLoop: Disconnect of an established connection
// sends the FIN itself, so the peer reports DISCONNECTED while the
// disconnecting side's loop is busy.
func TestDisconnectWithoutLoop(t *testing.T) {
	sf, cf := soft.New(soft.WithName("srv-disc")), soft.New(soft.WithName("cli-disc"))
	defer sf.Quiesce()
	defer cf.Quiesce()
	sch, cch := newChannel(t, sf), newChannel(t, cf)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := connectRC(t, cch, l.LocalAddr(), "fin")
	defer cli.Destroy()
	ev := next(t, sch, id.EventConnectRequest)
	child := ev.ID
	defer child.Destroy()
	_ = ev.Ack()
	if err := child.Accept(nil); err != nil {
		t.Fatal(err)
	}
	_ = next(t, cch, id.EventEstablished).Ack()
	_ = next(t, sch, id.EventEstablished).Ack()

	release := soft.HoldLoop(cf)
	defer release()
	if err := cli.Disconnect(); err != nil {
		t.Fatal(err)
	}
	_ = next(t, cch, id.EventDisconnected).Ack()
	ev, err := nextWithin(sch, 2*time.Second)
	if err != nil {
		t.Fatalf("no DISCONNECTED at the peer while the disconnecting side's loop is busy: %v", err)
	}
	if ev.Type != id.EventDisconnected || ev.ID != child {
		_ = ev.Ack()
		t.Fatalf("got %s", ev.Type)
	}
	_ = ev.Ack()
	release()
}
