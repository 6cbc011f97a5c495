// Package channel is the RDMA CM event channel, as
// rdma_create_event_channel(3): a descriptor that is readable while events
// are queued, GetEvent to take the next event (blocking, or EAGAIN when
// non-blocking), and Ack to acknowledge it.
//
// A channel belongs to one fabric: the default one (the software fabric, or
// the one $CMRT_FABRIC names; package id registers the fabrics that ship
// with cmrt) or the one given with WithFabric.
package channel

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/hooks"
)

// Channel is an event channel. It is safe for concurrent use.
type Channel struct {
	src      fabric.EventSource
	nonblock atomic.Bool

	mu      sync.Mutex
	closed  bool
	onClose hooks.Set // OnClose's functions
}

type options struct {
	fabric   fabric.Fabric
	nonblock bool
}

// Option configures New.
type Option func(*options)

// WithFabric opens the channel on f instead of the default fabric.
func WithFabric(f fabric.Fabric) Option { return func(o *options) { o.fabric = f } }

// WithNonblocking makes GetEvent return EAGAIN instead of waiting, as
// setting O_NONBLOCK on the channel's fd does in librdmacm.
func WithNonblocking() Option { return func(o *options) { o.nonblock = true } }

// New creates an event channel. With no fabric registered under the default
// name it fails with ENODEV.
func New(opts ...Option) (*Channel, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	f := o.fabric
	if f == nil {
		var err error
		if f, err = fabric.Default(); err != nil {
			return nil, &id.Error{Op: "create_event_channel", Err: err}
		}
	}
	src, err := f.Open()
	if err != nil {
		return nil, &id.Error{Op: "create_event_channel", Err: err}
	}
	c := &Channel{src: src}
	c.nonblock.Store(o.nonblock)
	return c, nil
}

// Source implements id.Channel. It is nil once the channel is closed, and
// for a nil *Channel (so that id.Create and Migrate refuse it with EINVAL).
func (c *Channel) Source() fabric.EventSource {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	return c.src
}

// Fabric returns the fabric the channel is on (nil for a nil *Channel).
func (c *Channel) Fabric() fabric.Fabric {
	if c == nil {
		return nil
	}
	return c.src.Fabric()
}

// Fd returns the channel's descriptor: readable (poll, epoll) while events
// are queued. The descriptor belongs to the channel; do not close it. After
// Close (and for a nil *Channel) it is -1.
func (c *Channel) Fd() int {
	if c.Source() == nil {
		return -1
	}
	return c.src.Fd()
}

// SetNonblocking switches GetEvent between waiting and returning EAGAIN.
func (c *Channel) SetNonblocking(on bool) { c.nonblock.Store(on) }

// Nonblocking reports whether GetEvent returns EAGAIN instead of waiting.
func (c *Channel) Nonblocking() bool { return c.nonblock.Load() }

// GetEvent returns the next event, as rdma_get_cm_event. It waits for one
// unless the channel is non-blocking, in which case an empty channel gives
// an error wrapping EAGAIN. Every event must be acknowledged (Ack or
// Event.Ack).
func (c *Channel) GetEvent() (*id.Event, error) {
	return c.GetEventContext(context.Background())
}

// GetEventContext is GetEvent with a context bounding the wait; when ctx
// ends first it returns ctx.Err(). On a closed channel, and when the
// channel is closed while the call waits, it fails with an error wrapping
// id.ErrClosed and EBADF.
//
// The event is the caller's (one allocation per call, as librdmacm's
// rdma_get_cm_event): it is never reused, so it keeps its content after
// Ack and a second Ack of it fails with EINVAL.
func (c *Channel) GetEventContext(ctx context.Context) (*id.Event, error) {
	src := c.Source()
	if src == nil {
		return nil, errClosed
	}
	ev, err := id.NextEvent(ctx, src, !c.nonblock.Load())
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		if c.Source() == nil && errors.Is(err, syscall.EBADF) {
			return nil, errClosed
		}
		return nil, &id.Error{Op: "get_cm_event", Err: err}
	}
	return ev, nil
}

var errClosed = &id.Error{Op: "get_cm_event", Err: fmt.Errorf("%w: %w", id.ErrClosed, syscall.EBADF)}

// Ack acknowledges an event taken from this channel, as rdma_ack_cm_event.
// An event from another channel, or one already acknowledged, is EINVAL.
func (c *Channel) Ack(ev *id.Event) error {
	if ev == nil {
		return &id.Error{Op: "ack_cm_event", Msg: "nil event", Err: syscall.EINVAL}
	}
	if c == nil || ev.Source() != c.src {
		return &id.Error{Op: "ack_cm_event", Msg: "event of another channel", Err: syscall.EINVAL}
	}
	return ev.Ack()
}

// endpointCounter is implemented by sources that know how many ids report
// to them.
type endpointCounter interface{ Endpoints() int }

// Close destroys the channel, as rdma_destroy_event_channel. Ids still on it
// must be destroyed (or migrated) first: while any remain Close fails with
// EBUSY. Closing twice is a no-op; so is closing a nil *Channel. The
// functions given to OnClose run before the descriptor is released; a
// GetEvent waiting meanwhile returns an error wrapping id.ErrClosed.
func (c *Channel) Close() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	if ec, ok := c.src.(endpointCounter); ok {
		if n := ec.Endpoints(); n > 0 {
			c.mu.Unlock()
			return &id.Error{Op: "destroy_event_channel", Msg: fmt.Sprintf("%d ids still use the channel", n), Err: syscall.EBUSY}
		}
	}
	c.closed = true
	fs := c.onClose.Close()
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
	return c.src.Close()
}

// OnClose arranges for f to run once, when the channel is closed, before
// its source and descriptor are released: a poller (package reactor) uses it
// to stop polling the descriptor while it is still the channel's. f runs on
// the goroutine that calls Close and must not call Close. The returned stop
// cancels it (it reports whether f was still pending). On a closed (or nil)
// channel f is not kept: OnClose returns a stop that reports false, and the
// caller should treat the channel as gone.
func (c *Channel) OnClose(f func()) (stop func() bool) {
	if c == nil {
		return func() bool { return false }
	}
	return c.onClose.Add(f)
}
