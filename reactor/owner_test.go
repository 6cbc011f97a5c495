package reactor_test

import (
	"context"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
	"github.com/cmrt/cmrt/reactor"
)

// fdCount counts the process's open descriptors.
func fdCount(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func newReactor(t testing.TB, opts ...reactor.Option) *reactor.Reactor {
	t.Helper()
	r, err := reactor.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.Close(context.Background()); err != nil {
			t.Errorf("reactor close: %v", err)
		}
	})
	return r
}

func newChannel(t testing.TB, f fabric.Fabric) *channel.Channel {
	t.Helper()
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

// channelWithFd opens channels on f until one gets descriptor number fd
// (the lowest free one, normally the first), closing the others.
func channelWithFd(t testing.TB, f fabric.Fabric, fd int) *channel.Channel {
	t.Helper()
	var spare []*channel.Channel
	defer func() {
		for _, c := range spare {
			_ = c.Close()
		}
	}()
	for range 20 {
		c := newChannel(t, f)
		if c.Fd() == fd {
			return c
		}
		spare = append(spare, c)
	}
	t.Fatalf("no new channel got descriptor %d", fd)
	return nil
}

// TestChannelFdReuse (issue 18 item 4): channel a is registered and closed,
// channel b gets a's descriptor number and is registered, and a is then
// unregistered. b's events must still be handled: the reactor used to
// delete descriptor number a from epoll, which was b's by then.
func TestChannelFdReuse(t *testing.T) {
	for _, workers := range []int{0, 2} {
		f := fakefab.New("fake", false)
		r := newReactor(t, reactor.WithWorkers(workers))
		var got atomic.Int32
		h := handlers.Func(func(*id.Event) error { got.Add(1); return nil })
		a := newChannel(t, f)
		if err := r.Register(a, h); err != nil {
			t.Fatal(err)
		}
		fdA := a.Fd()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		b := channelWithFd(t, f, fdA)
		if err := r.Register(b, h); err != nil {
			t.Fatal(err)
		}
		if err := r.Unregister(a); err != nil {
			t.Fatalf("workers=%d: Unregister of the closed channel = %v, want nil", workers, err)
		}
		cm, err := id.Create(b, nil, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		ep(cm).Inject(id.EventUser, 0, nil)
		deadline := time.Now().Add(2 * time.Second)
		for got.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got.Load() != 1 {
			t.Errorf("workers=%d: channel b's event not handled after unregistering closed channel a (same descriptor %d)", workers, fdA)
		}
		if s := r.Stats(); s.Channels != 1 {
			t.Errorf("workers=%d: %d registrations, want 1 (b)", workers, s.Channels)
		}
		if err := r.Unregister(b); err != nil {
			t.Fatal(err)
		}
		_ = cm.Destroy()
		_ = b.Close()
	}
}

// TestCQFdReuse (issue 18 item 4): the same with completion queues. Queue
// a is registered and its descriptor closed behind the reactor's back (a
// queue of another provider, say), queue b gets the number and is
// registered, a is unregistered: b's completions must still be handled.
func TestCQFdReuse(t *testing.T) {
	for _, workers := range []int{0, 2} {
		r := newReactor(t, reactor.WithWorkers(workers))
		var got atomic.Int32
		h := reactor.CompletionFunc(func(*id.WC) error { got.Add(1); return nil })
		a := newFakeCQ(t)
		if err := r.RegisterCQ(a, h); err != nil {
			t.Fatal(err)
		}
		fdA := a.Fd()
		_ = a.efd.Close()
		var b *fakeCQ
		for range 20 {
			if c := newFakeCQ(t); c.Fd() == fdA {
				b = c
				break
			}
		}
		if b == nil {
			t.Fatalf("no new queue got descriptor %d", fdA)
		}
		if err := r.RegisterCQ(b, h); err != nil {
			t.Fatal(err)
		}
		if err := r.UnregisterCQ(a); err != nil {
			t.Fatal(err)
		}
		b.push(id.WC{WRID: 1})
		deadline := time.Now().Add(2 * time.Second)
		for got.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got.Load() != 1 {
			t.Errorf("workers=%d: queue b's completion not handled after unregistering queue a (same descriptor %d)", workers, fdA)
		}
		_ = r.UnregisterCQ(b)
	}
}

// closedCQ is a fake queue that follows id.CQ's contract on destroy: Fd is
// -1 from then on and the old descriptor is made readable before it is
// closed.
type closedCQ struct {
	*fakeCQ
	gone atomic.Bool
}

func (c *closedCQ) Fd() int {
	if c.gone.Load() {
		return -1
	}
	return c.fakeCQ.Fd()
}

func (c *closedCQ) destroy() {
	c.gone.Store(true)
	_ = c.efd.Add(1)
	_ = c.efd.Close()
}

// otherChannel is a channel that does not say when it closes (no OnClose):
// the reactor learns it from its source, whose descriptor turns readable.
type otherChannel struct{ c *channel.Channel }

func (o otherChannel) Source() fabric.EventSource { return o.c.Source() }
func (o otherChannel) Fd() int                    { return o.c.Fd() }

// TestClosedOwnersLoseTheirRegistration (issue 16 bug 2, issue 18 item 4):
// closing a registered channel, or destroying a registered queue, drops
// its registration and the reactor's descriptor for it, without
// Unregister; Unregister afterwards returns nil.
func TestClosedOwnersLoseTheirRegistration(t *testing.T) {
	for _, workers := range []int{0, 2} {
		f := fakefab.New("fake", false)
		r := newReactor(t, reactor.WithWorkers(workers))
		base := fdCount(t)
		h := handlers.Func(func(*id.Event) error { return nil })

		ch := newChannel(t, f)
		if err := r.Register(ch, h); err != nil {
			t.Fatal(err)
		}
		if err := ch.Close(); err != nil {
			t.Fatal(err)
		}
		if s := r.Stats(); s.Channels != 0 {
			t.Errorf("workers=%d: a closed channel.Channel still registered (%d) after Close returned", workers, s.Channels)
		}
		if err := r.Unregister(ch); err != nil {
			t.Errorf("workers=%d: Unregister of a closed channel = %v", workers, err)
		}

		other := otherChannel{newChannel(t, f)}
		if err := r.Register(other, h); err != nil {
			t.Fatal(err)
		}
		_ = other.c.Close()
		waitFor(t, "closed channel of another type dropped", func() bool { return r.Stats().Channels == 0 })

		cq := &closedCQ{fakeCQ: newFakeCQ(t)}
		if err := r.RegisterCQ(cq, reactor.CompletionFunc(func(*id.WC) error { return nil })); err != nil {
			t.Fatal(err)
		}
		cq.destroy()
		waitFor(t, "destroyed queue dropped", func() bool { return r.Stats().Channels == 0 })
		if err := r.UnregisterCQ(cq); err != nil {
			t.Errorf("workers=%d: UnregisterCQ of a destroyed queue = %v", workers, err)
		}
		waitFor(t, "the reactor's descriptors closed", func() bool { return fdCount(t) <= base })
	}
}

// TestCQRegistrationsGoWithTheirQP (issue 16 bug 2): a server registers
// each connection's completion queues and destroys the id (or its QP) when
// the connection ends, without UnregisterCQ. After 50 connections the
// reactor must hold the listener's channel only (it held 51 and grew
// without bound). Every other connection destroys its QP first and then
// calls UnregisterCQ, the natural order in a DISCONNECTED handler: that
// must return nil and harm no other registration.
func TestCQRegistrationsGoWithTheirQP(t *testing.T) {
	const conns = 50
	for _, workers := range []int{0, 3} {
		f := soft.New(soft.WithIdleGrace(0))
		sch, cch := newChannel(t, f), newChannel(t, f)
		var failed atomic.Value
		fail := func(err error) error {
			if err != nil {
				failed.CompareAndSwap(nil, err)
			}
			return err
		}
		r := newReactor(t, reactor.WithWorkers(workers), reactor.WithErrorHandler(func(err error) { fail(err) }))
		noop := reactor.CompletionFunc(func(*id.WC) error { return nil })
		var n atomic.Int32
		mux := handlers.New().
			OnConnectRequest(func(ev *id.Event) error {
				cm := ev.ID
				if err := cm.CreateQP(nil); err != nil {
					return err
				}
				if err := r.RegisterCQ(cm.QP().RecvCQ(), noop); err != nil {
					return err
				}
				if err := r.RegisterCQ(cm.QP().SendCQ(), noop); err != nil {
					return err
				}
				return cm.Accept(nil)
			}).
			OnDisconnected(func(ev *id.Event) error {
				if n.Add(1)%2 == 0 {
					return ev.ID.Destroy() // with its QP and CQs
				}
				qp := ev.ID.QP()
				if err := ev.ID.DestroyQP(); err != nil {
					return err
				}
				if err := r.UnregisterCQ(qp.RecvCQ()); err != nil {
					return err
				}
				if err := r.UnregisterCQ(qp.SendCQ()); err != nil {
					return err
				}
				return ev.ID.Destroy()
			}).
			DefaultFunc(func(*id.Event) error { return nil })
		if err := r.Register(sch, mux); err != nil {
			t.Fatal(err)
		}
		l, err := id.Create(sch, nil, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
			t.Fatal(err)
		}
		if err := l.Listen(0); err != nil {
			t.Fatal(err)
		}
		dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), l.SrcPort())
		for k := range conns {
			cli, err := id.Create(cch, nil, id.PSTCP)
			if err != nil {
				t.Fatal(err)
			}
			if err := cli.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
				t.Fatal(err)
			}
			take(t, cch, id.EventAddrResolved)
			if err := cli.ResolveRoute(time.Second); err != nil {
				t.Fatal(err)
			}
			take(t, cch, id.EventRouteResolved)
			if err := cli.Connect(nil); err != nil {
				t.Fatal(err)
			}
			take(t, cch, id.EventEstablished)
			if err := cli.Disconnect(); err != nil {
				t.Fatal(err)
			}
			take(t, cch, id.EventDisconnected)
			if err := cli.Destroy(); err != nil {
				t.Fatal(err)
			}
			if k == 0 {
				waitFor(t, "the first connection's end", func() bool { return n.Load() == 1 })
			}
		}
		waitFor(t, "every server-side DISCONNECTED", func() bool { return n.Load() == conns })
		deadline := time.Now().Add(5 * time.Second)
		for r.Stats().Channels != 1 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if s := r.Stats(); s.Channels != 1 {
			t.Errorf("workers=%d: %d registrations after %d connections ended, want 1 (the listener's channel)", workers, s.Channels, conns)
		}
		if v := failed.Load(); v != nil {
			t.Errorf("workers=%d: handler error: %v", workers, v)
		}
		_ = l.Destroy()
		if err := sch.Close(); err != nil {
			t.Error(err)
		}
		if err := cch.Close(); err != nil {
			t.Error(err)
		}
		if r.Stats().Channels != 0 {
			t.Errorf("workers=%d: closed channel still registered", workers)
		}
		f.Quiesce()
	}
}

