package soft

import (
	"container/list"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
	"github.com/cmrt/cmrt/internal/ring"
	"github.com/cmrt/cmrt/poll"
)

// connState is where a TCP connection is in the iWARP connection set-up.
type connState uint8

const (
	csConnecting connState = iota // active: TCP connect in progress
	csReqSent                     // active: MPA Request sent, waiting for the Reply
	csWaitReq                     // passive: TCP accepted, waiting for the MPA Request
	csReqRecv                     // passive: CONNECT_REQUEST reported, waiting for accept/reject
	csRTS                         // MPA done: connected
	csClosing                     // our FIN is sent or queued; draining until the peer's
	csClosed
)

// maxHandshake bounds what a peer may send before the MPA exchange is done.
const maxHandshake = iwarp.MPAHeaderLen + iwarp.MaxPrivateData

// hsScratchLen is the size of a loop's scratch buffer for MPA frames
// (loop.hs): the largest frame, with room for FPDUs that come right
// behind a Reply.
const hsScratchLen = 2 * maxHandshake

// conn is one TCP connection of an RC id. Its fields, and those of its
// data path, are guarded by mu: the loop takes it whenever it runs the
// connection's code (its readiness, its timers, the tasks other goroutines
// post for it), and a goroutine posting a send takes it to write on the
// socket itself (rcPath.post), as does a goroutine waiting on the QP's
// completion queues to read it (rc_rxwait.go). Closing the socket, and
// everything that needs the loop's epoll set, happens on the loop only.
//
// Every connection of a server holds one, so its fields are packed (the
// flags together) and hold nothing only the set-up needs once it is done:
// the MPA Request's private data is copied into its CONNECT_REQUEST event,
// not kept (TestConnSize).
type conn struct {
	mu      sync.Mutex
	l       *loop // its fabric is l.eng.f (fab)
	fd      int
	gen     uint32
	state   connState
	active  bool
	counts  bool // passive: counted in lis.pending
	out     bool // EPOLLOUT armed
	closeOK bool // close once wbuf drains (after our FIN)
	crc     bool
	rts     bool // entered RTS: dp, if nil, is made on demand (path)
	gone    bool // the id is destroyed, its data path closed: the socket lingers (destroy)
	ird     uint16
	ord     uint16
	ep      *endpoint // nil on the passive side until the request arrives
	lis     *listener // passive: the listener that accepted it

	// passive: the initiator's address (accept4's), and, until the MPA
	// Request comes, the listener's pool
	peer             netip.AddrPort
	inPool, inSource *list.Element

	rbuf []byte // handshake bytes
	wbuf []byte // bytes the socket did not take yet
	// tidx is the index + 1 of the connection's own timer in its loop's
	// deadline heap (0: none; pathTimers), guarded by the heap's lock, not
	// mu. tgen is that timer's generation: every arm and every stop moves
	// it, and it is odd while the timer is armed (until it fires or is
	// stopped), so that an entry due before a stop or a new arm does
	// nothing (fireTimer).
	tidx int32
	tgen uint32

	param fabric.ConnParam // active: what was asked for
	req   iwarp.MPAFrame   // the MPA Request, its private data dropped once reported

	// dp is the RC data path (rc_path.go), made as the connection enters
	// RTS. An idle one, with no QP and nothing left of the start (dropIdle),
	// is dropped and made again by what needs it (path): an idle
	// connection's path was most of its memory.
	dp *rcPath
	// rxw is the direct reader of a goroutine waiting on the QP's
	// completion queues (rc_rxwait.go), made by the first such wait.
	rxw *rxWait
}

// fab is the fabric c belongs to.
func (c *conn) fab() *Fabric { return c.l.eng.f }

// armTimer (re)starts the connection's timer; on expiry onTimeout runs on
// the loop if the connection is still the same registration.
func (c *conn) armTimer(d time.Duration) {
	c.tgen = (c.tgen | 1) + 2 // odd: armed, and not the generation of any earlier arm
	c.l.pt.addConn(c, monoNow()+int64(d), c.tgen)
}

// stopTimer stops the connection's timer: a fire already taken from the
// heap finds its generation gone. c.mu is held.
func (c *conn) stopTimer() {
	if c.tgen&1 == 0 {
		return
	}
	c.tgen++
	c.l.pt.removeConn(c)
}

// fireTimer runs onTimeout for the arm of generation gen, on the loop,
// unless the timer was stopped or armed again since, or the connection
// closed.
func (c *conn) fireTimer(gen uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tgen != gen || c.state == csClosed {
		return
	}
	c.tgen++ // fired: no longer armed
	if connTimerHook != nil && !connTimerHook(c) {
		return
	}
	c.onTimeout()
}

