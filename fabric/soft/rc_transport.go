package soft

import (
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
)

// rcTransport is the RC side of an endpoint: a TCP connection whose set-up
// is the iWARP MPA exchange (rc_conn.go), or a listening socket
// (rc_listener.go), and the endpoint's queue pair (rc_qp.go). Its fields
// are guarded by the endpoint's mu.
type rcTransport struct {
	ep   *endpoint
	conn *conn
	lis  *listener
	qp   *rcQP // created before or after the connection
}

func (t *rcTransport) proto() proto { return protoTCP }

func (t *rcTransport) connectedLocked() bool { return t.conn != nil }

func (t *rcTransport) appendUIDsLocked(uids []uint64) []uint64 { return uids }

// listenLocked implements transport: the bound socket listens and a loop
// accepts from it. ep.mu is held.
func (t *rcTransport) listenLocked(backlog int) error {
	ep := t.ep
	if t.lis != nil {
		return einval("listen: listening or destroyed")
	}
	if err := ep.f.ports.listen(ep.bind); err != nil {
		return err
	}
	fd := ep.bind.fd
	if fd < 0 {
		return einval("listen: socket in use")
	}
	// The kernel's accept queue only holds connections until the loop
	// takes them into the listener's pool (rc_listener.go): size it as the
	// pool, so that a burst of connects loses no SYN.
	_, queue := ep.f.halfOpenLimits(backlog)
	if err := unix.Listen(fd, queue); err != nil {
		return fmt.Errorf("soft: listen %s: %w", ep.local, err)
	}
	l, err := ep.f.eng.acquire()
	if err != nil {
		return err
	}
	ep.bind.takeFD()
	// Set here once rather than on every accepted socket (Linux copies it).
	nodelay := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1) == nil
	lis := &listener{l: l, f: ep.f, ep: ep, fd: fd, backlog: backlog, nodelay: nodelay}
	t.lis = lis
	l.post(lis.start)
	return nil
}

// checkCaps applies ucma_valid_param: read depths above the device cap
// (0xFF aside) are EINVAL.
func checkCaps(p *fabric.ConnParam) error {
	for _, v := range []uint8{p.ResponderResources, p.InitiatorDepth} {
		if v != 0xFF && v > maxRdAtom {
			return einval("read depth %d over the device cap %d", v, maxRdAtom)
		}
	}
	return nil
}

// connect implements transport: TCP connect, then the MPA Request.
func (t *rcTransport) connect(p *fabric.ConnParam) error {
	ep := t.ep
	if err := checkCaps(p); err != nil {
		return err
	}
	ep.mu.Lock()
	if ep.destroyed || ep.bind == nil || t.conn != nil || !ep.remote.IsValid() {
		ep.mu.Unlock()
		return einval("connect: route not resolved")
	}
	fd := ep.bind.fd
	if fd < 0 {
		ep.mu.Unlock()
		return einval("connect: socket in use")
	}
	l, err := ep.f.eng.acquire()
	if err != nil {
		ep.mu.Unlock()
		return err
	}
	ep.bind.takeFD()
	param := *p
	param.PrivateData = append([]byte(nil), p.PrivateData...)
	c := &conn{l: l, fd: fd, state: csConnecting, active: true, ep: ep, param: param}
	remote := ep.remote
	ep.mu.Unlock()

	// The id's calls are serialized: no other Connect, nor Destroy, runs
	// until this returns, and c stays private until it is published.
	cerr := t.dial(c, remote)
	ep.mu.Lock()
	if cerr == unix.EADDRNOTAVAIL {
		// The connection from this port to the peer exists already (in
		// TIME_WAIT, most often) and the id's port was bound explicitly:
		// fail the call as siw's connect does, leaving the id bound and
		// able to try again. The socket goes back to the binding.
		local := ep.local
		ep.bind.fd = c.fd
		ep.mu.Unlock()
		ep.f.eng.release(l)
		return fmt.Errorf("soft: connect from %s to %s: the connection exists: %w", local, remote, syscall.EADDRNOTAVAIL)
	}
	t.conn, ep.copyConn = c, c
	local := ep.local
	ep.mu.Unlock()
	if cerr == unix.EINPROGRESS {
		cerr = nil
	}
	var werr syscall.Errno
	if cerr == nil {
		c.mu.Lock()
		werr = c.requestEarly(local, remote)
		c.mu.Unlock()
	}
	l.post(func() { c.taskStartActive(cerr, werr) })
	return nil
}

