package soft

import (
	"container/list"
	"math/rand/v2"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/sidr"
)

// UD connection set-up (SIDR over UDP, see package internal/sidr for the
// bytes).
//
// A UD id's rdma_cm port is a UDP port: the socket its binding holds (a
// udPort, ud_port.go). When the id listens or connects, a udSock attaches
// to that socket and a loop polls it.
//
//   - Active side: Connect sends a REQ with a random transaction id to the
//     resolved destination and waits DefaultSIDRTimeout (WithSIDRRetry),
//     retransmitting with a doubled wait each time. A REP with the tid, from
//     the address and port the REQ went to (a REP from anywhere else is
//     dropped), ends it: status 0 is ESTABLISHED with the peer's UD
//     parameters, a non-zero status UNREACHABLE with that status (2 after
//     rdma_reject, 1 when nothing listens in the port space), a Q_Key other
//     than RDMA_UDP_QKEY ADDR_ERROR (-EINVAL), as cma_sidr_rep_handler. When
//     the destination host answers a REQ with an ICMP port unreachable (no
//     socket on the port), the connect ends at once with UNREACHABLE status
//     1, IB_SIDR_UNSUPPORTED, what the kernel's rdma_cm reports when the
//     remote CM has no listener for the service. No REP after the last
//     retransmission is UNREACHABLE -ETIMEDOUT.
//   - Passive side: a listening socket turns each new REQ into a
//     CONNECT_REQUEST with a new endpoint. Requests are remembered by
//     (source, tid): a retransmission of a request still waiting for the
//     user is ignored, one already answered gets the same REP again (for
//     the requester's retry window, sidrRetryWindow, after the answer), so
//     duplicates never make a second CONNECT_REQUEST. At most backlog
//     requests wait for the user; more are dropped (the requester
//     retransmits). The table is bounded (sidrMaxReqs) and so is each source
//     host's share of it (sidrMaxPerSource): when either is full, the
//     oldest answered request (of that source) is forgotten first, and only
//     when none is answered is the new request dropped. A REQ for another
//     port space, or on a socket that does not listen, is answered with
//     status 1 (unsupported).
//   - Malformed datagrams are dropped with a debug log; they touch no id.

// Bounds of a listener's request table.
const (
	// sidrMaxReqs bounds the requests a listener remembers (waiting and
	// answered).
	sidrMaxReqs = 4096
	// sidrMaxPerSource bounds those of one source host (an IPv4 address,
	// an IPv6 /64), so that one host cannot fill the table.
	sidrMaxPerSource = 256
)

// sidrKey names a request: where it came from and its transaction id.
type sidrKey struct {
	from netip.AddrPort
	tid  uint64
}

// sidrReq is a request a listener has reported.
type sidrReq struct {
	key     sidrKey
	src     *sidrSource
	dst     netip.Addr // where the REQ was addressed: the REP's source
	rep     []byte     // the REP, once the user answered
	counted bool       // in pending: reported, not yet read by the user nor answered
	expires time.Time  // answered: when its retransmissions are over
	all     *list.Element
	mine    *list.Element // in src.answered
}

// sidrSource is one source host's share of a listener's request table.
type sidrSource struct {
	addr     netip.Addr
	n        int       // requests remembered, waiting and answered
	answered list.List // its answered requests (*sidrReq), oldest first
}

// sourceOf returns the host part of a requester's address that per-source
// limits count: the IPv4 address, or the /64 of an IPv6 one.
func sourceOf(ap netip.AddrPort) netip.Addr {
	a := ap.Addr().Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.Addr()
	}
	return a
}

// sidrConn is the active side's request in flight.
type sidrConn struct {
	tid   uint64
	req   []byte
	to    netip.AddrPort
	wait  time.Duration
	tries int
	timer *time.Timer
	done  bool
}

// udSock is the SIDR state of a UD id that listens or connects, on its
// binding's socket. Fields below local belong to the loop goroutine.
type udSock struct {
	l     *loop
	f     *Fabric
	ep    *endpoint
	port  *udPort
	local netip.AddrPort

	closed    bool
	listening bool
	ps        fabric.PortSpace
	backlog   int
	pending   int
	reqs      map[sidrKey]*sidrReq
	sources   map[netip.Addr]*sidrSource
	answered  list.List // answered requests (*sidrReq), oldest first: they expire in order
	conn      *sidrConn
}

// sockLocked returns the endpoint's SIDR state, attaching it to the
// binding's socket on first use. ep.mu is held.
func (t *udTransport) sockLocked() (*udSock, error) {
	ep := t.ep
	if s := t.sock; s != nil {
		return s, nil
	}
	if ep.bind == nil || ep.bind.ud == nil {
		return nil, einval("UD id has no bound socket")
	}
	l, err := ep.f.eng.acquire()
	if err != nil {
		return nil, err
	}
	s := &udSock{l: l, f: ep.f, ep: ep, port: ep.bind.ud, local: ep.bind.addr, ps: ep.ps}
	t.sock = s
	l.post(s.start)
	if h := ep.f.testHookUDSockPosted; h != nil {
		h(l)
	}
	return s, nil
}