// connTimerHook, set by tests only, sees each connection timer that fires
// and acts, before onTimeout, which runs only if it returns true (a
// test's connection may have no socket to close).
var connTimerHook func(c *conn) bool

// startActive registers a connecting socket. connectErr is what connect(2)
// returned, if it failed at once; writeErr what the write of an early MPA
// Request (requestEarly) failed with. Until the Request is sent the socket
// is polled for writable (TCP up).
func (c *conn) startActive(connectErr error, writeErr syscall.Errno) {
	ev := uint32(poll.In | poll.RDHup)
	out := c.state == csConnecting || len(c.wbuf) > 0
	if out {
		ev |= poll.Out
	}
	gen, err := c.l.register(c.fd, ev, c)
	if err != nil {
		c.failConnect(errnoOf(err))
		return
	}
	c.gen, c.out = gen, out
	c.armTimer(c.ep.connectTimeout(&c.param))
	switch {
	case connectErr != nil:
		c.failConnect(errnoOf(connectErr))
	case writeErr != 0:
		c.peerGone(writeErr)
	}
}

// requestEarly sends the MPA Request on the connecting goroutine, before
// the loop has the socket, when TCP is up by the time connect(2) returns
// (on loopback it is): the Request then needs no trip through the loop
// first. The write itself tells: Linux refuses it with EAGAIN while the
// handshake is in progress (a non-blocking socket in SYN_SENT), which
// leaves the Request to the loop (connected), as a possible self-connect
// (local port = remote port) is; a connection that failed gives its
// error, as SO_ERROR would have, and the loop fails the connect with it
// (peerGone). (It asked TCP_INFO first: one system call per connection.)
// local is the id's bound address. It returns the errno of a failed
// write, and leaves the state as it was when nothing was sent. c is not
// yet registered; c.mu is held.
func (c *conn) requestEarly(local, remote netip.AddrPort) syscall.Errno {
	if c.state != csConnecting || local.Port() == remote.Port() || !local.Addr().IsValid() || local.Addr().IsUnspecified() {
		return 0
	}
	var buf [mpaBufLen]byte
	b, ok := c.request(buf[:0])
	if !ok {
		return 0 // the loop fails the connect
	}
	n, err := writeOnce(c.fd, b)
	switch {
	case err == unix.EAGAIN || (err == nil && n <= 0):
		return 0
	case err != nil:
		// The write took the socket's pending error, which SO_ERROR would
		// no longer report: the loop reports it (peerGone, failConnect).
		c.state = csReqSent
		return errnoOf(err)
	}
	c.state = csReqSent
	if n < len(b) {
		c.wbuf = append(c.wbuf, b[n:]...)
	}
	return 0
}

// writeOnce is one write(2) of b, made again if a signal interrupted it:
// for the answers written off the loop (requestEarly, acceptDirect), which
// leave a short or failed write to the loop rather than handle it.
func writeOnce(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Write(fd, b)
		if err != unix.EINTR {
			return n, err
		}
	}
}

// startPassive registers an accepted socket waiting for its MPA Request
// and reads what it has: on loopback the initiator wrote the Request as its
// connect(2) returned, so it is often in by the accept, and is answered in
// this pass, with no look at the socket's readiness first and no request
// timer (armed only while the Request is still to come).
func (c *conn) startPassive() {
	gen, err := c.l.register(c.fd, poll.In|poll.RDHup, c)
	if err != nil {
		c.closeNow()
		return
	}
	c.gen = gen
	c.readable(c.l.readBuf())
	if c.state == csWaitReq {
		c.armTimer(c.fab().opts.requestTimeout)
	}
}

// onEvents implements pollable.
func (c *conn) onEvents(ev uint32) {
	c.mu.Lock()
	c.events(ev)
	c.mu.Unlock()
}

// events handles the socket's readiness. c.mu is held.
func (c *conn) events(ev uint32) {
	if c.state == csConnecting {
		if ev&(poll.Out|poll.Err|poll.Hup) != 0 {
			if e := soError(c.fd); e != 0 {
				c.failConnect(e)
			} else {
				c.connected()
			}
		}
		return
	}
	if ev&poll.Out != 0 {
		c.flush()
	}
	if c.state != csClosed && ev&(poll.In|poll.Err|poll.Hup|poll.RDHup) != 0 {
		if c.dp != nil {
			c.dp.loopReads++
		}
		c.readable(c.l.readBuf())
	}
}

