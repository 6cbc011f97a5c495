package soft

import (
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/sidr"
)

// udTransport is the UD side of an endpoint: its rdma_cm port's SIDR state
// (ud_sidr.go), its datagram QP (ud_qp.go) and its multicast groups
// (ud_mcast.go). It is guarded by the endpoint's mu, except qp, which the
// loop reads when a group datagram arrives.
type udTransport struct {
	ep         *endpoint
	sock       *udSock // the rdma_cm socket, once the id listens or connects
	connecting bool
	qp         atomic.Pointer[udQP]
	joins      map[netip.Addr]*mcJoin

	// An endpoint born from a request: the listener's socket and the
	// request's key, and whether the user answered it.
	parent   *udSock
	key      sidrKey
	answered bool
}

func (t *udTransport) proto() proto { return protoUDP }

// connectedLocked implements transport: UD ids have no connection.
func (t *udTransport) connectedLocked() bool { return false }

// appendUIDsLocked implements transport: the uids of the endpoint's
// multicast joins. ep.mu is held.
func (t *udTransport) appendUIDsLocked(uids []uint64) []uint64 {
	for _, j := range t.joins {
		uids = append(uids, j.uid)
	}
	return uids
}

// disconnect implements transport: a UD id is never connected.
// disconnect implements transport. A UD id that connected or was born
// from a request has a CM id in the kernel, with no connection to end:
// rdma_disconnect sends no DREQ (nor DREP) and returns 0, reporting
// nothing; any other UD id is not connected.
func (t *udTransport) disconnect() error {
	t.ep.mu.Lock()
	cm := t.connecting || t.parent != nil
	t.ep.mu.Unlock()
	if cm {
		return nil
	}
	return einval("disconnect: not connected")
}

// requestRead implements transport: the listener's count of unread
// requests drops.
func (t *udTransport) requestRead() {
	t.ep.mu.Lock()
	us, key := t.parent, t.key
	t.ep.mu.Unlock()
	if us != nil {
		us.l.post(func() { us.released(key) })
	}
}

// listenLocked implements transport: a bound UD endpoint answers SIDR
// requests. ep.mu is held.
func (t *udTransport) listenLocked(backlog int) error {
	ep := t.ep
	if err := ep.f.ports.listen(ep.bind); err != nil {
		return err
	}
	s, err := t.sockLocked()
	if err != nil {
		return err
	}
	// The socket already receives: a request sent once Listen has
	// returned must find it listening, so the loop applies it before
	// Listen returns (not in a later turn, after that request), outside
	// ep.mu (listened is set first, for a Destroy meanwhile).
	ep.listened = true
	ep.mu.Unlock()
	s.l.call(func() { s.listen(backlog) })
	ep.mu.Lock()
	return nil
}

// connect implements transport: a SIDR REQ, then ESTABLISHED or
// UNREACHABLE.
func (t *udTransport) connect(p *fabric.ConnParam) error {
	ep := t.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed || ep.bind == nil || t.connecting || t.parent != nil || !ep.remote.IsValid() {
		return einval("connect: route not resolved")
	}
	qpn := p.QPNum
	if q := t.qp.Load(); q != nil {
		qpn = q.num
	}
	c, err := newSIDRConn(ep.f, ep.ps, qpn&sidr.MaxQPN, p.PrivateData, ep.remote)
	if err != nil {
		return err
	}
	s, err := t.sockLocked()
	if err != nil {
		return err
	}
	t.connecting = true
	s.l.post(func() { s.connect(c) })
	return nil
}

// newUDChild makes the endpoint of a request arriving on listener socket s.
// Loop only.
func (t *udTransport) newChild(s *udSock, key sidrKey, local, remote netip.AddrPort) (*endpoint, error) {
	ep := t.ep
	ep.mu.Lock()
	src, opt := ep.src, ep.opt
	ep.mu.Unlock()
	dev, _ := ep.f.devs.byLocalAddr(local.Addr())
	child := newEndpoint(ep.f, ep.ps, fabric.UD)
	child.src, child.local, child.remote, child.dev = src, local, remote, dev
	child.addrResolved, child.routeResolved = true, true
	child.opt.tos, child.opt.tosSet = opt.tos, opt.tosSet
	ct := child.ud()
	ct.parent, ct.key = s, key
	if dev != nil {
		child.mtu = dev.mtu
	}
	if !src.adopt(child) {
		return nil, einval("channel closed")
	}
	ep.f.mon.track(child)
	return child, nil
}