// maxRedials bounds how many other ports dial tries.
const maxRedials = 8

// dial starts c's TCP connection. When connect(2) says EADDRNOTAVAIL (a
// connection from the same port to the same peer exists, in TIME_WAIT most
// often) and the fabric chose the id's port, the id moves to another port
// and tries again, as the kernel's autobind would have skipped that port;
// an id bound to an explicit port gets the error. c is not yet shared.
func (t *rcTransport) dial(c *conn, remote netip.AddrPort) error {
	ep := t.ep
	for tries := 0; ; tries++ {
		ep.applySockopts(c.fd, c.param.RetryCount, false)
		err := connectTo(c.fd, remote)
		if err != unix.EADDRNOTAVAIL || tries == maxRedials {
			return err
		}
		ep.mu.Lock()
		b := ep.bind
		if !b.auto {
			ep.mu.Unlock()
			return err
		}
		nb, merr := ep.f.ports.move(b)
		if merr != nil {
			ep.mu.Unlock()
			return err
		}
		_ = unix.Close(c.fd)
		c.fd = nb.takeFD()
		ep.bind = nb
		ep.local = netip.AddrPortFrom(ep.local.Addr(), nb.addr.Port())
		ep.mu.Unlock()
		ep.f.log.Debug().Uint16("from", b.addr.Port()).Uint16("to", nb.addr.Port()).Stringer("peer", remote).Msg("connection exists: moved to another port")
	}
}

// accept implements transport: the MPA Reply, on the connection's loop.
func (t *rcTransport) accept(uid uint64, p *fabric.ConnParam) error {
	ep := t.ep
	if err := checkCaps(p); err != nil {
		return err
	}
	ep.mu.Lock()
	c := t.conn
	if ep.destroyed || c == nil || uid == 0 {
		ep.mu.Unlock()
		return einval("accept: no connection request")
	}
	ep.uid = uid
	ep.mu.Unlock()
	c.mu.Lock()
	if c.state == csReqRecv {
		ep.applySockopts(c.fd, 7, c.lis != nil && c.lis.nodelay)
	}
	done, err := c.acceptDirect(p)
	c.mu.Unlock()
	if done {
		if err != nil {
			return fmt.Errorf("soft: accept: connection request gone: %w", err)
		}
		return nil
	}
	param := *p
	param.PrivateData = append([]byte(nil), p.PrivateData...)
	c.l.call(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.state == csReqRecv {
			ep.applySockopts(c.fd, 7, c.lis != nil && c.lis.nodelay)
		}
		err = c.accept(&param)
	})
	if err != nil {
		return fmt.Errorf("soft: accept: connection request gone: %w", err)
	}
	return nil
}

// reject implements transport: a Reject Reply, and the connection closes.
func (t *rcTransport) reject(pd []byte) error {
	ep := t.ep
	ep.mu.Lock()
	c := t.conn
	ep.mu.Unlock()
	if c == nil {
		return einval("reject: no connection request")
	}
	pd = append([]byte(nil), pd...)
	var err error
	c.l.call(func() {
		c.mu.Lock()
		err = c.reject(pd)
		c.mu.Unlock()
	})
	if err != nil {
		return fmt.Errorf("soft: reject: connection request gone: %w", err)
	}
	return nil
}