// connected sends the MPA Request once TCP is up.
func (c *conn) connected() {
	if local := localAddr(c.fd); local.IsValid() && local == peerAddr(c.fd) {
		// A TCP self-connect: the source port was the destination port and
		// nothing listened there. Nobody can answer: the connection is
		// refused, as Go's net package also treats it.
		c.failConnect(syscall.ECONNREFUSED)
		return
	}
	// TCP_NODELAY is set already (applySockopts, before connect).
	var buf [mpaBufLen]byte
	b, ok := c.request(buf[:0])
	if !ok {
		c.failConnect(syscall.EINVAL)
		return
	}
	c.state = csReqSent
	c.setOut(false)
	c.write(b)
}

// mpaBufLen is the size of the largest MPA Request or Reply the fabric
// sends: each is built in a buffer of that size on its writer's stack (the
// write copies what the socket does not take).
const mpaBufLen = iwarp.MPAHeaderLen + iwarp.IRDORDLen + iwarp.MaxPrivateData

// request appends the MPA Request of an active connection to buf and keeps
// it in c.req for the Reply's checks.
func (c *conn) request(buf []byte) ([]byte, bool) {
	f := iwarp.MPAFrame{
		Rev: iwarp.MPARev2, Enhanced: true, CRC: c.fab().opts.crc,
		IRD: uint16(clampRd(c.param.ResponderResources)), ORD: uint16(clampRd(c.param.InitiatorDepth)),
		PrivateData: c.param.PrivateData,
	}
	c.offerP2P(&f)
	c.req = f
	b, err := iwarp.AppendMPA(buf, &f)
	return b, err == nil
}

// clampRd turns a requested read depth into what goes on the wire: 0xFF is
// the device maximum, and at least 1 (siw copies the peer's values, and 0
// would break RDMA Reads).
func clampRd(v uint8) uint8 {
	switch {
	case v == fabric.MaxResponderResources || v > maxRdAtom:
		return maxRdAtom
	case v == 0:
		return 1
	}
	return v
}

// connReadSize is how much readable reads at a time.
const connReadSize = 16 << 10

// readable reads what the socket has, and reports whether it read
// anything (bytes, the end of the stream or an error). A connection in RTS
// with a data path reads first into its deframer's spare room (readSpare):
// no copy out of a read buffer; what does not fit there, and every other
// state, is read into rb, the loop's read buffer (loop.readBuf) when
// readable runs on the loop, or, rb nil (a direct reader, rc_rxwait.go),
// into a buffer on the stack (readStack).
func (c *conn) readable(rb []byte) (got bool) {
	if c.state == csRTS {
		if p := c.dp; p != nil {
			if p.directDue() {
				return p.readMore()
			}
			done, got := p.readSpare()
			if done {
				return got
			}
			return c.readBuf(rb) || got
		}
	}
	return c.readBuf(rb)
}

// readBuf is readable's read into rb, or into a stack buffer if rb is nil.
func (c *conn) readBuf(rb []byte) bool {
	if rb == nil {
		return c.readStack()
	}
	return c.readInto(rb)
}

// readStack is readInto a stack buffer, in a frame of its own (so that
// readable's callers never carry, nor zero, 16 KiB they do not use). The
// loop reads into its own buffer instead (loop.readBuf): zeroing 16 KiB
// per read was a sixth of the user-space instructions of a connection's
// set-up (four such reads each: the MPA Request and Reply, each end's
// end of stream; BENCHMARKS.md, finding 32).
//
//go:noinline
func (c *conn) readStack() (got bool) {
	if stackReadHook != nil {
		stackReadHook()
	}
	var buf [connReadSize]byte
	return c.readInto(buf[:])
}

// stackReadHook, set by tests only, sees each readStack.
var stackReadHook func()

// readInto reads the socket into buf, a few rounds at most, and hands
// what it read to received; nothing of buf is kept past a round.
func (c *conn) readInto(buf []byte) (got bool) {
	for round := 0; round < 4 && c.state != csClosed; round++ {
		n, err := unix.Read(c.fd, buf)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return got
		case err != nil:
			c.peerGone(errnoOf(err))
			return true
		case n == 0:
			c.peerGone(0)
			return true
		}
		got = true
		c.received(buf[:n])
		if n < len(buf) {
			return true
		}
	}
	return got
}

