package soft

import (
	"math/rand/v2"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/sidr"
	"github.com/cmrt/cmrt/poll"
)

// UD connection set-up (SIDR over UDP, see package internal/sidr for the
// bytes).
//
// A UD id's rdma_cm port is a UDP port: the socket its binding holds. When
// the id listens or connects, a udSock takes that socket over and a loop
// polls it.
//
//   - Active side: Connect sends a REQ with a random transaction id to the
//     resolved destination and waits DefaultSIDRTimeout (WithSIDRRetry),
//     retransmitting with a doubled wait each time. A REP with the tid ends
//     it: status 0 is ESTABLISHED with the peer's UD parameters, a non-zero
//     status UNREACHABLE with that status (1 after rdma_reject), a Q_Key
//     other than RDMA_UDP_QKEY ADDR_ERROR (-EINVAL), as cma_sidr_rep_handler.
//     No REP after the last retransmission is UNREACHABLE -ETIMEDOUT.
//   - Passive side: a listening socket turns each new REQ into a
//     CONNECT_REQUEST with a new endpoint. Requests are remembered by
//     (source, tid): a retransmission of a request still waiting for the
//     user is ignored, one already answered gets the same REP again (for
//     sidrAnsweredTTL), so duplicates never make a second CONNECT_REQUEST.
//     At most backlog requests wait for the user; more are dropped (the
//     requester retransmits). A REQ for another port space, or on a socket
//     that does not listen, is answered with status 2 (unsupported).
//   - Malformed datagrams are dropped with a debug log; they touch no id.

// sidrMaxReqs bounds the requests a listener remembers (waiting and
// answered); when full, new requests are dropped.
const sidrMaxReqs = 4096

// sidrKey names a request: where it came from and its transaction id.
type sidrKey struct {
	from netip.AddrPort
	tid  uint64
}

// sidrReq is a request a listener has reported.
type sidrReq struct {
	dst     netip.Addr // where the REQ was addressed: the REP's source
	rep     []byte     // the REP, once the user answered
	expires time.Time
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

// udSock is the rdma_cm socket of a UD id. Fields below fd belong to the
// loop goroutine.
type udSock struct {
	l     *loop
	f     *Fabric
	ep    *endpoint
	fd    int
	fam   int
	local netip.AddrPort

	gen       uint32
	closed    bool
	listening bool
	ps        id.PortSpace
	backlog   int
	pending   int
	reqs      map[sidrKey]*sidrReq
	answered  []sidrKey // answered requests, oldest first (they expire in order)
	conn      *sidrConn
	buf, oob  []byte
}

// udSockLocked returns the endpoint's rdma_cm socket, taking it over from
// the binding on first use. ep.mu is held.
func (ep *endpoint) udSockLocked() (*udSock, error) {
	if s := ep.ud.sock; s != nil {
		return s, nil
	}
	if ep.bind == nil || ep.bind.fd < 0 {
		return nil, einval("UD id has no bound socket")
	}
	l, err := ep.f.eng.acquire()
	if err != nil {
		return nil, err
	}
	fd := ep.bind.takeFD()
	s := &udSock{l: l, f: ep.f, ep: ep, fd: fd, fam: udSocketFamily(fd), local: ep.bind.addr, ps: ep.ps}
	ep.ud.sock = s
	l.post(s.start)
	return s, nil
}

func (s *udSock) start() {
	if s.closed {
		return
	}
	udRecvInfo(s.fd, s.fam)
	udNoForeignGroups(s.fd, s.fam)
	gen, err := s.l.register(s.fd, poll.In, s)
	if err != nil {
		s.f.log.Error().Err(err).Int("fd", s.fd).Msg("soft: register UD socket")
		return
	}
	s.gen = gen
}

// listen makes the socket answer requests.
func (s *udSock) listen(backlog int) {
	s.listening, s.backlog = true, backlog
	if s.reqs == nil {
		s.reqs = make(map[sidrKey]*sidrReq)
	}
}

// onEvents implements pollable.
func (s *udSock) onEvents(uint32) {
	if s.buf == nil {
		s.buf = make([]byte, udMaxDatagram+1)
		s.oob = make([]byte, udOOBLen)
	}
	var d udDatagram
	for k := 0; k < 64 && !s.closed; k++ {
		err := udRecv(s.fd, s.buf, s.oob, &d)
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return
		default:
			s.f.log.Debug().Err(err).Int("fd", s.fd).Msg("soft: UD socket receive")
			continue
		}
		s.received(&d)
	}
}

func (s *udSock) received(d *udDatagram) {
	var m sidr.Message
	err := sidr.Parse(d.b, &m)
	if err != nil || d.trunc {
		s.f.log.Debug().Err(err).Stringer("from", d.from).Int("len", len(d.b)).Msg("soft: malformed SIDR datagram dropped")
		return
	}
	if m.Type == sidr.TypeREQ {
		s.onREQ(&m, d)
	} else {
		s.onREP(&m, d)
	}
}

// reply sends a REP answering m.
func (s *udSock) reply(m *sidr.Message, d *udDatagram, status sidr.Status) {
	b, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREP, PortSpace: m.PortSpace, TID: m.TID, Status: status})
	_ = udSendFrom(s.fd, s.fam, b, d.from, d.dst)
}

// sweep forgets answered requests whose retransmissions are over.
func (s *udSock) sweep(now time.Time) {
	n := 0
	for _, k := range s.answered {
		r := s.reqs[k]
		if r != nil && r.expires.After(now) {
			break
		}
		delete(s.reqs, k)
		n++
	}
	s.answered = s.answered[n:]
}

