package reactor_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
	"github.com/cmrt/cmrt/reactor"
)

// quietChannels opens n channels on a fake fabric whose Migrate, as the
// kernel's MIGRATE_ID, moves queued events without making the new
// channel's descriptor readable.
func quietChannels(t *testing.T, n int) []*channel.Channel {
	t.Helper()
	f := fakefab.New("fake", false)
	f.QuietMigrate = true
	chs := make([]*channel.Channel, n)
	for k := range chs {
		ch, err := channel.New(channel.WithFabric(f))
		if err != nil {
			t.Fatal(err)
		}
		chs[k] = ch
	}
	return chs
}

func fakeSource(ch *channel.Channel) *fakefab.Source { return ch.Source().(*fakefab.Source) }

// TestMigrateQueuedEventsReachReactor migrates ids with events queued
// (an ESTABLISHED; a listener's connection requests, more than a batch)
// onto a channel a reactor serves, from a channel nobody reads: the
// reactor must hand them to the handler although the channel's
// descriptor never reports them (a hang before the reactor read the
// channel on Migrate's notice).
func TestMigrateQueuedEventsReachReactor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		workers int
	}{{"inline", 0}, {"pool", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			chs := quietChannels(t, 2)
			from, to := chs[0], chs[1]
			r, err := reactor.New(reactor.WithWorkers(tc.workers), reactor.WithBatch(8))
			if err != nil {
				t.Fatal(err)
			}
			const nreq = 20 // more than two batches
			var established, requests atomic.Int32
			var mu sync.Mutex
			var children []*id.ID
			h := handlers.Func(func(ev *id.Event) error {
				switch ev.Type {
				case id.EventEstablished:
					established.Add(1)
				case id.EventConnectRequest:
					requests.Add(1)
					mu.Lock()
					children = append(children, ev.ID)
					mu.Unlock()
					return ev.ID.Reject(nil)
				}
				return nil
			})
			if err := r.Register(to, h); err != nil {
				t.Fatal(err)
			}
			if n := fakeSource(to).MigrateHooks(); n != 1 {
				t.Errorf("reactor installed %d migrate hooks, want 1", n)
			}
			conn, err := id.Create(from, nil, id.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			lis, err := id.Create(from, nil, id.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			if err := lis.Listen(0); err != nil {
				t.Fatal(err)
			}
			ep(conn).Inject(id.EventEstablished, 0, nil)
			for k := 0; k < nreq; k++ {
				ep(lis).InjectRequest(nil)
			}
			if err := conn.Migrate(to); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the migrated ESTABLISHED", func() bool { return established.Load() == 1 })
			if err := lis.Migrate(to); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the migrated connection requests", func() bool { return requests.Load() == nreq })
			if err := r.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := fakeSource(to).MigrateHooks(); n != 0 {
				t.Fatalf("%d migrate hooks left after Close", n)
			}
			mu.Lock()
			for _, c := range children {
				_ = c.Destroy()
			}
			mu.Unlock()
			for _, cm := range []*id.ID{conn, lis} {
				if err := cm.Destroy(); err != nil {
					t.Fatal(err)
				}
			}
			for _, ch := range chs {
				if err := ch.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// TestMigratePokeOfGoneRegistration fires a channel's migrate notices
// while its registration goes (Unregister, the reactor's Close, the
// channel's Close): a notice to a registration that is gone reads
// nothing. An event then migrated to the channel stays queued there, for
// GetEvent.
func TestMigratePokeOfGoneRegistration(t *testing.T) {
	for _, how := range []string{"unregister", "reactor close", "channel close"} {
		t.Run(how, func(t *testing.T) {
			chs := quietChannels(t, 3)
			from, to, spare := chs[0], chs[1], chs[2]
			src := fakeSource(to)
			r, err := reactor.New()
			if err != nil {
				t.Fatal(err)
			}
			var handled atomic.Int32
			h := handlers.Func(func(*id.Event) error { handled.Add(1); return nil })
			if err := r.Register(to, h); err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { // notices racing with the registration's end
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
						src.Migrated()
					}
				}
			}()
			switch how {
			case "unregister":
				err = r.Unregister(to)
			case "reactor close":
				err = r.Close(context.Background())
			case "channel close":
				err = to.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			if n := src.MigrateHooks(); n != 0 {
				t.Fatalf("%d migrate hooks left after %s", n, how)
			}
			if how == "channel close" {
				close(stop)
				wg.Wait()
				// A closed channel takes no id; the reactor goes on.
				cm, err := id.Create(from, nil, id.PSTCP)
				if err != nil {
					t.Fatal(err)
				}
				if err := cm.Migrate(to); !errors.Is(err, syscall.EINVAL) {
					t.Fatalf("Migrate to a closed channel = %v, want EINVAL", err)
				}
				if err := r.Register(spare, h); err != nil {
					t.Fatal(err)
				}
				if err := cm.Migrate(spare); err != nil {
					t.Fatal(err)
				}
				ep(cm).Inject(id.EventUser, 0, nil)
				waitFor(t, "an event on another channel", func() bool { return handled.Load() == 1 })
				if err := r.Close(context.Background()); err != nil {
					t.Fatal(err)
				}
				if err := cm.Destroy(); err != nil {
					t.Fatal(err)
				}
				for _, ch := range []*channel.Channel{from, spare} {
					if err := ch.Close(); err != nil {
						t.Fatal(err)
					}
				}
				return
			}
			cm, err := id.Create(from, nil, id.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			ep(cm).Inject(id.EventEstablished, 0, nil)
			if err := cm.Migrate(to); err != nil {
				t.Fatal(err)
			}
			close(stop)
			wg.Wait()
			// Every notice posted so far has run once Close returns.
			if err := r.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := handled.Load(); n != 0 {
				t.Fatalf("%d events handled from a channel no longer registered", n)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ev, err := to.GetEventContext(ctx)
			if err != nil {
				t.Fatalf("the migrated event is not on the channel: %v", err)
			}
			if ev.Type != id.EventEstablished || ev.ID != cm {
				t.Fatalf("got %v of %v", ev.Type, ev.ID)
			}
			if err := ev.Ack(); err != nil {
				t.Fatal(err)
			}
			if err := cm.Destroy(); err != nil {
				t.Fatal(err)
			}
			for _, ch := range chs {
				if err := ch.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}
