package soft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
	"github.com/cmrt/cmrt/poll"
)

// Tuning of the data path.
const (
	// txBatch is how many bytes of FPDUs are built before a write(2).
	txBatch = 256 << 10
	// rxChunk is the read size into the deframer, and rxBudget how much one
	// readiness report may read before the loop serves others.
	rxChunk  = 64 << 10
	rxBudget = 1 << 20
	// defaultMSS is the segment size when TCP_MAXSEG cannot be read.
	defaultMSS = 1448
	// rtrSTag is the STag of the RTRs the fabric sends, as siw's: zero-length
	// operations are not checked, but some hardware treats STag 0 specially.
	rtrSTag = 1
)

// txKind says what the message being segmented is.
type txKind uint8

const (
	txNone txKind = iota
	txSlot        // a send queue entry
	txIRQ         // the Read Response at the head of the IRQ
	txRTR         // the P2P RTR
)

// txMsg is the RDMAP message being cut into FPDUs.
type txMsg struct {
	kind    txKind
	slot    *sendSlot
	op      iwarp.Opcode
	payload []byte
	reg     *mr // the region payload lies in (nil: inline or empty)
	off     int
	stag    uint32 // tagged: sink STag
	to      uint64 // tagged: TO of payload[0]
	msn     uint32 // untagged
	inval   uint32 // Send with Invalidate: the peer's STag to invalidate
	read    iwarp.ReadRequest
}

// orqEntry is an RDMA Read we sent and whose response is due, oldest first.
type orqEntry struct {
	slot     *sendSlot // nil for the P2P Read RTR
	m        *mr
	dst      []byte
	sinkSTag uint32
	sinkTO   uint64
}

// irqEntry is a peer's RDMA Read we must answer.
type irqEntry struct {
	sinkSTag uint32
	sinkTO   uint64
	src      []byte
	m        *mr // src's region, checked before each Read Response FPDU
}

// rxRecv is the receive being filled by an inbound Send.
type rxRecv struct {
	active    bool
	wr        fabric.RecvWR
	m         *mr
	placed    int
	solicited bool
	inval     bool            // a Send with Invalidate
	invalSTag uint32          // its STag, from the first segment
	status    fabric.WCStatus // set when the Send fails it
}

// rxWrite is an inbound RDMA Write in progress.
type rxWrite struct {
	active bool
	m      *mr
	stag   uint32
	to     uint64 // next TO expected
}

// rcWake adapts the QP's waker to the loop's pollable interface.
type rcWake struct{ p *rcPath }

func (w *rcWake) onEvents(uint32) {
	if q := w.p.qp; q != nil {
		q.wake.Reset()
	}
	w.p.pump()
}

// rcPath is the iWARP data path of a connection in RTS: the FPDU reader and
// writer, the DDP/RDMAP state of both directions and the queues of Reads in
// flight. It belongs to the connection's loop goroutine; user goroutines
// reach it only through the QP's rings and waker.
type rcPath struct {
	c    *conn
	qp   *rcQP
	wake rcWake
	wfd  int // the QP waker's descriptor while registered, else -1
	dead bool

	crc       bool
	maxUntag  int // payload per Send FPDU
	maxTagged int // payload per Write / Read Response FPDU
	ord       int // Reads we may have outstanding (peer's IRD, ours)

	// Connection start.
	hold    bool // responder: no FPDU out before the initiator's first
	waitRTR bool // P2P responder: ESTABLISHED when the RTR arrives
	rtr     RTR  // P2P initiator: the RTR still to send
	timer   *time.Timer
	firstRx bool

	// Receive side.
	df     iwarp.Deframer
	hdr    iwarp.Header
	rxMSN  [3]uint32 // next MSN expected per queue number
	rcv    rxRecv
	wr     rxWrite
	rrOn   bool       // a Read Response is being placed (ORQ head)
	rrDone int        // bytes of it placed
	irq    []irqEntry // ring, grown on demand up to ird entries
	irqH   int
	irqN   int
	ird    int // the negotiated IRD: Read Requests the peer may have outstanding

	// Send side.
	tx      []byte // FPDUs built, tx[txOff:] not yet written
	txOff   int
	txBase  uint64 // stream position of tx[0]
	txMSN   [3]uint32
	cur     txMsg
	orq     []orqEntry
	orqH    int
	orqN    int
	scratch [iwarp.ReadRequestLen + iwarp.LengthFieldLen]byte
}