// sidrAnsweredTTL is how long a listener re-sends the REP of an answered
// request to its retransmissions: longer than any requester keeps trying.
func (f *Fabric) sidrAnsweredTTL() time.Duration {
	return max(2*sidrTotal(f.opts.ud.timeout(), f.opts.ud.retries()), 30*time.Second)
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
	if !s.listening || m.PortSpace != uint16(s.ps) {
		s.reply(m, d, sidr.StatusUnsupported)
		return
	}
	s.sweep(time.Now())
	key := sidrKey{from: d.from, tid: m.TID}
	if r := s.reqs[key]; r != nil {
		if r.rep != nil {
			_ = udSendFrom(s.fd, s.fam, r.rep, d.from, r.dst) // the REP was lost: again
		}
		return // a retransmission of a request the user has
	}
	if s.pending >= s.backlog || len(s.reqs) >= sidrMaxReqs {
		s.f.log.Debug().Stringer("from", d.from).Msg("soft: SIDR backlog full, request dropped")
		return
	}
	dst := d.dst
	if !dst.IsValid() {
		dst = s.local.Addr()
	}
	child, err := s.ep.newUDChild(s, key, netip.AddrPortFrom(dst, s.local.Port()), d.from)
	if err != nil {
		return
	}
	raw := id.RawEvent{Type: id.EventConnectRequest, Child: child, QPNum: m.QPN, QKey: m.QKey,
		AH: udAH(d.from.Addr(), udQPPort(m.QPN, d.from.Port()), d.ttl, d.tos)}
	raw.PrivateDataLen = id.MaxPrivateDataSIDRREQ // as IB reports it: the whole SIDR REQ field
	copy(raw.PrivateData[:], m.PrivateData)
	s.reqs[key] = &sidrReq{dst: dst}
	s.pending++
	if !s.ep.emit(&raw) {
		delete(s.reqs, key)
		s.pending--
		child.forgetUDChild()
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
	r.expires = time.Now().Add(s.f.sidrAnsweredTTL())
	s.answered = append(s.answered, key)
	s.pending--
	if err := udSendFrom(s.fd, s.fam, rep, key.from, r.dst); err != nil {
		s.f.log.Debug().Err(err).Stringer("to", key.from).Msg("soft: SIDR REP send")
	}
	return true
}

// connect starts the active side's request.
func (s *udSock) connect(c *sidrConn) {
	if s.closed {
		return
	}
	s.conn = c
	if err := udSendFrom(s.fd, s.fam, c.req, c.to, netip.Addr{}); err != nil && err != unix.EAGAIN && err != unix.ENOBUFS {
		s.finish(c, id.EventUnreachable, -int32(errnoOf(err)), nil)
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
		s.finish(c, id.EventUnreachable, -int32(syscall.ETIMEDOUT), nil)
		return
	}
	c.tries++
	c.wait *= 2
	_ = udSendFrom(s.fd, s.fam, c.req, c.to, netip.Addr{})
	s.arm(c)
}

// finish reports the outcome of the active side's request.
func (s *udSock) finish(c *sidrConn, t id.EventType, status int32, fill func(*id.RawEvent)) {
	c.done = true
	if c.timer != nil {
		c.timer.Stop()
	}
	raw := id.RawEvent{Type: t, Status: status}
	if fill != nil {
		fill(&raw)
	}
	s.ep.emit(&raw)
}

func (s *udSock) onREP(m *sidr.Message, d *udDatagram) {
	c := s.conn
	if c == nil || c.done || c.tid != m.TID {
		s.f.log.Debug().Stringer("from", d.from).Msg("soft: unexpected SIDR REP dropped")
		return
	}
	pd := func(r *id.RawEvent) {
		r.PrivateDataLen = id.MaxPrivateDataSIDRREP // as IB reports it
		copy(r.PrivateData[:], m.PrivateData)
	}
	switch {
	case m.Status != sidr.StatusSuccess:
		s.finish(c, id.EventUnreachable, int32(m.Status), pd)
	case m.QKey != id.UDPQKey:
		s.finish(c, id.EventAddrError, -int32(syscall.EINVAL), nil)
	default:
		s.finish(c, id.EventEstablished, 0, func(r *id.RawEvent) {
			r.QPNum, r.QKey = m.QPN, m.QKey
			r.AH = udAH(c.to.Addr(), udQPPort(m.QPN, c.to.Port()), d.ttl, d.tos)
			pd(r)
		})
	}
}

// close stops the socket: no more answers, no more events.
func (s *udSock) close() {
	if s.closed {
		return
	}
	s.closed = true
	if c := s.conn; c != nil && c.timer != nil {
		c.timer.Stop()
	}
	s.reqs, s.answered = nil, nil
	s.l.unregister(s.fd)
	_ = unix.Close(s.fd)
	s.fd = -1
	s.l.eng.release(s.l)
}

// newSIDRConn prepares an active request.
func newSIDRConn(f *Fabric, ps id.PortSpace, qpn uint32, pd []byte, to netip.AddrPort) (*sidrConn, error) {
	m := sidr.Message{Type: sidr.TypeREQ, PortSpace: uint16(ps), TID: rand.Uint64(), QPN: qpn, QKey: id.UDPQKey, PrivateData: pd}
	b, err := sidr.Append(nil, &m)
	if err != nil {
		return nil, einval("connect: %v", err)
	}
	return &sidrConn{tid: m.TID, req: b, to: to, wait: f.opts.ud.timeout()}, nil
}
