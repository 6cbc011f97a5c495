package soft

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/cmrt/cmrt/fabric"
)

// Fabric is a software fabric. The zero value is not usable: use New, or
// Default for the registered instance.
type Fabric struct {
	opts  options
	log   zerolog.Logger
	eng   engine
	ports portTable
	devs  deviceTable
	mon   netmon // ADDR_CHANGE and DEVICE_REMOVAL (net_monitor.go)

	// halfOpenBounds replaces the bounds of listeners' pools of
	// connections without an MPA Request (per source, in all) when set,
	// by tests before they listen (rc_listener.go).
	halfOpenBounds [2]int
	// testHookUDSockPosted, set by tests only, runs once a new UD socket's
	// start is posted to its loop (ep.mu held).
	testHookUDSockPosted func(l *loop)
	// testHookRoute, set by tests only before the fabric's first id, runs
	// at each routing lookup (net_route.go route).
	testHookRoute func()
}

type options struct {
	name           string
	log            zerolog.Logger
	netdevs        []string
	connectTimeout time.Duration
	requestTimeout time.Duration
	linger         time.Duration
	idleGrace      time.Duration
	crc            bool
	ports          [2]int    // WithPortRange: low and high, or zeros
	ud             udOptions // UD and multicast settings (ud_options.go)
	rc             rcOptions // RC data path settings (rc_options.go)
}

// Option configures a Fabric.
type Option func(*options)

// WithName registers the fabric under another name than "soft" (for
// fabric.Register); useful for a second, differently configured instance.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithLogger sets the logger (zerolog.Nop by default). The fabric logs
// anomalies only: protocol errors from peers at debug level, resource
// exhaustion at warn level; never a line per event. Entries carry
// component=soft.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithNetdevs limits the fabric's devices to these network interfaces; ids
// on other interfaces' addresses get ENODEV.
func WithNetdevs(names ...string) Option {
	return func(o *options) { o.netdevs = append([]string(nil), names...) }
}

// WithConnectTimeout bounds an active connection's TCP connect and MPA
// exchange (default 10s, siw's MPA timeout); past it the id gets
// UNREACHABLE with -ETIMEDOUT. An id's ACK_TIMEOUT option overrides it.
func WithConnectTimeout(d time.Duration) Option { return func(o *options) { o.connectTimeout = d } }

// WithRequestTimeout bounds how long an accepted TCP connection may take to
// send its MPA Request (default 5s, as siw).
func WithRequestTimeout(d time.Duration) Option { return func(o *options) { o.requestTimeout = d } }

// WithLinger bounds how long a disconnected connection waits for the peer's
// FIN before closing (default 2s).
func WithLinger(d time.Duration) Option { return func(o *options) { o.linger = d } }

// WithIdleGrace sets how long the fabric keeps its epoll loop, address
// monitor and route socket once nothing uses them (default 100ms): a
// client making one connection at a time does not restart them for each.
// Zero stops them as soon as they are idle. Quiesce stops them at once.
func WithIdleGrace(d time.Duration) Option { return func(o *options) { o.idleGrace = d } }

// WithCRC asks for MPA CRC32c on connections this fabric initiates or
// accepts (default off, as siw).
func WithCRC(on bool) Option { return func(o *options) { o.crc = on } }

// WithPortRange sets the range TCP ports are chosen from when an id binds
// port 0 (resolve_addr or listen of an unbound id). The default is
// net.ipv4.ip_local_port_range, where the kernel's rdma_cm picks too: a
// program that runs this fabric beside the kernel's (siw listens on real
// TCP ports of the ports rdma_cm picks) gives each its own range so that
// neither takes the other's port. A range outside 1-65535, or with low
// above high, is ignored.
func WithPortRange(low, high int) Option {
	return func(o *options) {
		if 0 < low && low <= high && high < 1<<16 {
			o.ports = [2]int{low, high}
		}
	}
}

// defaultIdleGrace is WithIdleGrace's default: long enough for the next
// connection of a client making one at a time, short enough that an idle
// program soon holds nothing.
const defaultIdleGrace = 100 * time.Millisecond

// New returns a software fabric.
func New(opts ...Option) *Fabric {
	o := options{
		name: "soft", log: zerolog.Nop(),
		connectTimeout: 10 * time.Second, requestTimeout: 5 * time.Second, linger: 2 * time.Second,
		idleGrace: defaultIdleGrace,
	}
	for _, opt := range opts {
		opt(&o)
	}
	f := &Fabric{opts: o, log: o.log.With().Str("component", "soft").Logger()}
	f.mon.f = f
	f.ports.low, f.ports.high = o.ports[0], o.ports[1]
	f.eng.f, f.eng.log, f.eng.grace = f, f.log, o.idleGrace
	if o.netdevs != nil {
		f.devs.filter = make(map[string]bool)
		for _, n := range o.netdevs {
			f.devs.filter[n] = true
		}
	}
	return f
}

var std = New()

// Default returns the fabric registered as "soft".
func Default() *Fabric { return std }

func init() { fabric.Register(std) }

// Name implements fabric.Fabric.
func (f *Fabric) Name() string { return f.opts.name }

// CompletesInProcess implements fabric.InProcessCompleter: true, the
// fabric's goroutines make its completions (whatever name it was
// registered under), and the one that queues a completion wakes a
// blocked CQ.Wait.
func (f *Fabric) CompletesInProcess() bool { return true }

// Devices implements fabric.Fabric: one device per interface with an address.
func (f *Fabric) Devices() ([]fabric.Device, error) { return f.devs.list() }

// Open implements fabric.Fabric.
func (f *Fabric) Open() (fabric.EventSource, error) {
	return newSource(f), nil
}

// Quiesce stops what the fabric keeps while idle (its epoll loop, address
// monitor and route socket, without waiting for the grace period) and
// waits until its loops have stopped, which they do once their last socket
// is closed. Tests use it before counting goroutines and descriptors.
func (f *Fabric) Quiesce() {
	f.mon.stopIdle()
	f.eng.wait()
}

// QuiesceContext is Quiesce bounded by ctx.
func (f *Fabric) QuiesceContext(ctx context.Context) error {
	done := make(chan struct{})
	go func() { f.Quiesce(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