// forgetChild drops a child nobody was told of. Loop only: it sends
// nothing.
func (t *udTransport) forgetChild() {
	ep := t.ep
	ep.mu.Lock()
	ep.destroyed = true
	t.answered = true
	src := ep.src
	ep.mu.Unlock()
	src.forget(ep)
	ep.f.mon.untrack(ep)
}

// answerUD sends the REP of a request: through the listener's socket while
// it is open (so retransmitted requests get it again), else from a socket of
// its own on the address the request came to.
func (t *udTransport) answer(status sidr.Status, qpn uint32, pd []byte, uid uint64, accept bool) error {
	ep := t.ep
	ep.mu.Lock()
	if ep.destroyed || t.parent == nil || t.answered || (accept && uid == 0) {
		ep.mu.Unlock()
		return einval("no connection request to answer")
	}
	t.answered = true
	if accept {
		ep.uid = uid
		if q := t.qp.Load(); q != nil {
			qpn = q.num
		}
	}
	s, key, local, ps := t.parent, t.key, ep.local, ep.ps
	ep.mu.Unlock()
	return sendREP(s, key, local, &sidr.Message{Type: sidr.TypeREP, PortSpace: uint16(ps), TID: key.tid,
		Status: status, QPN: qpn & sidr.MaxQPN, QKey: fabric.UDPQKey, PrivateData: pd})
}

func sendREP(s *udSock, key sidrKey, local netip.AddrPort, m *sidr.Message) error {
	rep, err := sidr.Append(nil, m)
	if err != nil {
		return einval("answer: %v", err)
	}
	sent := false
	s.l.call(func() { sent = s.answer(key, rep) })
	if !sent {
		udSendOnce(s.f, local, key.from, rep)
	}
	return nil
}

// udSendOnce sends one datagram from a socket of its own bound to src: a
// REP whose listener is gone must still come from the address and port the
// request went to, or the requester ignores it. When the port is taken
// again meanwhile nothing is sent (the requester sees a lost REP).
func udSendOnce(f *Fabric, src, to netip.AddrPort, b []byte) {
	fam := family(to.Addr())
	fd, err := newSocket(fam, unix.SOCK_DGRAM)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if src.Addr().IsValid() && family(src.Addr()) == fam {
		if err := bindTo(fd, src); err != nil {
			f.log.Debug().Err(err).Stringer("from", src).Stringer("to", to).Msg("SIDR REP not sent: its port is taken")
			return
		}
	}
	_ = udSendFrom(fd, fam, b, to, netip.Addr{})
}

// accept implements transport: a REP, and it returns; the passive side
// gets no ESTABLISHED.
func (t *udTransport) accept(uid uint64, p *fabric.ConnParam) error {
	return t.answer(sidr.StatusSuccess, p.QPNum, p.PrivateData, uid, true)
}

// reject implements transport: a rejecting REP; the requester gets
// UNREACHABLE with status 2 (IB_SIDR_REJECT).
func (t *udTransport) reject(pd []byte) error {
	return t.answer(sidr.StatusReject, 0, append([]byte(nil), pd...), 0, false)
}

// destroy implements transport: a request still unanswered is rejected
// (as the IB CM does when its id is destroyed), the rdma_cm socket closed,
// groups left and the QP destroyed. Not on the loop goroutine.
func (t *udTransport) destroy() {
	ep := t.ep
	ep.mu.Lock()
	var reject *sidr.Message
	parent, key, local := t.parent, t.key, ep.local
	if parent != nil && !t.answered {
		t.answered = true
		reject = &sidr.Message{Type: sidr.TypeREP, PortSpace: uint16(ep.ps), TID: key.tid, Status: sidr.StatusReject, QKey: fabric.UDPQKey}
	}
	s := t.sock
	t.sock = nil
	joins := t.joins
	t.joins = nil
	src := ep.src
	ep.mu.Unlock()
	if reject != nil {
		_ = sendREP(parent, key, local, reject)
	}
	if s != nil {
		s.l.call(s.close)
	}
	for _, j := range joins {
		j.leave()
		src.q.Extract(func(r *fabric.RawEvent) bool { return r.UID == j.uid })
	}
	if q := t.qp.Load(); q != nil {
		_ = q.Destroy()
	}
}