// startDataPath creates the connection's data path as it enters RTS and
// attaches the endpoint's QP if there is one. passive selects the
// responder's start rules: p2p waits for the RTR before ESTABLISHED,
// otherwise FPDUs are held until the initiator's first one or the hold
// delay. As initiator, rtr is the RTR to send first (0: none).
func (c *conn) startDataPath(passive, p2p bool, rtr RTR) {
	// The Read queues grow on demand (up to IRD and ORD+1, the +1 for a Read
	// RTR): most connections never issue a Read, and preallocating up to
	// 129 entries each made them most of a connection's memory.
	p := &rcPath{c: c, wfd: -1, crc: c.crc, ord: max(int(c.ord), 1), ird: max(int(c.ird), 1), rtr: rtr}
	p.wake.p = p
	p.df.SetCRC(c.crc)
	for k := range p.rxMSN {
		p.rxMSN[k], p.txMSN[k] = 1, 1
	}
	mss, err := unix.GetsockoptInt(c.fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	if err != nil || mss <= 0 {
		mss = defaultMSS
	}
	p.maxUntag = max(iwarp.MaxPayload(mss, iwarp.OpSend), 64)
	p.maxTagged = max(iwarp.MaxPayload(mss, iwarp.OpWrite), 64)
	c.dp = p
	if passive {
		switch hold := c.f.opts.rc.responderHold(); {
		case p2p:
			p.hold, p.waitRTR = true, true
			p.arm(c.f.opts.requestTimeout, p.rtrTimeout)
		case hold >= 0:
			p.hold = true
			p.arm(hold, p.release)
		}
	}
	if q := c.ep.rcQP(); q != nil {
		p.attach(q)
	} else {
		p.pump() // the RTR goes out even before there is a QP
	}
}

// attachLater attaches a QP created after the connection was set up.
func (c *conn) attachLater(q *rcQP) {
	switch {
	case c.dp != nil && !c.dp.dead:
		c.dp.attach(q)
	case c.state == csClosing || c.state == csClosed:
		q.fail(0)
	}
}

// arm runs fn on the loop after d, unless the path is gone by then.
func (p *rcPath) arm(d time.Duration, fn func()) {
	l := p.c.l
	p.timer = time.AfterFunc(d, func() {
		l.post(func() {
			if !p.dead && p.c.dp == p {
				fn()
			}
		})
	})
}

func (p *rcPath) stopTimer() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// release ends the responder's hold.
func (p *rcPath) release() {
	p.stopTimer()
	if p.hold && !p.waitRTR {
		p.hold = false
		p.pump()
	}
}

// rtrTimeout gives up on a P2P initiator that never sent its RTR.
func (p *rcPath) rtrTimeout() {
	p.timer = nil
	if p.waitRTR {
		p.abort(errors.New("no RTR from the P2P initiator"), fabric.WCWRFlushErr)
		p.c.closeNow()
	}
}

// attach binds the QP to the path and starts what it has queued.
func (p *rcPath) attach(q *rcQP) {
	if p.qp == q {
		return
	}
	if p.qp != nil || p.dead {
		q.fail(0)
		return
	}
	q.mu.Lock()
	if q.destroyed || q.state != qpReset {
		q.mu.Unlock()
		return
	}
	q.state, q.path = qpRTS, p
	q.mu.Unlock()
	p.qp = q
	if _, err := p.c.l.register(q.wake.Fd(), poll.In, &p.wake); err != nil {
		p.c.f.log.Warn().Err(err).Int("fd", p.c.fd).Msg("register QP waker")
	} else {
		p.wfd = q.wake.Fd()
	}
	p.pump()
}

// detachQP takes a destroyed QP off the path. Nothing of the QP's is
// touched afterwards: the Reads the peer asked for are dropped, and so are
// the inbound Write, Send or Read Response being placed and the message
// being sent. If there was any, the stream cannot go on (the peer would
// wait for a response, or a message is cut in the middle): the connection
// ends with a Terminate. Otherwise it stays up without a QP.
func (p *rcPath) detachQP(q *rcQP) {
	if p.qp != q {
		return
	}
	if !p.dead && p.busy() {
		p.terminate(termLocal, nil, errQPDestroyed)
	}
	p.unregisterWake()
	p.qp = nil
	p.rcv, p.wr, p.rrOn = rxRecv{}, rxWrite{}, false
	clear(p.irq)
	p.irqH, p.irqN = 0, 0
	clear(p.orq)
	p.orqH, p.orqN = 0, 0
	if p.cur.kind == txSlot || p.cur.kind == txIRQ {
		p.cur = txMsg{}
	}
	q.mu.Lock()
	q.state, q.path = qpError, nil
	q.mu.Unlock()
}

// busy reports whether a message or Read involving the QP is under way.
func (p *rcPath) busy() bool {
	return p.rcv.active || p.wr.active || p.rrOn || p.irqN > 0 || p.orqN > 0 ||
		p.cur.kind == txSlot || p.cur.kind == txIRQ
}

func (p *rcPath) unregisterWake() {
	if p.wfd >= 0 {
		p.c.l.unregister(p.wfd)
		p.wfd = -1
	}
}

// canSend reports whether FPDUs may be built now.
func (p *rcPath) canSend() bool {
	return !p.dead && !p.hold && p.c.state == csRTS
}

// writable resumes sending once the socket drained (conn.flush).
func (p *rcPath) writable() { p.pump() }

// pump writes what is built and builds more while the socket takes it.
func (p *rcPath) pump() {
	c := p.c
	for !p.dead && c.state == csRTS {
		if p.txOff < len(p.tx) {
			if len(c.wbuf) > 0 {
				return // the MPA Reply is still queued: conn.flush calls back
			}
			n, err := unix.Write(c.fd, p.tx[p.txOff:])
			switch {
			case err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				c.setOut(true)
				return
			case err != nil:
				c.peerGone(errnoOf(err))
				return
			}
			p.txOff += n
			countSent(c.fd, n)
			p.completeSends()
			continue
		}
		p.txBase += uint64(len(p.tx))
		p.tx, p.txOff = p.tx[:0], 0
		if !p.canSend() || !p.fill() {
			return
		}
	}
}

// written is the stream position up to which TCP has taken our bytes.
func (p *rcPath) written() uint64 { return p.txBase + uint64(p.txOff) }

// completeSends retires, in order, the send slots that are complete.
func (p *rcPath) completeSends() {
	q := p.qp
	if q == nil {
		return
	}
	w := p.written()
	q.mu.Lock()
	for q.sqHead < q.sqCur {
		s := &q.sq[q.sqHead%uint64(len(q.sq))]
		st := s.status
		if !s.done && (s.wr.Opcode == fabric.WRRead || s.endPos == 0 || s.endPos > w) {
			break
		}
		q.retireLocked(st)
	}
	q.mu.Unlock()
}

// fill builds FPDUs into tx, whole messages one after the other (siw does
// not interleave them either), and reports whether it built any.
func (p *rcPath) fill() bool {
	built := false
	for len(p.tx) < txBatch && !p.dead {
		if p.cur.kind == txNone && !p.next() {
			break
		}
		p.emit()
		built = true
	}
	return built
}

// next picks the next message: the RTR, then Read Responses owed to the
// peer, then the send queue. A Read waits (and everything behind it) while
// ORD Reads are outstanding.
func (p *rcPath) next() bool {
	m := &p.cur
	if p.rtr != 0 {
		*m = txMsg{kind: txRTR}
		if p.rtr&RTRWrite != 0 {
			m.op, m.stag = iwarp.OpWrite, rtrSTag
		} else {
			m.op, m.msn = iwarp.OpReadRequest, p.txMSN[iwarp.QNReadRequest]
			m.read = iwarp.ReadRequest{SinkSTag: rtrSTag, SrcSTag: rtrSTag}
			p.txMSN[iwarp.QNReadRequest]++
			p.pushORQ(orqEntry{sinkSTag: rtrSTag})
		}
		p.rtr = 0
		return true
	}
	if p.irqN > 0 {
		e := &p.irq[p.irqH]
		*m = txMsg{kind: txIRQ, op: iwarp.OpReadResponse, payload: e.src, reg: e.m, stag: e.sinkSTag, to: e.sinkTO}
		return true
	}
	q := p.qp
	if q == nil {
		return false
	}
	for {
		q.mu.Lock()
		if q.sqCur == q.sqTail {
			q.mu.Unlock()
			return false
		}
		s := &q.sq[q.sqCur%uint64(len(q.sq))]
		if s.wr.Opcode == fabric.WRRead && p.orqN >= p.ord {
			q.mu.Unlock()
			return false
		}
		q.sqCur++
		q.mu.Unlock()
		if s.m != nil && !s.m.valid.Load() {
			// Deregistered since it was posted.
			s.done, s.status = true, fabric.WCLocProtErr
			p.completeSends()
			continue
		}
		*m = txMsg{kind: txSlot, slot: s, payload: s.wr.Buf, reg: s.m}
		switch s.wr.Opcode {
		case fabric.WRSend:
			m.op, m.msn = iwarp.OpSend, p.txMSN[iwarp.QNSend]
			if s.wr.Flags&fabric.SendSolicited != 0 {
				m.op = iwarp.OpSendSE
			}
			p.txMSN[iwarp.QNSend]++
		case fabric.WRSendWithInv:
			m.op, m.msn, m.inval = iwarp.OpSendInv, p.txMSN[iwarp.QNSend], s.wr.InvalidateRKey
			if s.wr.Flags&fabric.SendSolicited != 0 {
				m.op = iwarp.OpSendSEInv
			}
			p.txMSN[iwarp.QNSend]++
		case fabric.WRWrite:
			m.op, m.stag, m.to = iwarp.OpWrite, s.wr.RKey, s.wr.RemoteAddr
		case fabric.WRRead:
			e := orqEntry{slot: s, m: s.m, dst: s.wr.Buf}
			if s.m != nil {
				e.sinkSTag, e.sinkTO = s.m.stag, s.m.addr+sliceOffset(s.wr.Buf, s.m.buf)
			}
			p.pushORQ(e)
			m.op, m.payload, m.msn = iwarp.OpReadRequest, nil, p.txMSN[iwarp.QNReadRequest]
			m.read = iwarp.ReadRequest{SinkSTag: e.sinkSTag, SinkTO: e.sinkTO, Size: uint32(len(s.wr.Buf)),
				SrcSTag: s.wr.RKey, SrcTO: s.wr.RemoteAddr}
			p.txMSN[iwarp.QNReadRequest]++
		}
		return true
	}
}

func (p *rcPath) pushORQ(e orqEntry) {
	if p.orqN == len(p.orq) {
		p.orq, p.orqH = growRing(p.orq, p.orqH, p.orqN, p.ord+1)
	}
	p.orq[(p.orqH+p.orqN)%len(p.orq)] = e
	p.orqN++
}

// growRing returns a ring of twice the size (at least 4, at most limit)
// holding ring's n entries from head, in order, from index 0.
func growRing[T any](ring []T, head, n, limit int) ([]T, int) {
	out := make([]T, min(max(2*len(ring), 4), max(limit, n+1)))
	for k := 0; k < n; k++ {
		out[k] = ring[(head+k)%len(ring)]
	}
	return out, 0
}

// emit appends the next FPDU of the current message to tx. The payload's
// region is checked right before its bytes are copied: a region
// deregistered or invalidated meanwhile is not read again (sourceGone).
func (p *rcPath) emit() {
	m := &p.cur
	if m.reg != nil && m.off < len(m.payload) && !m.reg.valid.Load() {
		p.sourceGone()
		return
	}
	h := iwarp.Header{Op: m.op}
	var seg []byte
	switch {
	case m.op == iwarp.OpReadRequest:
		h.MSN, h.Read, h.Last = m.msn, m.read, true
	case m.op.Tagged():
		n := min(p.maxTagged, len(m.payload)-m.off)
		seg = m.payload[m.off : m.off+n]
		h.STag, h.TO = m.stag, m.to+uint64(m.off)
	default:
		n := min(p.maxUntag, len(m.payload)-m.off)
		seg = m.payload[m.off : m.off+n]
		h.MSN, h.MO, h.InvalSTag = m.msn, uint32(m.off), m.inval
	}
	m.off += len(seg)
	h.Last = h.Last || m.off == len(m.payload)
	hdr, _ := iwarp.AppendHeader(p.scratch[:0], &h)
	p.tx, _ = iwarp.AppendFPDU(p.tx, hdr, seg, p.crc)
	if !h.Last {
		return
	}
	countSentMessage(p.c.fd)
	switch m.kind {
	case txSlot:
		m.slot.endPos = p.txBase + uint64(len(p.tx))
	case txIRQ:
		p.irq[p.irqH] = irqEntry{}
		p.irqH = (p.irqH + 1) % len(p.irq)
		p.irqN--
	}
	*m = txMsg{}
}

// sourceGone ends the current message, whose region became invalid after
// it was started (or, for a Read Response, after the Read was accepted):
// its remaining bytes are no longer ours to send. A Read Response gets a
// Terminate with a protection error, so the peer's Read fails with a
// remote access error; a Send or Write fails with WCLocProtErr and the
// stream, which cannot resume inside a message, ends with a Terminate.
func (p *rcPath) sourceGone() {
	m := &p.cur
	if m.kind == txIRQ {
		p.terminate(termProt(iwarp.RDMAPECodeInvalidSTag), nil, errRegionGone)
		return
	}
	m.slot.done, m.slot.status = true, fabric.WCLocProtErr
	p.terminate(termLocal, nil, errRegionGone)
}

// rx takes bytes the connection read and then reads the socket straight
// into the deframer until it is drained or the budget is spent.
func (p *rcPath) rx(b []byte) {
	c := p.c
	countReceived(c.fd, len(b))
	if _, err := p.df.Write(b); err != nil {
		return
	}
	p.drain()
	for budget := rxBudget; budget > 0 && !p.dead && c.state == csRTS; {
		space := p.df.WriteSpace(rxChunk)
		n, err := unix.Read(c.fd, space)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return
		case err != nil:
			c.peerGone(errnoOf(err))
			return
		case n == 0:
			c.peerGone(0)
			return
		}
		_ = p.df.Commit(n)
		countReceived(c.fd, n)
		p.drain()
		budget -= n
	}
}