// received handles bytes from the peer according to the state.
func (c *conn) received(b []byte) {
	switch c.state {
	case csReqSent, csWaitReq:
		// A Reply may be followed at once by FPDUs (siw's responder sends
		// them right behind it), so only a Request is bounded here;
		// ParseMPA bounds the Reply itself.
		if c.state == csWaitReq && len(c.rbuf)+len(b) > maxHandshake {
			c.protocolError(errors.New("handshake too long"))
			return
		}
		// A frame that came whole in one read (most often) is parsed in
		// the loop's scratch buffer: the read's is on the stack, which a
		// frame parsed in place would move to the heap. Only a frame
		// still short, or one with more behind it than the scratch holds,
		// is kept in rbuf, allocated per connection.
		var buf []byte
		switch l := c.l; {
		case len(c.rbuf) == 0 && len(b) <= hsScratchLen:
			if l.hs == nil {
				l.hs = make([]byte, hsScratchLen)
			}
			buf = l.hs[:copy(l.hs, b)]
		default:
			c.rbuf = append(c.rbuf, b...)
			buf = c.rbuf
		}
		var short bool
		if c.state == csReqSent {
			short = c.parseReply(buf)
		} else {
			short = c.parseRequest(buf)
		}
		if short && len(c.rbuf) == 0 {
			c.rbuf = append(c.rbuf, buf...)
		}
	case csReqRecv:
		// The initiator must wait for our Reply before sending FPDUs.
		c.protocolError(errors.New("data before the MPA Reply"))
	case csRTS:
		p := c.path()
		p.rx(b)
		p.dropIdle()
	case csClosing:
		// Disconnecting: the QP is out of RTS and what the peer still
		// sends is dropped, as siw drops it.
	}
}

// parseReply completes the active side's MPA exchange from the bytes
// received so far, b, and reports whether they are short of the Reply.
// Nothing of b is kept: what the event needs is copied into it.
func (c *conn) parseReply(b []byte) (short bool) {
	var f iwarp.MPAFrame
	n, err := iwarp.ParseMPA(b, &f)
	if errors.Is(err, iwarp.ErrShort) {
		return true
	}
	ep := c.ep
	switch {
	case err != nil || !f.Reply:
		c.fab().log.Debug().Err(err).Int("fd", c.fd).Msg("bad MPA reply")
		c.failConnect(syscall.EPROTO)
		return
	case f.Reject:
		raw := fabric.RawEvent{Type: fabric.EventRejected, Status: -int32(syscall.ECONNRESET)}
		raw.SetPrivateData(f.PrivateData)
		ep.emit(&raw)
		c.stopTimer()
		c.closeNow()
		return
	case c.req.Enhanced && (f.Rev != iwarp.MPARev2 || !f.Enhanced):
		// siw resets a connection whose Reply drops the enhanced mode.
		c.failConnect(syscall.ECONNRESET)
		return
	}
	rtr, err := c.chosenRTR(&f)
	if err != nil {
		c.fab().log.Debug().Err(err).Int("fd", c.fd).Msg("bad MPA reply")
		c.failConnect(syscall.EPROTO)
		return
	}
	c.stopTimer()
	c.crc = c.req.CRC || f.CRC
	c.ird, c.ord = uint16(clampRd(c.param.ResponderResources)), uint16(clampRd(c.param.InitiatorDepth))
	if f.HasIRDORD() {
		c.ird = min(c.ird, max(f.ORD, 1)) // reads the peer may send us
		c.ord = min(c.ord, max(f.IRD, 1)) // reads we may send the peer
	}
	c.state = csRTS
	raw := fabric.RawEvent{Type: fabric.EventEstablished, ResponderResources: uint8(min(c.ird, 255)), InitiatorDepth: uint8(min(c.ord, 255))}
	raw.SetPrivateData(f.PrivateData)
	rest := b[n:]
	c.rbuf = nil
	c.param.PrivateData, c.req.PrivateData = nil, nil // sent: not kept for the connection's life
	c.startDataPath(false, false, rtr, &raw)          // ESTABLISHED queued, then the RTR written
	if len(rest) > 0 && c.state == csRTS {
		p := c.path()
		p.rx(rest) // FPDUs that came right behind the Reply
		p.dropIdle()
	}
	return false
}