func (s *udSock) start() {
	if s.closed {
		return
	}
	s.port.attach(s)
}

// listen makes the socket answer requests.
func (s *udSock) listen(backlog int) {
	if s.closed {
		return
	}
	s.listening, s.backlog = true, backlog
	if s.reqs == nil {
		s.reqs = make(map[sidrKey]*sidrReq)
		s.sources = make(map[netip.Addr]*sidrSource)
	}
}

// sweep forgets answered requests whose retransmissions are over.
func (s *udSock) sweep(now time.Time) {
	for e := s.answered.Front(); e != nil; e = s.answered.Front() {
		r := e.Value.(*sidrReq)
		if r.expires.After(now) {
			return
		}
		s.forget(r)
	}
}

// forget drops a request from the table.
func (s *udSock) forget(r *sidrReq) {
	delete(s.reqs, r.key)
	if r.all != nil {
		s.answered.Remove(r.all)
		r.src.answered.Remove(r.mine)
		r.all, r.mine = nil, nil
	}
	if r.src.n--; r.src.n == 0 {
		delete(s.sources, r.src.addr)
	}
}

// evictOldest forgets the oldest answered request of list l, reporting
// false when there is none.
func (s *udSock) evictOldest(l *list.List) bool {
	e := l.Front()
	if e == nil {
		return false
	}
	s.forget(e.Value.(*sidrReq))
	return true
}

// sidrRetryWindow is how long a listener re-sends the REP of an answered
// request to its retransmissions: as long as a requester with this
// fabric's settings keeps retransmitting in all (WithSIDRRetry; 7.75 s by
// default), counted from the answer.
func (f *Fabric) sidrRetryWindow() time.Duration {
	return sidrTotal(f.opts.ud.timeout(), f.opts.ud.retries())
}

// sidrTotal is how long a requester waits in all: timeout·(2^(retries+1)−1).
func sidrTotal(timeout time.Duration, retries int) time.Duration {
	total := time.Duration(0)
	for k := 0; k <= retries && k < 32; k++ {
		total += timeout << k
	}
	return total
}

func (s *udSock) onREQ(m *sidr.Message, d *udDatagram) {
	s.sweep(time.Now())
	key := sidrKey{from: d.from, tid: m.TID}
	if r := s.reqs[key]; r != nil {
		if r.rep != nil {
			_ = udSendFrom(s.port.fd, s.port.fam, r.rep, d.from, r.dst) // the REP was lost: again
		}
		return // a retransmission of a request the user has
	}
	if s.pending >= s.backlog {
		s.f.log.Debug().Stringer("from", d.from).Msg("SIDR backlog full, request dropped")
		return
	}
	host := sourceOf(d.from)
	src := s.sources[host]
	if src != nil && src.n >= sidrMaxPerSource && !s.evictOldest(&src.answered) {
		s.f.log.Debug().Stringer("from", d.from).Msg("SIDR requests of one source over its share, request dropped")
		return
	}
	if len(s.reqs) >= sidrMaxReqs && !s.evictOldest(&s.answered) {
		s.f.log.Debug().Stringer("from", d.from).Msg("SIDR request table full, request dropped")
		return
	}
	dst := d.dst
	if !dst.IsValid() {
		dst = s.local.Addr()
	}
	child, err := s.ep.ud().newChild(s, key, netip.AddrPortFrom(dst, s.local.Port()), d.from)
	if err != nil {
		return
	}
	raw := fabric.RawEvent{Type: fabric.EventConnectRequest, Child: child, QPNum: m.QPN, QKey: m.QKey,
		AH: udAH(d.from.Addr(), udQPPort(m.QPN, d.from.Port()), d.ttl, d.tos)}
	raw.PrivateDataLen = fabric.MaxPrivateDataSIDRREQ // as IB reports it: the whole SIDR REQ field
	copy(raw.PrivateData[:], m.PrivateData)
	if src = s.sources[host]; src == nil { // the eviction may have dropped it
		src = &sidrSource{addr: host}
		s.sources[host] = src
	}
	r := &sidrReq{key: key, src: src, dst: dst, counted: true}
	s.reqs[key] = r
	src.n++
	s.pending++
	if !s.ep.emit(&raw) {
		s.forget(r)
		s.uncount(r)
		child.ud().forgetChild()
	}
}

// uncount takes a request out of the backlog's count: once the user read
// its CONNECT_REQUEST (released), or answered it.
func (s *udSock) uncount(r *sidrReq) {
	if r.counted {
		r.counted = false
		s.pending--
	}
}