// drain handles every complete FPDU buffered, then sends what they caused.
func (p *rcPath) drain() {
	for !p.dead && p.c.state == csRTS {
		u, err := p.df.Next()
		if errors.Is(err, iwarp.ErrShort) {
			break
		}
		if err != nil {
			p.terminate(iwarp.TerminateFor(err, nil), nil, err)
			return
		}
		if !p.firstRx {
			p.first()
		}
		p.handle(u)
	}
	p.pump()
}

// first handles the initiator's first FPDU on the responder: it ends the
// hold and, in P2P mode, is the RTR that completes the connection.
func (p *rcPath) first() {
	p.firstRx = true
	if !p.hold {
		return
	}
	p.stopTimer()
	p.hold = false
	if p.waitRTR {
		p.waitRTR = false
		c := p.c
		raw := fabric.RawEvent{Type: fabric.EventEstablished, ResponderResources: uint8(min(c.ird, 255)), InitiatorDepth: uint8(min(c.ord, 255))}
		c.ep.emit(&raw)
	}
}

// handle processes one ULPDU.
func (p *rcPath) handle(u []byte) {
	h := &p.hdr
	payload, err := iwarp.ParseULPDU(u, h)
	if err != nil {
		p.terminate(iwarp.TerminateFor(err, u), u, err)
		return
	}
	countReceivedMessage(p.c.fd, h.Last)
	switch h.Op {
	case iwarp.OpSend, iwarp.OpSendInv, iwarp.OpSendSE, iwarp.OpSendSEInv:
		p.rxSend(h, payload, u)
	case iwarp.OpWrite:
		p.rxWrite(h, payload, u)
	case iwarp.OpReadRequest:
		p.rxReadRequest(h, u)
	case iwarp.OpReadResponse:
		p.rxReadResponse(h, payload, u)
	case iwarp.OpTerminate:
		p.rxTerminate(h, payload)
	}
}

