package id_test

import (
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// TestDisconnectWithoutConnection: a disconnect where there is no
// connection to end (a request not yet answered, an attempt that ended)
// reaches the fabric and succeeds with nothing reported, as the kernel's
// rdma_disconnect does on siw and rxe (internal/diffkernel's probes); a
// synchronous id does not wait for a DISCONNECTED that never comes; the
// request can still be answered. Where there is no CM id at all it stays
// EINVAL without reaching the fabric.
func TestDisconnectWithoutConnection(t *testing.T) {
	f := fakefab.New("fake", false)
	ch := newChan(t, f)
	lis := newID(t, ch, id.PSTCP)
	defer lis.Destroy()
	if err := lis.Listen(0); err != nil {
		t.Fatal(err)
	}
	ep(lis).InjectRequest(nil)
	ev := expect(t, ch, id.EventConnectRequest, nil)
	child := ev.ID
	_ = ev.Ack()
	if err := child.Disconnect(); err != nil {
		t.Fatalf("disconnect of an unanswered request: %v", err)
	}
	if st := child.State(); st != id.StateConnectRequest {
		t.Fatalf("state %s after the disconnect, want CONNECT_REQUEST", st)
	}
	if got := ep(child).Calls(); len(got) != 1 || got[0] != "disconnect" {
		t.Fatalf("fabric saw %v, want the disconnect", got)
	}
	if err := child.Reject(nil); err != nil {
		t.Fatalf("reject after the disconnect: %v", err)
	}
	if err := child.Disconnect(); err != nil || child.State() != id.StateFailed {
		t.Fatalf("disconnect once rejected: %v, state %s", err, child.State())
	}
	_ = child.Destroy()

	// No CM id yet: EINVAL, the fabric not asked.
	idle := newID(t, ch, id.PSTCP)
	defer idle.Destroy()
	wantErrno(t, idle.Disconnect(), syscall.EINVAL)
	if got := ep(idle).Calls(); len(got) != 0 {
		t.Fatalf("fabric saw %v", got)
	}

	// A synchronous request's id returns at once.
	slis, err := id.Create(nil, nil, id.PSTCP, id.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	defer slis.Destroy()
	if err := slis.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if err := slis.Listen(0); err != nil {
		t.Fatal(err)
	}
	ep(slis).InjectRequest(nil)
	req, err := slis.GetRequest()
	if err != nil {
		t.Fatal(err)
	}
	var derr error
	if hung, _ := blocks(func() { derr = req.Disconnect() }, time.Second); hung {
		t.Fatal("a synchronous id's disconnect of an unanswered request waits")
	}
	if derr != nil || req.State() != id.StateConnectRequest {
		t.Fatalf("sync disconnect: %v, state %s", derr, req.State())
	}
	_ = req.Destroy()
}
