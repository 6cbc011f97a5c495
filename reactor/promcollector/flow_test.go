package promcollector_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/reactor"
)

// flow is the scripted flow the collector is checked against, on the
// software fabric over loopback, every id recording into one journal. Its
// phases run one after the other, each waiting for its last event:
//
//   - connect: two clients connect, one at a time, and are accepted;
//   - reject: a third client is rejected (its server id destroyed in the
//     handler);
//   - disconnect: the two connected clients disconnect, one at a time;
//     the server destroys its ids on DISCONNECTED;
//   - overload: four clients connect while the server's only worker is
//     held in the handler of the first CONNECT_REQUEST; the fourth request
//     fills MaxPending (4), and the server's reactor pauses reading, once;
//     then all four are rejected.
//
// Before the overload no more than two events of the server are ever
// pending, so it pauses only there. runFlow returns once every event has
// been handled, with the listener and the seven clients still there
// (destroy destroys them).
type flow struct {
	j              *journal.Journal
	server, client *reactor.Reactor
	sch, cch       *channel.Channel
	listener       *id.ID
	clients        []*id.ID

	mu   sync.Mutex
	seen map[string]int // "server ESTABLISHED", ...
	errs []error
}

func (f *flow) note(side string, ev *id.Event) {
	f.mu.Lock()
	f.seen[side+" "+ev.Type.String()]++
	f.mu.Unlock()
}

func (f *flow) count(what string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seen[what]
}

func (f *flow) fail(err error) {
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// runFlow runs the flow; register is called with the two reactors once
// they exist, before any event.
func runFlow(t *testing.T, j *journal.Journal, register func(server, client *reactor.Reactor)) *flow {
	t.Helper()
	f := &flow{j: j, seen: make(map[string]int)}
	var err error
	if f.sch, err = channel.New(); err != nil {
		t.Fatal(err)
	}
	if f.cch, err = channel.New(); err != nil {
		t.Fatal(err)
	}
	onErr := reactor.WithErrorHandler(func(err error) {
		if !errors.Is(err, reactor.ErrOverload) {
			f.fail(err)
		}
	})
	if f.server, err = reactor.New(reactor.WithWorkers(1), reactor.WithMaxPending(4), onErr); err != nil {
		t.Fatal(err)
	}
	if f.client, err = reactor.New(onErr); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, r := range []*reactor.Reactor{f.server, f.client} {
			if err := r.Close(context.Background()); err != nil {
				t.Error(err)
			}
		}
		_ = f.sch.Close()
		_ = f.cch.Close()
	})
	register(f.server, f.client)

	release := make(chan struct{})
	srv := handlers.New().
		OnConnectRequest(func(ev *id.Event) error {
			f.note("server", ev)
			switch string(ev.PrivateData()) {
			case "hello":
				return ev.ID.Accept(nil)
			case "hold":
				select {
				case <-release:
				case <-time.After(15 * time.Second):
					return errors.New("never released")
				}
			}
			if err := ev.ID.Reject(nil); err != nil {
				return err
			}
			return ev.ID.Destroy()
		}).
		OnEstablished(func(ev *id.Event) error { f.note("server", ev); return nil }).
		OnDisconnected(func(ev *id.Event) error { f.note("server", ev); return ev.ID.Destroy() }).
		DefaultFunc(func(ev *id.Event) error { f.note("server", ev); return fmt.Errorf("server: unexpected %s", ev.Type) })
	cli := handlers.New().
		OnAddrResolved(func(ev *id.Event) error { f.note("client", ev); return ev.ID.ResolveRoute(2 * time.Second) }).
		OnRouteResolved(func(ev *id.Event) error {
			f.note("client", ev)
			return ev.ID.Connect(&id.ConnParam{PrivateData: []byte(ev.ID.Context().(string))})
		}).
		OnEstablished(func(ev *id.Event) error { f.note("client", ev); return nil }).
		OnRejected(func(ev *id.Event) error { f.note("client", ev); return nil }).
		OnDisconnected(func(ev *id.Event) error { f.note("client", ev); return nil }).
		DefaultFunc(func(ev *id.Event) error { f.note("client", ev); return fmt.Errorf("client: unexpected %s", ev.Type) })
	if err := f.server.Register(f.sch, srv); err != nil {
		t.Fatal(err)
	}
	if err := f.client.Register(f.cch, cli); err != nil {
		t.Fatal(err)
	}
	if f.listener, err = id.Create(f.sch, nil, id.PSTCP, id.WithJournal(j)); err != nil {
		t.Fatal(err)
	}
	if err := f.listener.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	if err := f.listener.Listen(0); err != nil {
		t.Fatal(err)
	}
	dial := func(pd string) *id.ID {
		c, err := id.Create(f.cch, pd, id.PSTCP, id.WithJournal(j))
		if err != nil {
			t.Fatal(err)
		}
		f.clients = append(f.clients, c)
		if err := c.ResolveAddr(netip.AddrPort{}, f.listener.LocalAddr(), 2*time.Second); err != nil {
			t.Fatal(err)
		}
		return c
	}

	// Connect.
	for k := 1; k <= 2; k++ {
		dial("hello")
		waitFor(t, "a connection", func() bool {
			return f.count("client RDMA_CM_EVENT_ESTABLISHED") == k && f.count("server RDMA_CM_EVENT_ESTABLISHED") == k
		})
	}
	// Reject.
	dial("reject")
	waitFor(t, "the reject", func() bool { return f.count("client RDMA_CM_EVENT_REJECTED") == 1 })
	// Disconnect.
	for k, c := range f.clients[:2] {
		if err := c.Disconnect(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "a disconnect", func() bool {
			return f.count("client RDMA_CM_EVENT_DISCONNECTED") == k+1 && f.count("server RDMA_CM_EVENT_DISCONNECTED") == k+1
		})
	}
	// Overload.
	dial("hold")
	for k := 0; k < 3; k++ {
		dial("reject")
	}
	waitFor(t, "the server's overload", func() bool { return f.server.Stats().Overloads == 1 })
	close(release)
	waitFor(t, "the rejects", func() bool {
		return f.count("client RDMA_CM_EVENT_REJECTED") == 5 && f.server.Stats().Pending == 0 && f.client.Stats().Pending == 0
	})
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, err := range f.errs {
		t.Error(err)
	}
	return f
}

// destroy destroys the listener and the clients.
func (f *flow) destroy(t *testing.T) {
	t.Helper()
	for _, c := range append([]*id.ID{f.listener}, f.clients...) {
		if err := c.Destroy(); err != nil {
			t.Error(err)
		}
	}
}
