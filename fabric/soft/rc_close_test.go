package soft_test

import (
	"context"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestRCCloseLeavesEpollSet: a connection's socket leaves its loop's epoll
// set as it is closed. One never duplicated is only forgotten by the loop
// (no EPOLL_CTL_DEL: the kernel drops the item with the socket's last
// descriptor); one whose direct reader duplicated it (rc_rxwait.go) is
// taken out explicitly, since the duplicate, still open in a parked
// waiter as the socket closes, would keep the item in the set.
func TestRCCloseLeavesEpollSet(t *testing.T) {
	for _, tc := range []struct {
		name   string
		dup    bool // a direct reader made a duplicate
		parked bool // and its waiter is parked as the connection closes
	}{
		{"never-duplicated", false, false},
		{"duplicate-released", true, false},
		{"duplicate-parked", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, pairOpts{})
			var errc <-chan error
			stop := func() {}
			if tc.dup {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				stop = cancel
				errc = parkedOn(t, ctx, p.cli.qp, p.cli.qp.RecvCQ())
				if !tc.parked {
					// Flush the wait out: destroying the QP ends it.
					if err := p.cli.id.DestroyQP(); err != nil {
						t.Fatal(err)
					}
					if err := waitReturn(t, errc); err == nil {
						t.Fatal("wait returned no error")
					}
					waitFor(t, func() bool { return !soft.DirectWaiting(p.cli.qp) })
					errc = nil
				}
			}
			inSet, err := soft.CloseConnInEpoll(p.cli.id.Endpoint())
			if err != nil {
				t.Fatal(err)
			}
			if inSet {
				t.Fatal("the closed socket is still in an epoll set")
			}
			if errc != nil {
				// The waiter, kicked by the close, waits on for a completion
				// the loop's way: end it.
				stop()
				_ = waitReturn(t, errc)
			}
			p.srvCh.want(t, id.EventDisconnected)
			p.close()
		})
	}
}