// Terminate codes used below.
var (
	termUTNoBuf     = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeUntaggedBuf, ECode: iwarp.DDPECodeUTInvalidMSNNoBuf}
	termUTMSNRange  = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeUntaggedBuf, ECode: iwarp.DDPECodeUTInvalidMSNRange}
	termUTMO        = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeUntaggedBuf, ECode: iwarp.DDPECodeUTInvalidMO}
	termTSTag       = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeTaggedBuf, ECode: iwarp.DDPECodeTInvalidSTag}
	termTBounds     = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeTaggedBuf, ECode: iwarp.DDPECodeTBaseBounds}
	termDDPCatastro = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeCatastrophic, ECode: iwarp.DDPECodeCatastrophic}
	termIRD         = iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeRemoteOperation, ECode: iwarp.RDMAPECodeCatastrophicStream}
	// termCannotInvalidate answers a Send with Invalidate naming no region
	// of this side that grants remote access.
	termCannotInvalidate = iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeRemoteOperation, ECode: iwarp.RDMAPECodeCannotInvalidate}
	// termLocal ends the stream for a local reason: a message cut short by
	// its region's deregistration, or the QP destroyed with work in flight.
	termLocal = iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeCatastrophic, ECode: iwarp.RDMAPECodeUnspecified}
)