// released returns the place of the request named key in the backlog: the
// user has read its CONNECT_REQUEST, and ucma's backlog counts the requests
// queued and not yet read.
func (s *udSock) released(key sidrKey) {
	if r := s.reqs[key]; r != nil {
		s.uncount(r)
	}
}

// answer sends the user's REP for a reported request and remembers it for
// retransmissions. It reports false when the socket can no longer send it
// (closed, or the request forgotten).
func (s *udSock) answer(key sidrKey, rep []byte) bool {
	if s.closed {
		return false
	}
	r := s.reqs[key]
	if r == nil || r.rep != nil {
		return false
	}
	r.rep = rep
	r.expires = time.Now().Add(s.f.sidrRetryWindow())
	r.all = s.answered.PushBack(r)
	r.mine = r.src.answered.PushBack(r)
	s.uncount(r)
	if err := udSendFrom(s.port.fd, s.port.fam, rep, key.from, r.dst); err != nil {
		s.f.log.Debug().Err(err).Stringer("to", key.from).Msg("SIDR REP send")
	}
	return true
}

// connect starts the active side's request.
func (s *udSock) connect(c *sidrConn) {
	if s.closed {
		return
	}
	s.conn = c
	if err := udSendFrom(s.port.fd, s.port.fam, c.req, c.to, s.local.Addr()); err != nil && err != unix.EAGAIN && err != unix.ENOBUFS {
		s.finish(c, fabric.EventUnreachable, -int32(errnoOf(err)), nil)
		return
	}
	s.arm(c)
}

func (s *udSock) arm(c *sidrConn) {
	c.timer = time.AfterFunc(c.wait, func() { s.l.post(func() { s.onTimer(c) }) })
}

func (s *udSock) onTimer(c *sidrConn) {
	if s.closed || c.done || s.conn != c {
		return
	}
	if c.tries >= s.f.opts.ud.retries() {
		s.finish(c, fabric.EventUnreachable, -int32(syscall.ETIMEDOUT), nil)
		return
	}
	c.tries++
	c.wait *= 2
	_ = udSendFrom(s.port.fd, s.port.fam, c.req, c.to, s.local.Addr())
	s.arm(c)
}

// refused ends the active side's request when the destination host says
// nothing listens on the port (ICMP port unreachable): UNREACHABLE with
// IB_SIDR_UNSUPPORTED, as a REP from a CM with no listener for the service.
func (s *udSock) refused(c *sidrConn) {
	if s.closed || c.done || s.conn != c {
		return
	}
	s.finish(c, fabric.EventUnreachable, int32(sidr.StatusUnsupported), nil)
}

// finish reports the outcome of the active side's request.
func (s *udSock) finish(c *sidrConn, t fabric.EventType, status int32, fill func(*fabric.RawEvent)) {
	c.done = true
	if c.timer != nil {
		c.timer.Stop()
	}
	raw := fabric.RawEvent{Type: t, Status: status}
	if fill != nil {
		fill(&raw)
	}
	s.ep.emit(&raw)
}

// onREP handles the REP of the active side's request; the port checked
// that it answers the request, from where the request went.
func (s *udSock) onREP(m *sidr.Message, d *udDatagram) {
	c := s.conn
	pd := func(r *fabric.RawEvent) {
		r.PrivateDataLen = fabric.MaxPrivateDataSIDRREP // as IB reports it
		copy(r.PrivateData[:], m.PrivateData)
	}
	switch {
	case m.Status != sidr.StatusSuccess:
		s.finish(c, fabric.EventUnreachable, int32(m.Status), pd)
	case m.QKey != fabric.UDPQKey:
		s.finish(c, fabric.EventAddrError, -int32(syscall.EINVAL), nil)
	default:
		s.finish(c, fabric.EventEstablished, 0, func(r *fabric.RawEvent) {
			r.QPNum, r.QKey = m.QPN, m.QKey
			r.AH = udAH(c.to.Addr(), udQPPort(m.QPN, c.to.Port()), d.ttl, d.tos)
			pd(r)
		})
	}
}

// close stops the SIDR state: no more answers, no more events. The socket
// stays with the binding, which closes it.
func (s *udSock) close() {
	if s.closed {
		return
	}
	s.closed = true
	if c := s.conn; c != nil && c.timer != nil {
		c.timer.Stop()
	}
	s.reqs, s.sources = nil, nil
	s.answered.Init()
	s.port.detach(s)
	s.l.eng.release(s.l)
}

// newSIDRConn prepares an active request.
func newSIDRConn(f *Fabric, ps fabric.PortSpace, qpn uint32, pd []byte, to netip.AddrPort) (*sidrConn, error) {
	m := sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(ps), TID: rand.Uint64(), QPN: qpn, QKey: fabric.UDPQKey, PrivateData: pd}
	b, err := sidr.Append(nil, &m)
	if err != nil {
		return nil, einval("connect: %v", err)
	}
	return &sidrConn{tid: m.TID, req: b, to: to, wait: f.opts.ud.timeout()}, nil
}
