package reactor

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// TestPokeOfGoneRegistration pokes a registration after it went (a
// migrate notice that a source copied before the registration's hook was
// stopped arrives late): the poke reads nothing, and the event queued on
// the channel stays there, for GetEvent or another reactor.
func TestPokeOfGoneRegistration(t *testing.T) {
	for _, how := range []string{"unregister", "reactor close", "channel close"} {
		t.Run(how, func(t *testing.T) {
			f := fakefab.New("fake", false)
			ch, err := channel.New(channel.WithFabric(f))
			if err != nil {
				t.Fatal(err)
			}
			r, err := New()
			if err != nil {
				t.Fatal(err)
			}
			var handled atomic.Int32
			h := countHandler{&handled}
			if err := r.Register(ch, h); err != nil {
				t.Fatal(err)
			}
			r.regMu.Lock()
			reg := r.byCh[ch]
			r.regMu.Unlock()
			var cm *id.ID
			if how != "channel close" {
				if cm, err = id.Create(ch, nil, id.PSTCP); err != nil {
					t.Fatal(err)
				}
			}
			switch how {
			case "unregister":
				err = r.Unregister(ch)
			case "reactor close":
				err = r.Close(context.Background())
			case "channel close":
				err = ch.Close()
			}
			if err != nil {
				t.Fatal(err)
			}
			if cm != nil {
				cm.Endpoint().(*fakefab.Endpoint).Inject(id.EventEstablished, 0, nil)
			}
			r.poke(reg)
			// Close runs every task posted before it.
			if err := r.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if n := handled.Load(); n != 0 {
				t.Fatalf("a poke after %s handled %d events", how, n)
			}
			if s := r.Stats(); s.Events != 0 {
				t.Fatalf("a poke after %s took %d events", how, s.Events)
			}
			if cm == nil {
				return
			}
			ev, err := ch.GetEvent()
			if err != nil || ev.Type != id.EventEstablished || ev.ID != cm {
				t.Fatalf("the event queued on the channel: %v, %v", ev, err)
			}
			_ = ev.Ack()
			if err := cm.Destroy(); err != nil {
				t.Fatal(err)
			}
			if err := ch.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// countHandler counts the events it handles.
type countHandler struct{ n *atomic.Int32 }

func (h countHandler) HandleEvent(*id.Event) error { h.n.Add(1); return nil }
