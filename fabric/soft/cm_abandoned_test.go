package soft_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// A request whose initiator gave up (its id destroyed, the connection
// closed) can be neither accepted nor rejected: both fail with ECONNRESET,
// as siw_accept and siw_reject answer for an endpoint no longer holding an
// MPA request, and the id stays in CONNECT_REQUEST (diff-kernel on siw0:
// the reject said 0 here). The kernel on IB says EINVAL (the equivalence
// ib-abandoned-request).
func TestAbandonedRequest(t *testing.T) {
	f := soft.New(soft.WithName("abandoned"))
	defer f.Quiesce()
	sch, cch := newChannel(t, f), newChannel(t, f)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	cli := connectRC(t, cch, l.LocalAddr(), "bye")
	ev := next(t, sch, id.EventConnectRequest)
	req := ev.ID
	_ = ev.Ack()
	defer req.Destroy()
	if err := cli.Destroy(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for soft.RequestPending(req.Endpoint()) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if soft.RequestPending(req.Endpoint()) {
		t.Fatal("the request still waits 5s after its initiator's destroy")
	}
	for _, c := range []struct {
		name string
		fn   func() error
	}{{"reject", func() error { return req.Reject(nil) }}, {"accept", func() error { return req.Accept(nil) }}} {
		if err := c.fn(); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s of an abandoned request: %v, want ECONNRESET", c.name, err)
		}
		if st := req.State(); st != id.StateConnectRequest {
			t.Errorf("after the %s: state %s, want CONNECT_REQUEST", c.name, st)
		}
	}
}