// parseRequest handles the passive side's MPA Request from the bytes
// received so far, b, and reports whether they are short of it. Nothing
// of b is kept: the CONNECT_REQUEST event copies the private data.
func (c *conn) parseRequest(b []byte) (short bool) {
	var f iwarp.MPAFrame
	n, err := iwarp.ParseMPA(b, &f)
	if errors.Is(err, iwarp.ErrShort) {
		return true
	}
	switch {
	case errors.Is(err, iwarp.ErrMarkers) || errors.Is(err, iwarp.ErrIRDORDMissing):
		// siw answers with a Reject Reply, markers cleared.
		rev := b[iwarp.MPAKeyLen+1]
		r := iwarp.MPAFrame{Reply: true, Reject: true, Rev: rev}
		b, _ := iwarp.AppendMPA(nil, &r)
		c.write(b)
		c.finishClose()
		return
	case err != nil || f.Reply || n != len(b):
		c.fab().log.Debug().Err(err).Int("fd", c.fd).Msg("bad MPA request dropped")
		c.closeNow()
		return
	}
	c.stopTimer()
	lis := c.lis
	if lis.closed {
		c.closeNow()
		return
	}
	if !lis.admit(c) {
		// The backlog is full of requests the user has not answered:
		// refuse with a reset, as a full iWARP listener does.
		c.fab().log.Debug().Int("fd", c.fd).Msg("listener backlog full, connection refused")
		_ = unix.SetsockoptLinger(c.fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
		c.closeNow()
		return
	}
	c.req = f
	c.req.PrivateData = nil // the event below copies it
	c.rbuf = nil
	child, err := lis.newChild(c)
	if err != nil {
		c.closeNow()
		return
	}
	c.ep = child
	c.state = csReqRecv
	ird, ord := uint16(1), uint16(1)
	if f.HasIRDORD() {
		ird, ord = max(f.IRD, 1), max(f.ORD, 1)
	}
	// The request's values seen from the passive side: the reads the peer
	// will issue need our responder resources, and vice versa.
	raw := fabric.RawEvent{Type: fabric.EventConnectRequest, Child: child,
		ResponderResources: uint8(min(ord, maxRdAtom)), InitiatorDepth: uint8(min(ird, maxRdAtom))}
	raw.SetPrivateData(f.PrivateData)
	if !lis.ep.emit(&raw) {
		child.rc().destroyLocal()
		c.closeNow()
	}
	return false
}

// accept answers the request with an MPA Reply and reports ESTABLISHED.
// On the loop, c.mu held.
func (c *conn) accept(p *fabric.ConnParam) error {
	if c.state != csReqRecv {
		return syscall.ECONNRESET
	}
	var buf [mpaBufLen]byte
	b, p2p, err := c.acceptReply(buf[:0], p)
	if err != nil {
		return err
	}
	c.state = csRTS
	c.uncount()
	c.write(b)
	if c.state != csRTS {
		return nil // the write failed: peerGone reported it
	}
	c.accepted(p2p)
	return nil
}

// acceptDirect is accept on the caller's goroutine, c.mu held, sparing
// Accept a round trip through the loop: it answers when the Reply goes
// into the socket (or starts to) and the data path starts holding its
// first FPDU (P2P, or the responder hold), so that nothing of the answer
// needs the loop. Otherwise, and when the socket takes nothing of the
// Reply (a failed write is the loop's to report), it changes nothing and
// reports false: the loop must answer (accept).
func (c *conn) acceptDirect(p *fabric.ConnParam) (bool, error) {
	if c.state != csReqRecv {
		return true, syscall.ECONNRESET
	}
	if !c.grantsP2P() && c.fab().opts.rc.responderHold() < 0 {
		return false, nil // the data path may write at once
	}
	var buf [mpaBufLen]byte
	b, p2p, err := c.acceptReply(buf[:0], p)
	if err != nil {
		return true, err
	}
	n, err := writeOnce(c.fd, b)
	if err != nil || n <= 0 {
		return false, nil
	}
	c.state = csRTS
	c.uncount()
	if n < len(b) {
		c.wbuf = append(c.wbuf, b[n:]...)
		c.setOut(true)
	}
	c.accepted(p2p)
	return true, nil
}

// acceptReply appends to buf the MPA Reply accepting the request with p,
// settling the connection's IRD, ORD and CRC; p2p reports whether P2P mode
// is granted.
func (c *conn) acceptReply(buf []byte, p *fabric.ConnParam) (b []byte, p2p bool, err error) {
	r := iwarp.MPAFrame{
		Reply: true, Rev: c.req.Rev, Enhanced: c.req.Enhanced, Flags: c.req.Flags,
		CRC: c.req.CRC || c.fab().opts.crc, PrivateData: p.PrivateData,
	}
	c.ird, c.ord = uint16(clampRd(p.ResponderResources)), uint16(clampRd(p.InitiatorDepth))
	if c.req.HasIRDORD() {
		c.ird = min(c.ird, max(c.req.ORD, 1))
		c.ord = min(c.ord, max(c.req.IRD, 1))
	}
	r.IRD, r.ORD = c.ird, c.ord
	p2p = c.replyRTR(&r)
	b, err = iwarp.AppendMPA(buf, &r)
	if err != nil {
		return nil, false, syscall.EINVAL
	}
	c.crc = r.CRC
	return b, p2p, nil
}

// accepted starts the data path of a connection whose Reply is written
// (or queued) and reports ESTABLISHED, which in P2P mode waits for the RTR.
func (c *conn) accepted(p2p bool) {
	c.startDataPath(true, p2p, 0, nil)
	if !p2p {
		raw := fabric.RawEvent{Type: fabric.EventEstablished, ResponderResources: uint8(min(c.ird, 255)), InitiatorDepth: uint8(min(c.ord, 255))}
		c.ep.emit(&raw)
	}
}

// reject answers the request with a Reject Reply and closes. A request
// whose connection is gone (the peer gave up) is ECONNRESET, as siw_reject
// answers for an endpoint no longer holding an MPA request.
func (c *conn) reject(pd []byte) error {
	if c.state != csReqRecv {
		return syscall.ECONNRESET
	}
	r := iwarp.MPAFrame{Reply: true, Reject: true, Rev: c.req.Rev, Enhanced: c.req.Enhanced, Flags: c.req.Flags,
		IRD: 1, ORD: 1, PrivateData: pd}
	if c.req.HasIRDORD() {
		r.IRD, r.ORD = max(c.req.ORD, 1), max(c.req.IRD, 1)
	}
	if b, err := iwarp.AppendMPA(nil, &r); err == nil {
		c.write(b)
	}
	c.uncount()
	c.finishClose()
	return nil
}

// uncount takes a passive connection out of its listener's pending count.
// c.mu is held; any goroutine.
func (c *conn) uncount() {
	if c.counts {
		c.counts = false
		c.lis.pending.Add(-1)
	}
}

// disconnect starts an orderly close: FIN after the queued bytes, then wait
// for the peer's FIN (bounded by the linger timeout).
func (c *conn) disconnect() {
	switch c.state {
	case csRTS:
		c.finishClose()
	case csReqSent, csConnecting:
		c.closeNow()
	}
}

// finishClose sends FIN once wbuf drains and closes when the peer's FIN
// arrives or the linger timer expires. c.mu is held; any goroutine (the
// loop does what follows).
func (c *conn) finishClose() {
	if c.state == csClosing || c.state == csClosed {
		return
	}
	c.state = csClosing
	c.closeOK = true
	c.armTimer(c.fab().opts.linger)
	if len(c.wbuf) == 0 {
		_ = unix.Shutdown(c.fd, unix.SHUT_WR)
	}
}

// peerGone handles EOF (errno 0) or a socket error from the peer.
func (c *conn) peerGone(e syscall.Errno) {
	switch c.state {
	case csReqSent:
		// The peer closed during the MPA exchange: iWARP reports a reset.
		if e == 0 {
			e = syscall.ECONNRESET
		}
		c.failConnect(e)
	case csRTS:
		status := int32(0)
		if e == syscall.ETIMEDOUT {
			status = -int32(e)
		}
		c.ep.reportDisconnect(status)
		c.closeNow()
	default:
		c.closeNow()
	}
}

// onTimeout handles the connection timer.
func (c *conn) onTimeout() {
	switch c.state {
	case csConnecting, csReqSent:
		c.failConnect(syscall.ETIMEDOUT)
	default:
		c.fab().log.Debug().Int("fd", c.fd).Uint8("state", uint8(c.state)).Msg("connection timed out, closing")
		c.closeNow()
	}
}

// protocolError closes a connection whose peer broke the protocol.
func (c *conn) protocolError(err error) {
	c.fab().log.Debug().Err(err).Int("fd", c.fd).Msg("protocol error, closing")
	if c.state == csReqSent {
		c.failConnect(syscall.EPROTO)
		return
	}
	if c.state == csRTS && c.ep != nil {
		c.ep.reportDisconnect(0)
	}
	c.closeNow()
}

// failConnect reports the failure of an active connection, as cma_iw_handler
// maps iWARP statuses: refused or reset is REJECTED, no answer UNREACHABLE,
// anything else CONNECT_ERROR.
func (c *conn) failConnect(e syscall.Errno) {
	t := fabric.EventConnectError
	switch e {
	case syscall.ECONNREFUSED, syscall.ECONNRESET:
		t = fabric.EventRejected
	case syscall.ETIMEDOUT, syscall.EHOSTUNREACH, syscall.ENETUNREACH:
		t = fabric.EventUnreachable
	}
	if c.ep != nil {
		c.ep.emitType(t, -int32(e))
	}
	c.closeNow()
}

// write sends b, queueing what the socket does not take.
func (c *conn) write(b []byte) {
	if c.state == csClosed {
		return
	}
	if len(c.wbuf) > 0 {
		c.wbuf = append(c.wbuf, b...)
		return
	}
	for len(b) > 0 {
		n, err := unix.Write(c.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			break
		}
		if err != nil {
			c.peerGone(errnoOf(err))
			return
		}
		b = b[n:]
	}
	if len(b) > 0 {
		c.wbuf = append(c.wbuf, b...)
		c.setOut(true)
	}
}

// flush writes queued bytes when the socket has room.
func (c *conn) flush() {
	for len(c.wbuf) > 0 {
		n, err := unix.Write(c.fd, c.wbuf)
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return
		}
		if err != nil {
			c.wbuf = nil
			c.peerGone(errnoOf(err))
			return
		}
		c.wbuf = c.wbuf[n:]
	}
	c.wbuf = nil
	c.setOut(false)
	if c.closeOK {
		_ = unix.Shutdown(c.fd, unix.SHUT_WR)
	} else if c.dp != nil {
		c.dp.writable()
	}
}

