package soft_test

import (
	"context"
	"net/netip"
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
	sch, cch := newChannel(t, f), newChannel(t, f)
	l := cmListen(t, sch, nil)
	defer l.Destroy()
	for _, answer := range []string{"accept", "reject"} {
		cli := connectRC(t, cch, l.LocalAddr(), answer)
		ev := next(t, sch, id.EventConnectRequest)
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
			_ = next(t, sch, id.EventEstablished).Ack()
			_ = next(t, cch, id.EventEstablished).Ack()
			_ = req.Destroy()
			_ = next(t, cch, id.EventDisconnected).Ack()
		} else {
			if err := req.Reject(nil); err != nil {
				t.Fatal(err)
			}
			_ = next(t, cch, id.EventRejected).Ack()
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

// TestUDDisconnectSynchronous: a UD id has no connection to end, so
// rdma_disconnect on an established UD id (the kernel's on rxe0: 0, nothing
// reported) leaves nothing to wait for: a synchronous UD id's Disconnect,
// active or passive, returns 0 at once and the id stays ESTABLISHED.
func TestUDDisconnectSynchronous(t *testing.T) {
	f := udFabric(t)
	sch := newChannel(t, f)
	lis := listenUD(t, sch, id.PSUDP, netip.AddrPortFrom(lo4, 0))
	defer destroy(lis)
	slis, err := id.Create(nil, nil, id.PSUDP, id.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	defer destroy(slis)
	if err := slis.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	if err := slis.Listen(0); err != nil {
		t.Fatal(err)
	}

	// Active: a synchronous client of the channel's listener.
	cli, err := id.Create(nil, nil, id.PSUDP, id.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	defer destroy(cli)
	if err := cli.ResolveAddr(netip.AddrPort{}, lis.LocalAddr(), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := cli.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	connected := make(chan error, 1)
	go func() { connected <- cli.Connect(nil) }()
	ev := next(t, sch, id.EventConnectRequest)
	srv := ev.ID
	defer destroy(srv)
	ack(t, ev)
	if err := srv.Accept(nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-connected:
		if err != nil {
			t.Fatalf("connect: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("synchronous UD connect not answered")
	}

	// Passive: a synchronous listener's request, accepted.
	cch := newChannel(t, f)
	acli := create(t, cch, id.PSUDP)
	defer destroy(acli)
	resolve(t, cch, acli, slis.LocalAddr())
	if err := acli.Connect(nil); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := slis.GetRequestContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer destroy(req)
	if err := req.Accept(nil); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name string
		i    *id.ID
	}{{"active", cli}, {"passive", req}} {
		if st := c.i.State(); st != id.StateEstablished {
			t.Fatalf("%s: state %s before the disconnect", c.name, st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.i.DisconnectContext(ctx)
		cancel()
		if err != nil {
			t.Errorf("%s: synchronous UD disconnect: %v, want 0 at once", c.name, err)
		}
		if st := c.i.State(); st != id.StateEstablished {
			t.Errorf("%s: state %s after the disconnect, want ESTABLISHED", c.name, st)
		}
	}
	quiet(t, sch, 50*time.Millisecond)
}