func termProt(code uint8) iwarp.Terminate {
	return iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeRemoteProtection, ECode: code}
}

// Errors behind the Terminates the data path sends, for the debug log.
var (
	errNoRecv           = errors.New("send with no posted receive")
	errRecvTooSmall     = errors.New("send larger than the posted receive")
	errMSN              = errors.New("unexpected MSN")
	errMO               = errors.New("unexpected message offset")
	errSTag             = errors.New("invalid STag or no access")
	errBounds           = errors.New("tagged offset out of bounds")
	errRegionGone       = errors.New("local region deregistered")
	errIRD              = errors.New("more RDMA Reads than the negotiated IRD")
	errNoRead           = errors.New("Read Response with no Read outstanding")
	errInterleaved      = errors.New("messages of one kind interleaved")
	errNotLast          = errors.New("multi-segment Read Request")
	errCannotInvalidate = errors.New("Send with Invalidate names no remotely accessible region")
	errQPDestroyed      = errors.New("QP destroyed with work in flight")
)

func (p *rcPath) rxSend(h *iwarp.Header, payload, u []byte) {
	r := &p.rcv
	if !r.active {
		switch {
		case h.MSN != p.rxMSN[iwarp.QNSend]:
			p.terminate(termUTMSNRange, u, errMSN)
			return
		case h.MO != 0:
			p.terminate(termUTMO, u, errMO)
			return
		case p.qp == nil || !p.qp.popRecv(r):
			p.terminate(termUTNoBuf, u, errNoRecv)
			return
		}
		r.active, r.placed, r.status = true, 0, fabric.WCSuccess
		r.solicited = h.Op == iwarp.OpSendSE || h.Op == iwarp.OpSendSEInv
		r.inval = h.Op == iwarp.OpSendInv || h.Op == iwarp.OpSendSEInv
		r.invalSTag = h.InvalSTag
	} else if h.MSN != p.rxMSN[iwarp.QNSend] {
		p.terminate(termUTMSNRange, u, errMSN)
		return
	} else if h.MO != uint32(r.placed) {
		p.terminate(termUTMO, u, errMO)
		return
	}
	if len(payload) > len(r.wr.Buf)-r.placed {
		r.status = fabric.WCLocLenErr
		p.terminate(termUTNoBuf, u, errRecvTooSmall)
		return
	}
	if len(payload) > 0 && !r.m.valid.Load() {
		r.status = fabric.WCLocProtErr
		p.terminate(termDDPCatastro, u, errRegionGone)
		return
	}
	r.placed += copy(r.wr.Buf[r.placed:], payload)
	if !h.Last {
		return
	}
	p.rxMSN[iwarp.QNSend]++
	r.active = false
	wc := fabric.WC{WRID: r.wr.WRID, Status: fabric.WCSuccess, Opcode: fabric.WCRecv, ByteLen: uint32(r.placed),
		QPNum: p.qp.num, Solicited: r.solicited}
	if r.inval {
		// The message is placed: invalidate the region it names, as siw
		// does at the end of a Send with Invalidate. A region that does
		// not exist, or that grants the peer no access (it was never the
		// peer's to name), fails the receive and terminates the stream.
		if !p.qp.pd.invalidate(r.invalSTag) {
			wc.Status = fabric.WCRemInvReqErr
			p.qp.rcq.push(wc)
			*r = rxRecv{}
			p.terminate(termCannotInvalidate, u, errCannotInvalidate)
			return
		}
		wc.Invalidated, wc.InvalidatedRKey = true, r.invalSTag
	}
	p.qp.rcq.push(wc)
	*r = rxRecv{}
}

