package soft_test

import (
	"net/netip"
	"testing"

	"github.com/cmrt/cmrt/id"
)

// A UD listener's backlog counts the requests reported and not yet read, as
// the kernel's ucma (and as the RC listener's): with backlog 1, a request
// read and not yet answered leaves room for the next, which is reported
// (it used to be dropped until the first was answered, and the requester
// timed out: diff-kernel on rxe0).
func TestUDBacklogCountsUnread(t *testing.T) {
	f := udFabric(t)
	sch, cch := newChannel(t, f), newChannel(t, f)
	lis := create(t, sch, id.PSUDP)
	if err := lis.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	if err := lis.Listen(1); err != nil {
		t.Fatal(err)
	}
	var reqs []*id.ID
	for k := 0; k < 2; k++ {
		cli := create(t, cch, id.PSUDP)
		resolve(t, cch, cli, lis.LocalAddr())
		if err := cli.Connect(nil); err != nil {
			t.Fatal(err)
		}
		ev := next(t, sch, id.EventConnectRequest)
		r := ev.ID
		t.Cleanup(func() { destroy(r) })
		reqs = append(reqs, r)
		ack(t, ev)
	}
	for _, r := range reqs {
		if err := r.Accept(nil); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < 2; k++ {
		ack(t, next(t, cch, id.EventEstablished))
	}
}