// take takes the next event of ch within 5s, checks its type and
// acknowledges it.
func take(t testing.TB, ch *channel.Channel, want id.EventType) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := ch.GetEventContext(ctx)
	if err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	typ, status := ev.Type, ev.Status
	_ = ev.Ack()
	if typ != want {
		t.Fatalf("got %s status %d, want %s", typ, status, want)
	}
}

// hookedCQ is a fake queue whose descriptor cannot be made readable on
// destroy (as the kernel fabric's, an epoll set): it says so through
// OnClose instead, before it closes its descriptor.
type hookedCQ struct {
	*fakeCQ
	mu    sync.Mutex
	gone  bool
	hooks map[int]func()
	next  int
	ran   atomic.Int32 // hooks run by destroy
	fdOK  atomic.Bool  // the descriptor was still open while a hook ran
}

func (c *hookedCQ) Fd() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gone {
		return -1
	}
	return c.fakeCQ.Fd()
}

func (c *hookedCQ) OnClose(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hooks == nil {
		c.hooks = make(map[int]func())
	}
	c.next++
	k := c.next
	c.hooks[k] = f
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.hooks[k]
		delete(c.hooks, k)
		return ok
	}
}

func (c *hookedCQ) destroy() {
	c.mu.Lock()
	c.gone = true
	hooks := c.hooks
	c.hooks = nil
	c.mu.Unlock()
	for _, f := range hooks {
		_, err := unix.FcntlInt(uintptr(c.efd.Fd()), unix.F_GETFD, 0)
		c.fdOK.Store(err == nil)
		c.ran.Add(1)
		f()
	}
	_ = c.efd.Close()
}