// lookup returns the live region of the QP an STag names, or nil.
func (p *rcPath) lookup(stag uint32) *mr {
	if p.qp == nil {
		return nil
	}
	return p.qp.pd.mrs.lookup(stag)
}

// span returns the bytes [to, to+n) of region m, if they lie within it.
func span(m *mr, to uint64, n int) ([]byte, bool) {
	if to < m.addr {
		return nil, false
	}
	off := to - m.addr
	if off > uint64(len(m.buf)) || uint64(n) > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+uint64(n)], true
}

func (p *rcPath) rxWrite(h *iwarp.Header, payload, u []byte) {
	w := &p.wr
	if p.rrOn {
		p.terminate(termDDPCatastro, u, errInterleaved)
		return
	}
	if !w.active {
		if len(payload) == 0 {
			return // zero-length Writes (and RTRs) are not checked
		}
		m := p.lookup(h.STag)
		if m == nil || m.access&fabric.AccessRemoteWrite == 0 {
			p.terminate(termTSTag, u, errSTag)
			return
		}
		*w = rxWrite{active: true, m: m, stag: h.STag, to: h.TO}
	} else if h.STag != w.stag {
		p.terminate(termTSTag, u, errSTag)
		return
	} else if h.TO != w.to {
		p.terminate(termTBounds, u, errBounds)
		return
	}
	if !w.m.valid.Load() {
		p.terminate(termTSTag, u, errSTag)
		return
	}
	dst, ok := span(w.m, h.TO, len(payload))
	if !ok {
		p.terminate(termTBounds, u, errBounds)
		return
	}
	copy(dst, payload)
	w.to += uint64(len(payload))
	if h.Last {
		*w = rxWrite{}
	}
}

