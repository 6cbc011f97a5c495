package soft

import "time"

// RTR names the ready-to-receive messages of MPA peer-to-peer mode (RFC
// 6581): the zero-length RDMA Write or RDMA Read that an initiator sends
// first so that the responder, which must not send before it has received
// something, may start.
type RTR uint8

// RTR types. siw as a responder accepts both and picks Write when offered.
const (
	// RTRWrite is a zero-length RDMA Write (siw's choice).
	RTRWrite RTR = 1 << iota
	// RTRRead is a zero-length RDMA Read; its empty Read Response is
	// consumed by the fabric.
	RTRRead
)

// defaultResponderHold is how long a responder holds its first FPDU after
// the MPA Reply when the initiator sends nothing and asked for no P2P mode
// (see WithResponderHold).
const defaultResponderHold = 10 * time.Millisecond

// defaultP2P is the RTR an initiator offers unless WithP2P says otherwise:
// siw's choice, which siw as a responder accepts.
const defaultP2P = RTRWrite

// rcOptions are the options of the RC data path.
type rcOptions struct {
	p2p     RTR // RTR types offered as initiator; 0: no P2P
	p2pSet  bool
	hold    time.Duration // responder hold; < 0: none
	holdSet bool
}

// offer returns the RTR types offered as initiator.
func (o *rcOptions) offer() RTR {
	if !o.p2pSet {
		return defaultP2P
	}
	return o.p2p
}

// responderHold returns the hold in effect.
func (o *rcOptions) responderHold() time.Duration {
	if !o.holdSet {
		return defaultResponderHold
	}
	return o.hold
}

// WithP2P sets the RTR types (RTRWrite, RTRRead or both) that connections
// this fabric initiates offer when they ask for MPA peer-to-peer mode; 0
// asks for no P2P mode, as siw's initiator. After the MPA Reply the fabric
// sends the RTR the responder chose before anything else and then reports
// ESTABLISHED; a responder that ignores the request gets no RTR. Default:
// RTRWrite, so that a responder (this fabric, siw) knows when it may send
// and never holds its first message (WithResponderHold). As a responder
// the fabric always honours a P2P request: it answers with a Write RTR
// when offered (else Read) and reports ESTABLISHED only when the RTR
// arrives.
func WithP2P(rtr RTR) Option {
	return func(o *options) { o.rc.p2p, o.rc.p2pSet = rtr&(RTRWrite|RTRRead), true }
}

// WithResponderHold sets how long an accepted connection whose initiator
// asked for no P2P mode (siw's, rdma-core's tools on siw) holds its first
// outgoing FPDU after the MPA Reply, unless an FPDU from the initiator
// arrives first. MPA forbids a responder to send before the initiator's
// first FPDU, and siw as an initiator drops a connection whose first FPDU
// arrives in the same read as the Reply; but initiators such as
// ucmatose's client never send first, so waiting for them alone would
// deadlock. Default 10ms; a negative duration sends at once. Between two
// cmrt fabrics the initiator asks for P2P mode (WithP2P) and nothing is
// held.
func WithResponderHold(d time.Duration) Option {
	return func(o *options) { o.rc.hold, o.rc.holdSet = d, true }
}
