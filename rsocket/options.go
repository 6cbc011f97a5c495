package rsocket

import (
	"net/netip"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

// Defaults, as librdmacm's rsockets has them (rsocket.c; the files under
// /etc/rdma/rsocket override them there, options here).
const (
	// DefaultSQSize and DefaultRQSize are the send and receive queue
	// depths (RDMA_SQSIZE, RDMA_RQSIZE; rsockets' sqsize_default and
	// rqsize_default). The receive queue size is also the number of
	// messages the peer may have in flight (its credits).
	DefaultSQSize = 384
	DefaultRQSize = 384
	// DefaultInline is the largest transfer sent inline (RDMA_INLINE).
	DefaultInline = 64
	// DefaultRecvBuf and DefaultSendBuf are the receive and send buffer
	// sizes in bytes (rsockets' mem_default and wmem_default; SO_RCVBUF
	// and SO_SNDBUF set twice the value given, as on Linux).
	DefaultRecvBuf = 128 << 10
	DefaultSendBuf = 128 << 10
	// DefaultPollTime is how long a Read or Write that must wait polls
	// the completion queues itself before it blocks (rsockets'
	// polling_time, 10 µs), on the kernel fabric, whose completions the
	// device or the kernel makes. On other fabrics (the software fabric)
	// the default is 0: their completions are made by goroutines of this
	// process, and a caller polling in a loop keeps them from running, as
	// Go's scheduler looks for ready sockets only when it has no runnable
	// goroutine (BENCHMARKS.md, "rsocket").
	DefaultPollTime = 10 * time.Microsecond
)

// Limits of the sizes, as rsockets clamps them.
const (
	minQueue   = 16     // RS_QP_MIN_SIZE
	maxQueue   = 0xfffe // RS_QP_MAX_SIZE
	minBuf     = 4096   // two halves of at least the send low-water mark
	maxBuf     = 1 << 28
	ctrlSlots  = 4        // RS_QP_CTRL_SIZE: control messages in flight
	maxXfer    = 64 << 10 // RS_MAX_TRANSFER: bytes per data message
	firstXfer  = 2 << 10  // RS_OLAP_START_SIZE: the first message of a Write
	sndLowat   = 2 << 10  // RS_SNDLOWAT
	maxIOMap   = 1 << 15
	extraRecvs = 2 * ctrlSlots // receives posted beyond the credits given
)

// config is what the options set.
type config struct {
	fabric    fabric.Fabric
	sqSize    int
	rqSize    int
	inline    int
	recvBuf   int
	sendBuf   int
	iomapSize int
	keepalive time.Duration
	backlog   int
	timeout   time.Duration // address and route resolution, per attempt
	local     netip.AddrPort
	pollTime  time.Duration // < 0: the fabric's default (pollTimeFor)
	// unmarked speaks exactly as rsockets does: no connFlagMarked, no
	// msgSGEMark (tests use it to run the C peer's path between Go ends).
	unmarked bool
}

func defaultConfig() config {
	return config{sqSize: DefaultSQSize, rqSize: DefaultRQSize, inline: DefaultInline,
		recvBuf: DefaultRecvBuf, sendBuf: DefaultSendBuf, timeout: 2 * time.Second,
		pollTime: -1}
}

// pollTimeFor is the poll time of connections on fabric f when no option
// set it: 0 on a fabric whose completions are made by goroutines of this
// process (inProcess: the software fabric), else DefaultPollTime (the
// kernel fabric). Spinning for a completion helps where the device or the
// kernel makes it meanwhile; on a fabric run by goroutines of this
// process it delays the completion by the spin (64 B ping-pong p50 57 µs
// without it, 75 µs with 10 µs of spin, 160 µs with 50 µs: BENCHMARKS.md,
// "rsocket").
func pollTimeFor(f fabric.Fabric) time.Duration {
	if inProcess(f) {
		return 0
	}
	return DefaultPollTime
}

// normalize clamps the sizes as rsockets does.
func (c *config) normalize() {
	c.sqSize = clamp(c.sqSize, minQueue, maxQueue)
	c.rqSize = clamp(c.rqSize, minQueue, maxQueue)
	c.inline = clamp(c.inline, msgSize, 64<<10)
	c.recvBuf = clamp(c.recvBuf, minBuf, maxBuf) &^ 1
	c.sendBuf = clamp(c.sendBuf, minBuf, maxBuf)
	c.iomapSize = valueOf(scaleOf(clamp(c.iomapSize, 0, maxIOMap)))
	if c.backlog <= 0 {
		c.backlog = id.MaxBacklog
	}
	if c.timeout <= 0 {
		c.timeout = 2 * time.Second
	}
}

func clamp(v, lo, hi int) int { return min(max(v, lo), hi) }

// Option configures Listen, Dial and their configurable forms.
type Option func(*config)

// WithFabric runs the sockets on fabric f instead of the default one
// (fabric.Default: $CMRT_FABRIC, else the software fabric).
func WithFabric(f fabric.Fabric) Option { return func(c *config) { c.fabric = f } }

// WithSQSize sets the send queue depth (RDMA_SQSIZE), clamped to
// [16, 65534].
func WithSQSize(n int) Option { return func(c *config) { c.sqSize = n } }

// WithRQSize sets the receive queue depth (RDMA_RQSIZE), clamped to
// [16, 65534]: the number of messages the peer may send before this side
// reads them.
func WithRQSize(n int) Option { return func(c *config) { c.rqSize = n } }

// WithInline sets the largest write sent inline (RDMA_INLINE): its bytes
// are copied into the work request instead of the send buffer.
func WithInline(n int) Option { return func(c *config) { c.inline = n } }

// WithRecvBuffer sets the receive buffer size in bytes (rsockets'
// mem_default; SO_RCVBUF sets twice its argument). Half of it is offered
// to the peer at a time.
func WithRecvBuffer(n int) Option { return func(c *config) { c.recvBuf = n } }

// WithSendBuffer sets the send buffer size in bytes (rsockets'
// wmem_default; SO_SNDBUF sets twice its argument).
func WithSendBuffer(n int) Option { return func(c *config) { c.sendBuf = n } }

// WithIOMapSize sets how many of the peer's direct-write mappings
// (riomap) this side accepts (RDMA_IOMAPSIZE); 0, the default, accepts
// none.
func WithIOMapSize(n int) Option { return func(c *config) { c.iomapSize = n } }

// WithKeepalive sends a keepalive (a zero-length RDMA Write, as rsockets'
// SO_KEEPALIVE with TCP_KEEPIDLE) after every period d; 0, the default,
// sends none. A dead peer then fails the connection's next operation.
func WithKeepalive(d time.Duration) Option { return func(c *config) { c.keepalive = d } }

// WithBacklog sets a listener's backlog (rlisten's; 0: the maximum).
func WithBacklog(n int) Option { return func(c *config) { c.backlog = n } }

// WithResolveTimeout sets the timeout of address and route resolution.
func WithResolveTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithLocalAddr binds dialed connections to a local address (rbind before
// rconnect); port 0 lets the fabric pick one.
func WithLocalAddr(ap netip.AddrPort) Option { return func(c *config) { c.local = ap } }

// WithPollTime sets how long a Read or Write that must wait polls the
// completion queues itself before it blocks (rsockets' polling_time); 0
// (or less) blocks at once. Longer polls trade CPU for latency where
// completions come from the device or the kernel. The default is
// DefaultPollTime on the kernel fabric and 0 on others.
func WithPollTime(d time.Duration) Option { return func(c *config) { c.pollTime = max(d, 0) } }