func (p *rcPath) rxReadRequest(h *iwarp.Header, u []byte) {
	switch {
	case p.rcv.active:
		p.terminate(termDDPCatastro, u, errInterleaved)
		return
	case !h.Last:
		p.terminate(termDDPCatastro, u, errNotLast)
		return
	case h.MSN != p.rxMSN[iwarp.QNReadRequest]:
		p.terminate(termUTMSNRange, u, errMSN)
		return
	case p.irqN >= p.ird:
		p.terminate(termIRD, u, errIRD)
		return
	}
	p.rxMSN[iwarp.QNReadRequest]++
	r := &h.Read
	var src []byte
	var m *mr
	if r.Size > 0 {
		m = p.lookup(r.SrcSTag)
		switch {
		case m == nil:
			p.terminate(termProt(iwarp.RDMAPECodeInvalidSTag), u, errSTag)
			return
		case m.access&fabric.AccessRemoteRead == 0:
			p.terminate(termProt(iwarp.RDMAPECodeAccessRights), u, errSTag)
			return
		}
		var ok bool
		if src, ok = span(m, r.SrcTO, int(r.Size)); !ok {
			p.terminate(termProt(iwarp.RDMAPECodeBaseBounds), u, errBounds)
			return
		}
	}
	if p.irqN == len(p.irq) {
		p.irq, p.irqH = growRing(p.irq, p.irqH, p.irqN, p.ird)
	}
	p.irq[(p.irqH+p.irqN)%len(p.irq)] = irqEntry{sinkSTag: r.SinkSTag, sinkTO: r.SinkTO, src: src, m: m}
	p.irqN++
}

func (p *rcPath) rxReadResponse(h *iwarp.Header, payload, u []byte) {
	if p.wr.active {
		p.terminate(termDDPCatastro, u, errInterleaved)
		return
	}
	if !p.rrOn {
		if p.orqN == 0 {
			p.terminate(termDDPCatastro, u, errNoRead)
			return
		}
		p.rrOn, p.rrDone = true, 0
	}
	e := &p.orq[p.orqH]
	switch {
	case h.STag != e.sinkSTag:
		p.terminate(termTSTag, u, errSTag)
		return
	case h.TO != e.sinkTO+uint64(p.rrDone),
		len(payload) > len(e.dst)-p.rrDone,
		h.Last && p.rrDone+len(payload) != len(e.dst):
		p.terminate(termTBounds, u, errBounds)
		return
	case len(payload) > 0 && !e.m.valid.Load():
		e.slot.done, e.slot.status = true, fabric.WCLocProtErr
		p.terminate(termTSTag, u, errRegionGone)
		return
	}
	p.rrDone += copy(e.dst[p.rrDone:], payload)
	if !h.Last {
		return
	}
	if e.slot != nil {
		e.slot.done, e.slot.status = true, fabric.WCSuccess
	}
	*e = orqEntry{}
	p.orqH = (p.orqH + 1) % len(p.orq)
	p.orqN--
	p.rrOn = false
	p.completeSends()
}

// termStatus is the completion status a Terminate from the peer gives the
// Read it answers.
func termStatus(t *iwarp.Terminate) fabric.WCStatus {
	switch {
	case t.Layer == iwarp.LayerRDMAP && t.EType == iwarp.RDMAPETypeRemoteProtection,
		t.Layer == iwarp.LayerDDP && t.EType == iwarp.DDPETypeTaggedBuf:
		return fabric.WCRemAccessErr
	case t.Layer == iwarp.LayerRDMAP && t.EType == iwarp.RDMAPETypeRemoteOperation,
		t.Layer == iwarp.LayerDDP && t.EType == iwarp.DDPETypeUntaggedBuf:
		return fabric.WCRemOpErr
	}
	return fabric.WCGeneralErr
}

// rxTerminate handles the peer's Terminate: the oldest Read in flight gets
// the matching error status (unless the Terminate names another message),
// everything else is flushed, and the connection closes.
func (p *rcPath) rxTerminate(h *iwarp.Header, attached []byte) {
	t := h.Term
	st := fabric.WCWRFlushErr
	if len(attached) < iwarp.LengthFieldLen+iwarp.ControlLen ||
		iwarp.Opcode(attached[3]&0x0f) == iwarp.OpReadRequest {
		st = termStatus(&t)
	}
	p.c.f.log.Debug().Int("fd", p.c.fd).Str("layer", t.Layer.String()).Uint8("etype", t.EType).
		Uint8("ecode", t.ECode).Msg("Terminate from the peer, closing")
	p.abort(nil, st)
	p.c.closeNow()
}

