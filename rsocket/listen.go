package rsocket

import (
	"context"
	"net"
	"sync"

	"github.com/cmrt/cmrt/id"
)

// Listener is an rsocket listener (rlisten, raccept): a net.Listener whose
// Accept returns *Conn. Connection requests are answered on the shared
// reactor as they come, as rsockets' listen service does; Accept hands
// out the connections that are established.
type Listener struct {
	eng  *engine
	cfg  config
	cm   *id.ID
	addr *Addr

	mu      sync.Mutex
	closed  bool
	pending int // accepted and not yet established
	queue   chan *Conn

	done      chan struct{}
	closeOnce sync.Once
}

// ListenConfig holds the options of listeners; the zero value uses the
// defaults.
type ListenConfig struct {
	opts []Option
}

// NewListenConfig returns a ListenConfig with the options opts.
func NewListenConfig(opts ...Option) *ListenConfig { return &ListenConfig{opts: opts} }

// Listen listens on address ("host:port"; an empty host is the wildcard
// address, port 0 picks one) for rsocket connections. network is "tcp",
// "tcp4", "tcp6" or "rsocket". The listener is a *Listener.
func Listen(network, address string, opts ...Option) (net.Listener, error) {
	return NewListenConfig(opts...).Listen(context.Background(), network, address)
}

// Listen is the package's Listen with lc's options.
func (lc *ListenConfig) Listen(ctx context.Context, network, address string) (net.Listener, error) {
	cfg := defaultConfig()
	for _, o := range lc.opts {
		o(&cfg)
	}
	cfg.normalize()
	opErr := func(err error) error {
		return &net.OpError{Op: "listen", Net: "rsocket", Err: err}
	}
	if err := ctx.Err(); err != nil {
		return nil, opErr(err)
	}
	ap, err := resolve(network, address, true)
	if err != nil {
		return nil, opErr(err)
	}
	eng, err := acquire(cfg.fabric)
	if err != nil {
		return nil, opErr(err)
	}
	l := &Listener{eng: eng, cfg: cfg, done: make(chan struct{}), queue: make(chan *Conn, min(cfg.backlog, id.MaxBacklog))}
	if l.cm, err = id.Create(eng.ch, l, id.PSTCP); err != nil {
		eng.release(false)
		return nil, opErr(err)
	}
	fail := func(err error) (net.Listener, error) {
		_ = l.cm.Destroy()
		eng.release(false)
		return nil, opErr(err)
	}
	if err := l.cm.SetReuseAddr(true); err != nil {
		return fail(err)
	}
	if err := l.cm.Bind(ap); err != nil {
		return fail(err)
	}
	if err := l.cm.Listen(cfg.backlog); err != nil {
		return fail(err)
	}
	l.addr = newAddr(l.cm.LocalAddr())
	return l, nil
}

// onRequest answers a connection request, on the reactor loop: as
// rs_accept, it checks the peer's connection data, creates the queue pair
// and buffers, and accepts with its own connection data. The connection
// is queued for Accept when it is established.
func (l *Listener) onRequest(ev *id.Event) {
	child := ev.ID
	reject := func() {
		_ = child.Reject(nil)
		_ = child.Destroy()
	}
	l.mu.Lock()
	full := l.closed || l.pending+len(l.queue) >= cap(l.queue)
	if !full {
		l.pending++
	}
	l.mu.Unlock()
	if full {
		reject()
		return
	}
	unpend := func() {
		l.mu.Lock()
		l.pending--
		l.mu.Unlock()
	}
	peer, err := parseConnData(ev.PrivateData())
	if err != nil {
		unpend()
		reject()
		return
	}
	l.mu.Lock()
	cfg := l.cfg
	l.mu.Unlock()
	l.eng.hold()
	c := newConn(l.eng, cfg, true)
	c.cm, c.lis, c.pending = child, l, true
	child.SetContext(c)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.savePeer(peer)
	if err := c.createEP(); err != nil {
		c.failOpenRejecting()
		return
	}
	d := c.connData()
	p := &id.ConnParam{PrivateData: d.marshal(nil), ResponderResources: ev.Conn.ResponderResources,
		InitiatorDepth: ev.Conn.InitiatorDepth, FlowControl: ev.Conn.FlowControl, RNRRetryCount: ev.Conn.RNRRetryCount}
	if err := child.Accept(p); err != nil {
		c.failOpenRejecting()
	}
}

// failOpenRejecting gives up on a request not yet accepted. Called with
// mu held.
func (c *Conn) failOpenRejecting() {
	_ = c.cm.Reject(nil)
	c.failOpen(nil)
}

// Accept waits for and returns the next connection (a *Conn).
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.addr, Err: net.ErrClosed}
	}
}

// Close stops listening: pending Accepts fail with net.ErrClosed, requests
// not yet answered are rejected, and established connections nobody
// accepted are closed. Closing again does nothing.
func (l *Listener) Close() error {
	first := false
	l.closeOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	l.mu.Lock()
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	_ = l.cm.Destroy()
	for {
		select {
		case c := <-l.queue:
			_ = c.Close()
			continue
		default:
		}
		break
	}
	l.eng.release(false)
	return nil
}

// SetOptions changes the options of the connections accepted from now on,
// as setting socket options on a listening rsocket does (they are
// inherited by the accepted sockets). WithFabric and WithBacklog have no
// effect here.
func (l *Listener) SetOptions(opts ...Option) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cfg := l.cfg
	for _, o := range opts {
		o(&cfg)
	}
	cfg.fabric, cfg.backlog = l.cfg.fabric, l.cfg.backlog
	cfg.normalize()
	l.cfg = cfg
}

// Addr returns the listener's address (*Addr).
func (l *Listener) Addr() net.Addr { return l.addr }
