package soft

import (
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/sidr"
)

// udState is what a UD endpoint holds beyond the common fields; it is
// guarded by the endpoint's mu, except qp, which the loop reads when a group
// datagram arrives.
type udState struct {
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

// listenUDLocked makes a bound UD endpoint answer SIDR requests. ep.mu is
// held.
func (ep *endpoint) listenUDLocked() (*udSock, error) {
	if err := ep.f.ports.listen(ep.bind); err != nil {
		return nil, err
	}
	return ep.udSockLocked()
}

// connectUD sends a SIDR REQ: ESTABLISHED or UNREACHABLE follows.
func (ep *endpoint) connectUD(p *fabric.ConnParam) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed || ep.bind == nil || ep.ud.connecting || ep.ud.parent != nil || !ep.remote.IsValid() {
		return einval("connect: route not resolved")
	}
	qpn := p.QPNum
	if q := ep.ud.qp.Load(); q != nil {
		qpn = q.num
	}
	c, err := newSIDRConn(ep.f, ep.ps, qpn&sidr.MaxQPN, p.PrivateData, ep.remote)
	if err != nil {
		return err
	}
	s, err := ep.udSockLocked()
	if err != nil {
		return err
	}
	ep.ud.connecting = true
	s.l.post(func() { s.connect(c) })
	return nil
}

// newUDChild makes the endpoint of a request arriving on listener socket s.
// Loop only.
func (ep *endpoint) newUDChild(s *udSock, key sidrKey, local, remote netip.AddrPort) (*endpoint, error) {
	ep.mu.Lock()
	src, opt := ep.src, ep.opt
	ep.mu.Unlock()
	dev, _ := ep.f.devs.byLocalAddr(local.Addr())
	child := &endpoint{f: ep.f, ps: ep.ps, qp: ep.qp, src: src, local: local, remote: remote,
		dev: dev, addrResolved: true, routeResolved: true}
	child.opt.tos, child.opt.tosSet = opt.tos, opt.tosSet
	child.ud.parent, child.ud.key = s, key
	if dev != nil {
		child.mtu = dev.mtu
	}
	if !src.adopt(child) {
		return nil, einval("channel closed")
	}
	ep.f.mon.track(child)
	return child, nil
}

// forgetUDChild drops a child nobody was told of. Loop only: it sends
// nothing.
func (ep *endpoint) forgetUDChild() {
	ep.mu.Lock()
	ep.destroyed = true
	ep.ud.answered = true
	src := ep.src
	ep.mu.Unlock()
	src.forget(ep)
	ep.f.mon.untrack(ep)
}

// answerUD sends the REP of a request: through the listener's socket while
// it is open (so retransmitted requests get it again), else from a socket of
// its own on the address the request came to.
func (ep *endpoint) answerUD(status sidr.Status, qpn uint32, pd []byte, uid uint64, accept bool) error {
	ep.mu.Lock()
	if ep.destroyed || ep.ud.parent == nil || ep.ud.answered || (accept && uid == 0) {
		ep.mu.Unlock()
		return einval("no connection request to answer")
	}
	ep.ud.answered = true
	if accept {
		ep.uid = uid
		if q := ep.ud.qp.Load(); q != nil {
			qpn = q.num
		}
	}
	s, key, local, ps := ep.ud.parent, ep.ud.key, ep.local, ep.ps
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
		if err := unix.Bind(fd, sockaddr(src)); err != nil {
			f.log.Debug().Err(err).Stringer("from", src).Stringer("to", to).Msg("SIDR REP not sent: its port is taken")
			return
		}
	}
	_ = udSendFrom(fd, fam, b, to, netip.Addr{})
}

// acceptUD answers the request with a REP and returns: the passive side
// gets no ESTABLISHED.
func (ep *endpoint) acceptUD(uid uint64, p *fabric.ConnParam) error {
	return ep.answerUD(sidr.StatusSuccess, p.QPNum, p.PrivateData, uid, true)
}

// rejectUD answers the request with a rejecting REP: the requester gets
// UNREACHABLE with status 2 (IB_SIDR_REJECT).
func (ep *endpoint) rejectUD(pd []byte) error {
	return ep.answerUD(sidr.StatusReject, 0, pd, 0, false)
}

// destroyUD releases what a UD endpoint holds: a request still unanswered is
// rejected (as the IB CM does when its id is destroyed), the rdma_cm socket
// closed, groups left and the QP destroyed. Not on the loop goroutine.
func (ep *endpoint) destroyUD() {
	ep.mu.Lock()
	var reject *sidr.Message
	parent, key, local := ep.ud.parent, ep.ud.key, ep.local
	if parent != nil && !ep.ud.answered {
		ep.ud.answered = true
		reject = &sidr.Message{Type: sidr.TypeREP, PortSpace: uint16(ep.ps), TID: key.tid, Status: sidr.StatusReject, QKey: fabric.UDPQKey}
	}
	s := ep.ud.sock
	ep.ud.sock = nil
	joins := ep.ud.joins
	ep.ud.joins = nil
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
	if q := ep.ud.qp.Load(); q != nil {
		_ = q.Destroy()
	}
}