// terminate sends a Terminate for a protocol or protection error in u (nil
// when there is no ULPDU) and closes the connection.
func (p *rcPath) terminate(t iwarp.Terminate, u []byte, why error) {
	var att []byte
	if len(u) >= iwarp.ControlLen {
		if hl := iwarp.Opcode(u[1] & 0x0f).HeaderLen(); hl > 0 && len(u) >= hl {
			// A copy of the offending header, from its MPA length field.
			att = binary.BigEndian.AppendUint16(make([]byte, 0, 2+hl), uint16(len(u)))
			att = append(att, u[:hl]...)
			t.M = true
			t.D = t.Layer == iwarp.LayerDDP
			t.R = t.Layer == iwarp.LayerRDMAP
		}
	}
	p.c.f.log.Debug().Err(why).Int("fd", p.c.fd).Str("layer", t.Layer.String()).Uint8("etype", t.EType).
		Uint8("ecode", t.ECode).Msg("protocol error, sending Terminate and closing")
	// Keep the FPDU being written whole, drop those not started.
	end := 0
	for end < p.txOff {
		end += iwarp.FPDULen(int(binary.BigEndian.Uint16(p.tx[end:])))
	}
	p.tx = p.tx[:end]
	h := iwarp.Header{Op: iwarp.OpTerminate, Last: true, MSN: p.txMSN[iwarp.QNTerminate], Term: t}
	p.txMSN[iwarp.QNTerminate]++
	hdr, _ := iwarp.AppendHeader(p.scratch[:0], &h)
	p.tx, _ = iwarp.AppendFPDU(p.tx, hdr, att, p.crc)
	out := p.tx[p.txOff:]
	p.abort(why, fabric.WCWRFlushErr)
	c := p.c
	if c.state == csRTS {
		c.write(out)
		c.finishClose()
	}
}

// abort ends the data path after an error: outstanding work requests
// complete (the oldest Read in flight with st), DISCONNECTED is reported
// and nothing more is read or sent. The caller closes the connection.
func (p *rcPath) abort(why error, st fabric.WCStatus) {
	if p.dead {
		return
	}
	if p.orqN > 0 {
		if e := &p.orq[p.orqH]; e.slot != nil && !e.slot.done {
			e.slot.done, e.slot.status = true, st
		}
	}
	p.shutdown()
	if why != nil && p.waitRTR {
		p.c.f.log.Debug().Err(why).Int("fd", p.c.fd).Msg("P2P connection failed")
	}
	p.c.ep.reportDisconnect(0)
}

// shutdown stops the data path and fails the QP: on abort, and when the
// connection closes (conn.closeNow). It is idempotent.
func (p *rcPath) shutdown() {
	if p.dead {
		return
	}
	p.dead = true
	p.stopTimer()
	p.unregisterWake()
	if q := p.qp; q != nil {
		if r := &p.rcv; r.active {
			st := r.status
			if st == fabric.WCSuccess {
				st = fabric.WCWRFlushErr
			}
			q.rcq.push(fabric.WC{WRID: r.wr.WRID, Status: st, Opcode: fabric.WCRecv, ByteLen: uint32(r.placed), QPNum: q.num})
			*r = rxRecv{}
		}
		q.fail(p.written())
	}
}

// closeDataPath is the connection's close hook: the data path stops and
// the QP, attached or still waiting for RTS, fails.
func (c *conn) closeDataPath() {
	if c.dp != nil {
		c.dp.shutdown()
		return
	}
	if q := c.ep.rcQP(); q != nil {
		q.fail(0)
	}
}

// offerP2P asks for peer-to-peer mode in an MPA Request when the fabric is
// configured for it.
func (c *conn) offerP2P(f *iwarp.MPAFrame) {
	if rtr := c.f.opts.rc.p2p; rtr != 0 {
		f.P2P, f.WriteRTR, f.ReadRTR = true, rtr&RTRWrite != 0, rtr&RTRRead != 0
	}
}

// replyRTR answers a P2P request in the MPA Reply r as siw does: a Write
// RTR when offered, else a Read RTR, else Write. It reports whether P2P is
// in effect.
func (c *conn) replyRTR(r *iwarp.MPAFrame) bool {
	if !c.req.HasIRDORD() || !c.req.P2P {
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

// sliceOffset returns the offset of b within region (b must lie in it).
func sliceOffset(b, region []byte) uint64 {
	if len(b) == 0 || len(region) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))) - uintptr(unsafe.Pointer(unsafe.SliceData(region))))
}