// TestCQOnCloseHookDropsRegistration: a completion queue that announces its
// destroy through OnClose (the kernel fabric's) loses its registration and
// the reactor's duplicate when it is destroyed, with no UnregisterCQ and no
// readiness on its descriptor; UnregisterCQ afterwards returns nil.
func TestCQOnCloseHookDropsRegistration(t *testing.T) {
	for _, workers := range []int{0, 2} {
		r := newReactor(t, reactor.WithWorkers(workers))
		base := fdCount(t)
		cq := &hookedCQ{fakeCQ: newFakeCQ(t)}
		if err := r.RegisterCQ(cq, reactor.CompletionFunc(func(*id.WC) error { return nil })); err != nil {
			t.Fatal(err)
		}
		if n := r.Stats().Channels; n != 1 {
			t.Fatalf("workers=%d: %d registrations, want 1", workers, n)
		}
		cq.destroy()
		if cq.ran.Load() > 0 && !cq.fdOK.Load() {
			t.Fatalf("workers=%d: the hook ran after the descriptor closed", workers)
		}
		deadline := time.Now().Add(5 * time.Second)
		for r.Stats().Channels != 0 || fdCount(t) > base {
			if time.Now().After(deadline) {
				t.Fatalf("workers=%d: %d registrations and %d descriptors (base %d) after destroy",
					workers, r.Stats().Channels, fdCount(t), base)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if err := r.UnregisterCQ(cq); err != nil {
			t.Fatalf("workers=%d: UnregisterCQ after destroy: %v", workers, err)
		}
	}
}
