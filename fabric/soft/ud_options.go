package soft

import "time"

// Defaults of the UD service.
const (
	// DefaultSIDRTimeout is how long a SIDR REQ waits for its REP before the
	// first retransmission; each retransmission doubles the wait.
	DefaultSIDRTimeout = 250 * time.Millisecond
	// DefaultSIDRRetries is how many times a SIDR REQ is retransmitted. With
	// the default timeout an unanswered UD connect reports UNREACHABLE
	// (-ETIMEDOUT) after 250+500+1000+2000+4000 ms = 7.75 s. A destination
	// host with no socket on the port says so at once (ICMP port
	// unreachable): the connect then reports UNREACHABLE with status 1
	// (IB_SIDR_UNSUPPORTED) without waiting.
	DefaultSIDRRetries = 4
	// DefaultMulticastPort is the UDP port of multicast group traffic: one
	// above RoCEv2's 4791, so the fabric never collides with the kernel's
	// soft-RoCE (rxe) socket, which holds 4791 on every address.
	DefaultMulticastPort = 4792
)

// udOptions configure the UD service; the zero value means the defaults.
type udOptions struct {
	sidrTimeout time.Duration
	sidrRetries int
	retriesSet  bool
	mcastPort   uint16
}

// WithSIDRRetry sets how a UD connect retransmits its SIDR REQ: the first
// wait is timeout, each retransmission doubles it, and after retries
// retransmissions go unanswered the id gets UNREACHABLE with -ETIMEDOUT. The
// total wait is timeout·(2^(retries+1)−1); see DefaultSIDRTimeout. A UD
// listener of the fabric keeps the REP of an answered request that long
// after the answer, for the requester's retransmissions, so fabrics that
// talk to each other should use the same setting.
func WithSIDRRetry(timeout time.Duration, retries int) Option {
	return func(o *options) {
		o.ud.sidrTimeout = timeout
		o.ud.sidrRetries = max(retries, 0)
		o.ud.retriesSet = true
	}
}

// WithMulticastPort sets the UDP port multicast groups use (default
// DefaultMulticastPort). Every fabric exchanging group traffic must use the
// same port; it is the DLID of the group's address handle.
func WithMulticastPort(port uint16) Option { return func(o *options) { o.ud.mcastPort = port } }

func (o *udOptions) timeout() time.Duration {
	if o.sidrTimeout <= 0 {
		return DefaultSIDRTimeout
	}
	return o.sidrTimeout
}

func (o *udOptions) retries() int {
	if !o.retriesSet {
		return DefaultSIDRRetries
	}
	return o.sidrRetries
}

func (o *udOptions) groupPort() uint16 {
	if o.mcastPort == 0 {
		return DefaultMulticastPort
	}
	return o.mcastPort
}