func (c *conn) setOut(on bool) {
	if c.out == on || c.state == csClosed {
		return
	}
	c.out = on
	_ = c.l.modify(c.fd, c.gen, c.pollEvents())
}

// pollEvents is what the loop polls the socket for: readable, unless a
// direct reader has claimed the read side (rc_rxwait.go), and writable
// while bytes wait for room.
func (c *conn) pollEvents() uint32 {
	var ev uint32
	if c.rxw == nil || !c.rxw.claimed {
		ev = poll.In | poll.RDHup
	}
	if c.out {
		ev |= poll.Out
	}
	return ev
}

// Tasks the loop runs for a connection on behalf of other goroutines; each
// takes c.mu.

// connTask is a connection's task that the loop runs in order with the
// tasks posted before it (postConn): a closure or a method value posted
// for it was an allocation per connection.
type connTask struct {
	c    *conn
	kind connTaskKind
	werr syscall.Errno // ctStartActive's
	cerr error         // ctStartActive's
}

// connTaskKind is what a connTask runs.
type connTaskKind uint8

const (
	ctStartActive connTaskKind = iota // taskStartActive
	ctDestroy                         // taskDestroy
)

// postConn queues t on the loop. The loop keeps the tasks in a FIFO of
// its own, and posts one function, made once, per task: each run of it
// takes the oldest, so that every task still runs where its own post would
// have put it, after what was posted before it. It reports false, and t
// does not run, once the loop has stopped.
func (l *loop) postConn(t connTask) bool {
	l.ctMu.Lock()
	l.ctq.Push(t)
	l.ctMu.Unlock()
	if l.post(l.ctRun) {
		return true
	}
	l.ctMu.Lock()
	l.ctq.Filter(func(e *connTask) bool { return e.c != t.c || e.kind != t.kind }, nil)
	l.ctMu.Unlock()
	return false
}

