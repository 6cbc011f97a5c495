package rsocket

import (
	"context"
	"net"

	"github.com/cmrt/cmrt/id"
)

// Dialer holds the options of outgoing connections; the zero value uses
// the defaults.
type Dialer struct {
	opts []Option
}

// NewDialer returns a Dialer with the options opts.
func NewDialer(opts ...Option) *Dialer { return &Dialer{opts: opts} }

// Dial connects to address ("host:port") over network ("tcp", "tcp4",
// "tcp6" or "rsocket"), as rconnect. The connection is a *Conn.
func Dial(network, address string, opts ...Option) (net.Conn, error) {
	return NewDialer(opts...).DialContext(context.Background(), network, address)
}

// DialContext is Dial bounded by ctx.
func DialContext(ctx context.Context, network, address string, opts ...Option) (net.Conn, error) {
	return NewDialer(opts...).DialContext(ctx, network, address)
}

// Dial is the package's Dial with d's options.
func (d *Dialer) Dial(network, address string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, address)
}

// DialContext resolves the address and the route, creates the queue pair
// and buffers, and connects with rsockets' connection data; it returns once
// the connection is established or fails (errors unwrap to the errno
// librdmacm gives: ECONNREFUSED when nothing listens or the peer rejects,
// ETIMEDOUT, EHOSTUNREACH, ...), or when ctx ends.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	cfg := defaultConfig()
	for _, o := range d.opts {
		o(&cfg)
	}
	cfg.normalize()
	dst, err := resolve(network, address, false)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "rsocket", Err: err}
	}
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: "rsocket", Addr: newAddr(dst), Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr(err)
	}
	eng, err := acquire(cfg.fabric)
	if err != nil {
		return nil, opErr(err)
	}
	c := newConn(eng, cfg, false)
	if c.cm, err = id.Create(eng.ch, c, id.PSTCP); err != nil {
		eng.release(false)
		return nil, opErr(err)
	}
	if err := c.cm.ResolveAddr(cfg.local, dst, cfg.timeout); err != nil {
		c.abandon()
		return nil, opErr(err)
	}
	select {
	case err := <-c.setup:
		if err != nil {
			c.abandon()
			return nil, opErr(err)
		}
		return c, nil
	case <-ctx.Done():
		c.abandon()
		return nil, opErr(ctx.Err())
	}
}

// abandon releases a connection whose set-up failed or was given up.
func (c *Conn) abandon() {
	c.mu.Lock()
	open := c.phase == phOpen
	if !open {
		c.phase = phFailed
	}
	c.mu.Unlock()
	if open {
		_ = c.Close()
		return
	}
	_ = c.cm.Destroy()
	c.eng.release(false)
}
