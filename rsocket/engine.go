package rsocket

import (
	"context"
	"sync"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// engine is what every socket of one fabric shares: one event channel for
// all their ids and one reactor, running its handlers inline on its loop
// goroutine, that reads the channel and, on the kernel fabric, every
// connection's completion queues (on others the callers poll them:
// cqWait). However many sockets exist, the library adds one goroutine per
// fabric in use (the reactor's loop); a Read or Write blocks the caller's
// goroutine only. The engine starts with its first socket and stops when
// the last one is closed.
type engine struct {
	fab  fabric.Fabric
	ch   *channel.Channel
	r    *reactor.Reactor
	refs int // sockets holding the engine (under engines.mu)

	devMu  sync.Mutex
	msgDev map[string]bool // msgSend's answers, by device name
}

var engines = struct {
	sync.Mutex
	m map[fabric.Fabric]*engine
}{m: make(map[fabric.Fabric]*engine)}

// acquire returns the running engine of fabric f (nil: the default
// fabric), starting it if needed, and holds it for one socket.
func acquire(f fabric.Fabric) (*engine, error) {
	if f == nil {
		var err error
		if f, err = fabric.Default(); err != nil {
			return nil, err
		}
	}
	engines.Lock()
	defer engines.Unlock()
	if e := engines.m[f]; e != nil {
		e.refs++
		return e, nil
	}
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		return nil, err
	}
	r, err := reactor.New()
	if err != nil {
		_ = ch.Close()
		return nil, err
	}
	e := &engine{fab: f, ch: ch, r: r, refs: 1}
	if err := r.Register(ch, e); err != nil {
		_ = r.Close(context.Background())
		_ = ch.Close()
		return nil, err
	}
	engines.m[f] = e
	return e, nil
}

// release drops one socket's hold; the last one stops the engine. From a
// handler (inline on the loop) the stop runs on a goroutine of its own: the
// loop cannot wait for itself.
func (e *engine) release(inHandler bool) {
	engines.Lock()
	e.refs--
	last := e.refs == 0
	if last && engines.m[e.fab] == e {
		delete(engines.m, e.fab)
	}
	engines.Unlock()
	if !last {
		return
	}
	if inHandler {
		go e.stop()
		return
	}
	e.stop()
}

// stop closes the reactor and the channel. Every id on the channel is
// destroyed by then, but their last events may still be on their way to
// the channel's queue: Close is retried briefly while it finds ids.
func (e *engine) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.r.Unregister(e.ch)
	_ = e.r.Close(ctx)
	for e.ch.Close() != nil && ctx.Err() == nil {
		time.Sleep(time.Millisecond)
	}
}

// HandleEvent implements id.Handler: it routes each CM event to the
// socket its id belongs to. It runs on the reactor's loop and never blocks.
func (e *engine) HandleEvent(ev *id.Event) error {
	if ev.Type == id.EventConnectRequest {
		if l, ok := ev.ListenID.Context().(*Listener); ok {
			l.onRequest(ev)
			return nil
		}
		_ = ev.ID.Reject(nil)
		_ = ev.ID.Destroy()
		return nil
	}
	if c, ok := ev.ID.Context().(*Conn); ok {
		c.onEvent(ev)
	}
	return nil
}

// msgSend reports whether connections on device dev send their message
// words as Sends (rsockets' RS_OPT_MSG_SEND), as rsockets decides it from
// the device's transport: iWARP has no RDMA Write with Immediate, every
// other transport (InfiniBand, RoCE) has. A device the fabric does not list
// is taken as iWARP: the mode that needs nothing of the transport beyond
// Writes and Sends. The answer is kept per device; this runs at connection
// set-up only.
func (e *engine) msgSend(dev string) bool {
	e.devMu.Lock()
	defer e.devMu.Unlock()
	if v, ok := e.msgDev[dev]; ok {
		return v
	}
	devs, err := e.fab.Devices()
	if err != nil {
		return true // not kept: the next connection asks again
	}
	v := true
	for _, d := range devs {
		if d.Name == dev {
			v = d.Transport == transportIWARP
			break
		}
	}
	if e.msgDev == nil {
		e.msgDev = make(map[string]bool)
	}
	e.msgDev[dev] = v
	return v
}

// transportIWARP is fabric.Device.Transport of iWARP devices.
const transportIWARP = "iWARP"

// hold takes one more hold on a running engine (for a connection a
// listener accepts).
func (e *engine) hold() {
	engines.Lock()
	e.refs++
	engines.Unlock()
}