// connTasksKept is the most room an empty FIFO of connection tasks keeps
// (postConn): one connection at a time, or a few, never grow it past it.
const connTasksKept = 64

// runConnTask runs the oldest task queued by postConn.
func (l *loop) runConnTask() {
	var t connTask
	l.ctMu.Lock()
	ok := l.ctq.PopInto(&t)
	if l.ctq.Len() == 0 && l.ctq.Cap() > connTasksKept {
		// A burst of connects (thousands in flight) grew it: its
		// buffer is not kept for the loop's life.
		l.ctq = ring.Ring[connTask]{}
	}
	l.ctMu.Unlock()
	if !ok {
		return
	}
	switch t.kind {
	case ctStartActive:
		t.c.taskStartActive(t.cerr, t.werr)
	case ctDestroy:
		t.c.taskDestroy()
	}
}

// taskStartActive registers a connecting socket (startActive).
func (c *conn) taskStartActive(connectErr error, writeErr syscall.Errno) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startActive(connectErr, writeErr)
}

// taskDisconnect starts an orderly close (disconnect).
func (c *conn) taskDisconnect() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.disconnect()
}

// taskDestroy closes the connection of a destroyed id (destroy).
func (c *conn) taskDestroy() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.destroy()
}

// taskCloseNow closes the connection at once (closeNow).
func (c *conn) taskCloseNow() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeNow()
}