// disconnect implements transport: DISCONNECTED at once, as iWARP reports
// it, and an orderly close on the loop.
func (t *rcTransport) disconnect() error {
	ep := t.ep
	ep.mu.Lock()
	c := t.conn
	ep.mu.Unlock()
	if c == nil {
		return einval("disconnect: not connected")
	}
	// There is no connection to end while a request waits for its answer
	// or once an attempt ended: the kernel's rdma_disconnect returns 0 and
	// reports nothing, and the request can still be answered.
	c.mu.Lock() // guards state; no trip to the loop
	up := c.state == csRTS || c.state == csClosing
	c.mu.Unlock()
	if !up {
		return nil
	}
	ep.mu.Lock()
	if !ep.discReported {
		ep.discReported = true
		r := fabric.RawEvent{Type: fabric.EventDisconnected}
		ep.emitLocked(&r)
	}
	ep.mu.Unlock()
	c.mu.Lock()
	if c.state == csRTS {
		// The FIN (after the queued bytes) needs no trip to the loop.
		c.finishClose()
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	c.l.post(c.taskDisconnect)
	return nil
}

// requestRead implements transport: the listener's count of unread
// requests drops, on the reader's goroutine (no trip to the loop).
func (t *rcTransport) requestRead() {
	t.ep.mu.Lock()
	c := t.conn
	t.ep.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		c.uncount()
		c.mu.Unlock()
	}
}

// join and leave implement transport: RC ids have no multicast.
func (t *rcTransport) join(uint64, netip.Addr, bool) error {
	return fmt.Errorf("soft: multicast: %w", syscall.ENOSYS)
}

func (t *rcTransport) leave(netip.Addr) error {
	return fmt.Errorf("soft: multicast: %w", syscall.ENOSYS)
}

// destroy implements transport: the listening socket is closed before it
// returns; the connection is handed to its loop, which rejects a pending
// request, drains what the peer sent (so the close is a FIN) and closes it.
func (t *rcTransport) destroy() {
	ep := t.ep
	ep.mu.Lock()
	c, lis := t.conn, t.lis
	t.conn, t.lis = nil, nil
	ep.mu.Unlock()
	if c != nil {
		// The loop closes it right after; Destroy does not wait for that
		// (Endpoint.Destroy fences the copies to the id's memory).
		c.l.post(c.taskDestroy)
	}
	if lis != nil {
		lis.l.call(lis.close)
	}
}

// newChild makes the endpoint of a connection request arriving on ep from
// remote. The connection's local address is the listener's when it listens
// on one address (a wildcard or a zoned address asks the socket).
func (t *rcTransport) newChild(c *conn, remote netip.AddrPort) (*endpoint, error) {
	ep := t.ep
	ep.mu.Lock()
	src, opt, local := ep.src, ep.opt, ep.local
	ep.mu.Unlock()
	if a := local.Addr(); !a.IsValid() || a.IsUnspecified() || a.Zone() != "" || local.Port() == 0 {
		local = localAddr(c.fd)
	}
	if !remote.IsValid() {
		remote = peerAddr(c.fd)
	}
	dev, _ := ep.f.devs.byLocalAddr(local.Addr())
	child := newEndpoint(ep.f, ep.ps, fabric.RC)
	child.src, child.local, child.remote, child.dev = src, local, remote, dev
	child.addrResolved, child.routeResolved = true, true
	child.rc().conn = c
	child.copyConn = c
	child.opt.tos, child.opt.tosSet, child.opt.ack, child.opt.ackOn = opt.tos, opt.tosSet, opt.ack, opt.ackOn
	if dev != nil {
		child.mtu = dev.mtu
	}
	if !src.adopt(child) {
		return nil, einval("channel closed")
	}
	ep.f.mon.track(child)
	return child, nil
}

// destroyLocal forgets an endpoint whose connection the loop closes itself.
func (t *rcTransport) destroyLocal() {
	ep := t.ep
	ep.mu.Lock()
	ep.destroyed, t.conn = true, nil
	src := ep.src
	ep.mu.Unlock()
	src.forget(ep)
	ep.f.mon.untrack(ep)
}
