package soft_test

import (
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// A disconnect where there is no connection to end does nothing and
// succeeds, as the kernel's rdma_disconnect (diff-kernel's probes, siw0 and
// rxe0): on a request not yet answered, which can still be accepted; on a
// rejected request's id. Nothing is reported on either side.
func TestDisconnectWithoutConnection(t *testing.T) {
	f := soft.New(soft.WithName("disconnect-noconn"))
	defer f.Quiesce()
	sch, cch := mkChan(t, f), mkChan(t, f)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	for _, answer := range []string{"accept", "reject"} {
		cli := connectRC(t, cch, l.LocalAddr(), answer)
		ev := await(t, sch, id.EventConnectRequest)
		req := ev.ID
		_ = ev.Ack()
		if err := req.Disconnect(); err != nil {
			t.Fatalf("disconnect of an unanswered request: %v", err)
		}
		if ev, err := nextWithin(sch, 50*time.Millisecond); err == nil {
			t.Fatalf("%s after the disconnect of a request", ev.Type)
		}
		if answer == "accept" {
			if err := req.Accept(nil); err != nil {
				t.Fatalf("accept after the disconnect: %v", err)
			}
			_ = await(t, sch, id.EventEstablished).Ack()
			_ = await(t, cch, id.EventEstablished).Ack()
			_ = req.Destroy()
			_ = await(t, cch, id.EventDisconnected).Ack()
		} else {
			if err := req.Reject(nil); err != nil {
				t.Fatal(err)
			}
			_ = await(t, cch, id.EventRejected).Ack()
			if err := req.Disconnect(); err != nil || req.State() != id.StateFailed {
				t.Fatalf("disconnect of a rejected request's id: %v, state %s", err, req.State())
			}
			if err := cli.Disconnect(); err != nil || cli.State() != id.StateFailed {
				t.Fatalf("disconnect of a rejected id: %v, state %s", err, cli.State())
			}
			if ev, err := nextWithin(sch, 50*time.Millisecond); err == nil {
				t.Fatalf("%s on the server after the disconnects", ev.Type)
			}
			if ev, err := nextWithin(cch, 50*time.Millisecond); err == nil {
				t.Fatalf("%s on the client after the disconnects", ev.Type)
			}
		}
		_ = req.Destroy()
	}
}