// closeNow closes the socket at once and releases the loop. On the loop,
// c.mu held, or on a direct reader (rc_rxwait.go), which leaves the
// socket's close to the loop (rxWait.closeConn).
func (c *conn) closeNow() {
	if c.state == csClosed {
		return
	}
	c.state = csClosed
	c.stopTimer()
	c.uncount()
	if c.lis != nil {
		c.lis.waiting.remove(c)
	}
	if !c.gone {
		c.closeDataPath()
	}
	if dup := c.rxw != nil; !dup || !c.rxw.closeConn() {
		// A socket never duplicated leaves the epoll set as it is
		// closed; a direct reader's duplicate (rc_rxwait.go) may still
		// be open, and would keep it there. (A child being forked holds
		// the socket, close-on-exec, until its exec: its item stays that
		// long, its reports dropped as stale.)
		if dup {
			c.l.unregister(c.fd)
		} else {
			c.l.Forget(c.fd)
		}
		_ = unix.Close(c.fd)
		c.l.eng.release(c.l)
	}
	c.fd = -1
	c.wbuf, c.rbuf = nil, nil
}

// destroy closes the connection because its id is destroyed: a pending
// request is rejected; a connection that is up, or closing, stops its data
// path at once (the QP goes with the id) but keeps its socket until the
// peer's FIN or the linger timeout (finishClose), discarding what the peer
// still sends (received). Closing it at once would make it reset: Linux
// answers a close with unread bytes, or bytes arriving after it (a credit
// update, an RTR answer), with a RST, which throws away what our socket
// had not sent yet, and the peer loses the end of the stream. Otherwise
// what the peer sent is drained, queued bytes get one last try, and the
// socket is closed.
func (c *conn) destroy() {
	switch c.state {
	case csClosed:
		return
	case csReqRecv:
		c.reject(nil)
	case csRTS:
		c.finishClose()
	}
	switch c.state {
	case csClosed:
		return
	case csClosing:
		if !c.gone {
			c.gone = true
			c.closeDataPath()
		}
		c.readInto(c.l.readBuf()) // what came meanwhile; the peer's FIN closes
		return
	}
	var buf [4096]byte
	for k := 0; k < 64; k++ {
		if n, err := unix.Read(c.fd, buf[:]); n <= 0 || err != nil {
			break
		}
	}
	if len(c.wbuf) > 0 {
		_, _ = unix.Write(c.fd, c.wbuf)
	}
	c.closeNow()
}

// offerP2P asks for peer-to-peer mode in an MPA Request when the fabric is
// configured for it.
func (c *conn) offerP2P(f *iwarp.MPAFrame) {
	if rtr := c.fab().opts.rc.offer(); rtr != 0 {
		f.P2P, f.WriteRTR, f.ReadRTR = true, rtr&RTRWrite != 0, rtr&RTRRead != 0
	}
}

// grantsP2P reports whether the answer to the request puts the connection
// in P2P mode (replyRTR).
func (c *conn) grantsP2P() bool { return c.req.HasIRDORD() && c.req.P2P }

// replyRTR answers a P2P request in the MPA Reply r as siw does: a Write
// RTR when offered, else a Read RTR, else Write. It reports whether P2P is
// in effect.
func (c *conn) replyRTR(r *iwarp.MPAFrame) bool {
	if !c.grantsP2P() {
		return false
	}
	r.P2P = true
	if !c.req.WriteRTR && c.req.ReadRTR {
		r.ReadRTR = true
	} else {
		r.WriteRTR = true
	}
	return true
}

// chosenRTR is the RTR an initiator sends after the Reply f: none when it
// did not ask for P2P or the responder declined, and an error when the
// responder chose a type it did not offer.
func (c *conn) chosenRTR(f *iwarp.MPAFrame) (RTR, error) {
	if !c.req.P2P || !f.HasIRDORD() || !f.P2P {
		return 0, nil
	}
	switch {
	case f.WriteRTR && c.req.WriteRTR:
		return RTRWrite, nil
	case f.ReadRTR && c.req.ReadRTR:
		return RTRRead, nil
	}
	return 0, fmt.Errorf("soft: the responder chose an RTR not offered: %w", syscall.EPROTO)
}
