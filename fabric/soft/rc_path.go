package soft

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
	"github.com/cmrt/cmrt/internal/ring"
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
	op      iwarp.Opcode
	stag    uint32 // tagged: sink STag
	slot    *sendSlot
	payload []byte
	reg     *mr // the region payload lies in (nil: inline or empty)
	off     int
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
	solicited bool
	inval     bool            // a Send with Invalidate
	status    fabric.WCStatus // set when the Send fails it
	invalSTag uint32          // its STag, from the first segment
	wr        fabric.RecvWR
	m         *mr
	placed    int
}

// rxWrite is an inbound RDMA Write in progress.
type rxWrite struct {
	active bool
	stag   uint32
	m      *mr
	to     uint64 // next TO expected
}

// rcPath is the iWARP data path of a connection in RTS: the FPDU reader and
// writer, the DDP/RDMAP state of both directions and the queues of Reads in
// flight. Like its connection's, its fields are guarded by c.mu. Receiving
// happens on the loop, or on a goroutine waiting on the QP's completion
// queues (rc_rxwait.go); sending on the loop, or on the goroutine that
// posts a send when it finds the connection idle (post).
type rcPath struct {
	c        *conn
	qp       *rcQP
	kickFn   func()       // the kick task, made by the first kick
	lastPost atomic.Int64 // monoNow at the end of the last post: bursts go to the loop
	// tidx is the index + 1 of the path's entry in its loop's timer heap
	// (0: none); guarded by the heap's lock (pathTimers), not c.mu. tgen
	// counts the arms and stops of the timer, so that an entry that was
	// due before a stop or a new arm does nothing (fire).
	tidx int32
	tgen uint32
	dx   *rxDirect // the FPDU placed directly; made on first use
	txd  *txDirect // writev state of sendDirect; made on first use
	// rd holds the queues of RDMA Reads, made by the first Read either way
	// (reads): most connections never carry one, and an idle connection's
	// path is most of its memory.
	rd *rcReads
	// in holds the inbound message in progress, made by the first Send or
	// Write with a payload (inbound).
	in *rcRx

	kicked atomic.Bool   // a kick task is queued or running on the loop
	posts  atomic.Uint32 // counts posts, so a kick sees those during its pump
	burst  atomic.Int32  // posts of the current burst

	// The fields are ordered for size (TestRCPathSize): flags together,
	// limits in 32 bits.
	maxUntag  int32 // payload per Send FPDU (0: MSS not read yet, maxSeg)
	maxTagged int32 // payload per Write / Read Response FPDU
	ord       int32 // Reads we may have outstanding (peer's IRD, ours)
	ird       int32 // the negotiated IRD: Read Requests the peer may have outstanding
	// loopReads counts the loop's looks at the socket in RTS, for tests:
	// a ping-pong whose waits read directly (rc_rxwait.go) leaves it
	// near 0.
	loopReads uint32

	dead bool
	// posting is set while a poster's goroutine runs pump: what would
	// close the connection is then left to the loop (kick).
	posting bool
	bail    bool // emit found work for the loop only: pump stops and kicks
	crc     bool

	// Connection start.
	hold    bool // responder: no FPDU out before the initiator's first
	waitRTR bool // P2P responder: ESTABLISHED when the RTR arrives
	rtr     RTR  // P2P: the RTR (initiator) or its answer (responder: ackRTR) still to send
	firstRx bool
	// rtrRepeats counts the RTRs a P2P initiator repeated (repeatRTR).
	rtrRepeats uint8
	rrOn       bool // a Read Response is being placed (the head of rd.orq)
	// armed is set while the path's timer is armed, until its function runs.
	armed bool

	// Receive side.
	df    iwarp.Deframer
	rxMSN [3]uint32 // next MSN expected per queue number

	// Send side.
	txMSN  [3]uint32
	tx     []byte // FPDUs built, tx[txOff:] not yet written
	txOff  int
	txBase uint64 // stream position of tx[0]
	cur    txMsg
}

// rcRx is the inbound message state of a data path that has received a
// Send or a Write with a payload. Guarded by c.mu like the path.
type rcRx struct {
	rcv rxRecv
	wr  rxWrite
}

// inbound returns the path's inbound message state, made on first use.
func (p *rcPath) inbound() *rcRx {
	if p.in == nil {
		p.in = new(rcRx)
	}
	return p.in
}

// rcReads is the Read state of a data path that has seen a Read (or sent
// a Read RTR). Guarded by c.mu like the path.
type rcReads struct {
	irq    ring.Ring[irqEntry] // peer's Reads to answer, grown on demand up to ird entries
	orq    ring.Ring[orqEntry] // our Reads in flight, grown on demand up to ord+1 (an RTR Read)
	rrDone int                 // bytes placed of the Read Response at orq's head (rrOn)
}

// reads returns the path's Read state, made on first use.
func (p *rcPath) reads() *rcReads {
	if p.rd == nil {
		p.rd = &rcReads{irq: ring.New[irqEntry](0, int(p.ird)), orq: ring.New[orqEntry](0, int(p.ord)+1)}
	}
	return p.rd
}

// irqLen and orqLen are the lengths of the Read queues, 0 before the first Read.
func (p *rcPath) irqLen() int {
	if p.rd == nil {
		return 0
	}
	return p.rd.irq.Len()
}

func (p *rcPath) orqLen() int {
	if p.rd == nil {
		return 0
	}
	return p.rd.orq.Len()
}

// startDataPath creates the connection's data path as it enters RTS and
// attaches the endpoint's QP if there is one. passive selects the
// responder's start rules: p2p waits for the RTR before ESTABLISHED,
// otherwise FPDUs are held until the initiator's first one or the hold
// delay. As initiator, rtr is the RTR to send first (0: none). ev, when
// not nil, is queued once the path is made and the QP attached, before
// anything is written: the initiator's ESTABLISHED wakes its waiter
// without waiting for the RTR's write, which stays first on the wire (next
// picks it before any message, and posts need c.mu, held here).
func (c *conn) startDataPath(passive, p2p bool, rtr RTR, ev *fabric.RawEvent) {
	c.rts = true
	p := c.newPath(rtr)
	if passive {
		switch hold := c.fab().opts.rc.responderHold(); {
		case p2p:
			p.hold, p.waitRTR = true, true
			p.arm(c.fab().opts.requestTimeout, ptRTRTimeout)
		case hold >= 0:
			p.hold = true
			p.arm(hold, ptRelease)
		}
	}
	if !passive && rtr != 0 {
		p.arm(rtrRepeatDelay, ptRepeatRTR)
	}
	q := c.ep.rcQP()
	bound := q != nil && p.bind(q)
	if ev != nil {
		c.ep.emit(ev)
	}
	switch {
	case bound:
		p.pump()
	case q == nil:
		p.pump() // the RTR goes out even before there is a QP
		p.dropIdle()
	}
}

// path returns the data path of a connection in RTS, made again if it was
// dropped idle (dropIdle). A path made again starts past the connection's
// start: no hold, no RTR to send or wait for, as the one dropped was.
func (c *conn) path() *rcPath {
	if c.dp == nil {
		c.newPath(0)
	}
	return c.dp
}

// newPath makes the connection's data path, as it enters RTS or again
// after it was dropped idle, and sets it as c.dp.
func (c *conn) newPath(rtr RTR) *rcPath {
	// The Read queues grow on demand (up to IRD and ORD+1, the +1 for a Read
	// RTR): most connections never issue a Read, and preallocating up to
	// 129 entries each made them most of a connection's memory.
	p := &rcPath{c: c, crc: c.crc, ord: max(int32(c.ord), 1), ird: max(int32(c.ird), 1), rtr: rtr}
	p.df.SetCRC(c.crc)
	for k := range p.rxMSN {
		p.rxMSN[k], p.txMSN[k] = 1, 1
	}
	c.dp = p
	return p
}

// dropIdle drops the path if it is the connection's and holds nothing a
// path made again (conn.path) would not: no QP, no timer (the hold, the
// wait for the RTR, the RTR repeats), nothing of the start left, no
// message, Read or FPDU in progress either way, no MSN moved (a Send or a
// Read crossed), no kick pending. The connection stays in RTS; what needs
// the path later (an FPDU, a QP attached) makes it again. Under c.mu.
func (p *rcPath) dropIdle() {
	c := p.c
	if c.dp != p || p.dead || c.state != csRTS || p.qp != nil || p.armed ||
		p.hold || p.waitRTR || p.rtr != 0 || p.posting || p.bail || p.kicked.Load() ||
		p.busy() || p.cur.kind != txNone || p.txOff != len(p.tx) ||
		(p.dx != nil && p.dx.on) || p.df.Buffered() != 0 || p.df.Err() != nil ||
		p.rxMSN != [3]uint32{1, 1, 1} || p.txMSN != [3]uint32{1, 1, 1} {
		return
	}
	c.dp = nil
}

// rtrRepeatDelay is how long a P2P initiator waits for a first FPDU from
// the responder before it sends one more zero-length Write (repeatRTR);
// each further repeat waits twice as long, up to rtrRepeatMax repeats
// (10, 20, 40 and 80 ms: a responder in a slow VM may take more than the
// first 10 ms to start reading).
const (
	rtrRepeatDelay = 10 * time.Millisecond
	rtrRepeatMax   = 4
)

// repeatRTR sends one more zero-length RDMA Write when the responder has
// sent nothing since the RTR. siw's responder switches its socket to
// waiting for the RTR only after it has written its MPA Reply: bytes that
// arrive in between stay unread until more come, and until then the
// responder is never established (with a server that speaks first, never
// at all). A zero-length Write is a no-op for any responder, this fabric's
// included. A cmrt responder answers the RTR as it reads it (ackRTR), so
// toward one the repeats stop at the answer.
func (p *rcPath) repeatRTR() {
	if p.firstRx || p.c.state != csRTS {
		return
	}
	if rtrRepeatHook != nil {
		rtrRepeatHook(p.c)
	}
	p.rtr = RTRWrite
	p.pump()
	if p.rtrRepeats++; p.rtrRepeats < rtrRepeatMax {
		p.arm(rtrRepeatDelay<<p.rtrRepeats, ptRepeatRTR)
		return
	}
	p.dropIdle()
}

// ackRTR makes a P2P responder that has just read the initiator's RTR
// (first) send a zero-length RDMA Write, unless an FPDU goes out now
// anyway: the Read Response to a Read RTR (replyRTR granted one), a
// message posted during the wait. drain's pump writes it. The initiator
// repeats its RTR until the responder's first FPDU (repeatRTR, for siw's
// responder, which may miss the first): this one tells it at once that
// the RTR was read. For any initiator a zero-length Write is a no-op: no
// STag checked, nothing placed, no completion, no receive consumed (siw's
// siw_proc_write returns before its STag check, as writeDst does here).
func (p *rcPath) ackRTR() {
	if r := &p.c.req; r.ReadRTR && !r.WriteRTR {
		return
	}
	if q := p.qp; q != nil {
		q.mu.Lock()
		queued := q.sqCur != q.sqTail
		q.mu.Unlock()
		if queued {
			return
		}
	}
	p.rtr = RTRWrite
}

// rtrRepeatHook, set by tests only, sees each repeatRTR that writes.
var rtrRepeatHook func(c *conn)

// attachLater attaches a QP created after the connection was set up.
func (c *conn) attachLater(q *rcQP) {
	if c.dp == nil && c.rts && c.state != csClosed {
		c.path() // dropped idle (dropIdle)
	}
	switch {
	case c.dp != nil && !c.dp.dead:
		c.dp.attach(q)
	case c.state == csClosing || c.state == csClosed:
		q.fail(0)
	}
}

// pathTimer names what a data path's timer runs (arm).
type pathTimer uint8

const (
	ptRTRTimeout pathTimer = iota // rtrTimeout
	ptRelease                     // release
	ptRepeatRTR                   // repeatRTR
)

// arm runs what names on the loop after d, unless the path is gone, its
// timer stopped or armed again by then. It replaces what was armed. The
// loop's deadline heap keeps it (pathTimers): no runtime timer and no
// allocation per arm. c.mu is held.
func (p *rcPath) arm(d time.Duration, what pathTimer) {
	p.tgen++
	p.armed = true
	p.c.l.pt.add(p, monoNow()+int64(d), p.tgen, what)
}

// stopTimer stops the path's timer: a fire already taken from the heap
// finds its generation gone. c.mu is held.
func (p *rcPath) stopTimer() {
	if !p.armed {
		return
	}
	p.armed = false
	p.tgen++
	p.c.l.pt.remove(p)
}

// fire runs what the arm of generation gen named, on the loop, unless the
// path is dead or no longer its connection's, or its timer was stopped or
// armed again since that arm.
func (p *rcPath) fire(gen uint32, what pathTimer) {
	c := p.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if p.dead || c.dp != p || !p.armed || p.tgen != gen {
		return
	}
	p.armed = false
	if pathTimerHook != nil {
		pathTimerHook(p, what)
	}
	switch what {
	case ptRTRTimeout:
		p.rtrTimeout()
	case ptRelease:
		p.release()
	case ptRepeatRTR:
		p.repeatRTR()
	}
}

// pathTimerHook, set by tests only, sees each path timer that fires and
// acts, before its function runs.
var pathTimerHook func(p *rcPath, what pathTimer)

// release ends the responder's hold.
func (p *rcPath) release() {
	p.stopTimer()
	if p.hold && !p.waitRTR {
		p.hold = false
		p.pump()
		p.dropIdle()
	}
}

// rtrTimeout gives up on a P2P initiator that never sent its RTR.
func (p *rcPath) rtrTimeout() {
	if p.waitRTR {
		p.abort(errors.New("no RTR from the P2P initiator"), fabric.WCWRFlushErr)
		p.c.closeNow()
	}
}

// attach binds the QP to the path and starts what it has queued.
func (p *rcPath) attach(q *rcQP) {
	if p.bind(q) {
		p.pump()
	}
}

// bind binds the QP to the path and reports whether it did; pump then
// starts what it has queued.
func (p *rcPath) bind(q *rcQP) bool {
	if p.qp == q {
		return false
	}
	if p.qp != nil || p.dead {
		q.fail(0)
		return false
	}
	q.mu.Lock()
	if q.destroyed || q.state != qpReset {
		q.mu.Unlock()
		return false
	}
	q.state, q.path = qpRTS, p
	q.mu.Unlock()
	p.qp = q
	return true
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
	p.qp = nil
	if r := p.in; r != nil {
		r.rcv, r.wr = rxRecv{}, rxWrite{}
	}
	p.rrOn = false
	if d := p.dx; d != nil {
		d.on, d.dst, d.m = false, nil, nil
	}
	if r := p.rd; r != nil {
		r.irq.Clear()
		r.orq.Clear()
	}
	if p.cur.kind == txSlot || p.cur.kind == txIRQ {
		p.cur = txMsg{}
	}
	q.mu.Lock()
	q.state, q.path = qpError, nil
	q.mu.Unlock()
}

// busy reports whether a message or Read involving the QP is under way.
func (p *rcPath) busy() bool {
	return p.in != nil && (p.in.rcv.active || p.in.wr.active) || p.rrOn || p.irqLen() > 0 || p.orqLen() > 0 ||
		p.cur.kind == txSlot || p.cur.kind == txIRQ
}

// canSend reports whether FPDUs may be built now.
func (p *rcPath) canSend() bool {
	return !p.dead && !p.hold && p.c.state == csRTS
}

// writable resumes sending once the socket drained (conn.flush).
func (p *rcPath) writable() { p.pump() }

// Posts on a connection that follow each other (the end of one to the
// start of the next) within burstGap are a burst: its
// first directPosts are written by their posters, the rest by the loop,
// which packs what is queued into large writes (one write(2) per post
// would make a stream of small messages as slow as TCP with a write per
// message).
const (
	burstGap    = 5 * time.Microsecond
	directPosts = 2
)

// post sends what was just posted on the QP from the poster's goroutine
// when the connection is idle: nobody holds it and the socket is not
// waiting for room (then the loop sends it once there is). A busy
// connection, or one in a burst of posts, gets a kick: the loop sends it
// after what it is doing.
func (p *rcPath) post() {
	c := p.c
	p.posts.Add(1)
	if p.kicked.Load() {
		// The loop's kick runs: it sends this post, or kicks again.
		p.lastPost.Store(monoNow())
		return
	}
	if monoNow()-p.lastPost.Load() >= int64(burstGap) {
		p.burst.Store(0)
	}
	if p.burst.Add(1) > directPosts || !c.mu.TryLock() {
		p.kick()
		p.lastPost.Store(monoNow())
		return
	}
	if c.dp == p && !p.dead && !c.out {
		p.posting = true
		p.pump()
		p.posting = false
	}
	c.mu.Unlock()
	p.lastPost.Store(monoNow())
}

// monoStart is the origin of monoNow.
var monoStart = time.Now()

// monoNow is a monotonic clock in nanoseconds.
func monoNow() int64 { return int64(time.Since(monoStart)) }

// kick has the loop run pump, once for any number of kicks before it runs.
func (p *rcPath) kick() {
	if p.kicked.Swap(true) {
		return
	}
	if p.kickFn == nil {
		// Made here, not with the path: most paths never kick (a
		// connection's set-up writes from its poster or the loop).
		p.kickFn = p.runKick
	}
	if !p.c.l.post(p.kickFn) {
		p.kicked.Store(false)
	}
}

// runKick is the kick task. Posts made while it pumps leave their sending
// to it (post sees kicked): when there were any, it kicks again, since its
// pump may have looked at the queue before them.
func (p *rcPath) runKick() {
	c := p.c
	posts := p.posts.Load()
	c.mu.Lock()
	if c.dp == p {
		p.pump()
	}
	p.kicked.Store(false)
	c.mu.Unlock()
	if p.posts.Load() != posts {
		p.kick()
	}
}

// pump writes what is built and builds more while the socket takes it. On
// a poster's goroutine (posting) it leaves what would end the connection,
// a failed write or a message whose region went away, to the loop.
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
				if p.posting {
					p.kick()
					return
				}
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
		if !p.canSend() {
			return
		}
		if p.sendRTR() {
			continue
		}
		if p.sendDirect() {
			continue
		}
		if !p.fill() {
			return
		}
		if p.bail {
			p.bail = false
			p.kick()
			return
		}
	}
}

// Direct sending: the FPDUs of a long message are written with one
// writev(2) of their headers, their payloads straight from the message's
// region and their trailers, instead of being copied into tx first (the
// copy was a memmove of every byte sent, finding 15 in BENCHMARKS.md).
// Only what the socket does not take is copied into tx, from the start of
// the first FPDU not written whole, so that tx still starts with an FPDU
// (terminate relies on it). The region is checked before each FPDU, as
// emit checks it, and the writev happens under c.mu in the same pump:
// DeregMR, which waits for c.mu, never returns while it reads the region.
const (
	// txDirectMin is the least payload per FPDU sent directly: the MSS
	// must allow FPDUs this long (loopback, jumbo frames). Shorter
	// messages are copied into tx and go out many to a write(2): a
	// stream of 4 KiB messages sent directly, one writev each until the
	// batch filled, ran at a third of the rate.
	txDirectMin = 16 << 10
	// txDirectFPDUs bounds the FPDUs of one direct writev.
	txDirectFPDUs = 16
)

// txDirect is the vector of a direct writev.
type txDirect struct {
	hdr [txDirectFPDUs][iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen]byte
	trl [txDirectFPDUs][3 + iwarp.CRCLen]byte
	seg [txDirectFPDUs][]byte
	hl  [txDirectFPDUs]uint8 // bytes of hdr[k] used
	tl  [txDirectFPDUs]uint8 // bytes of trl[k] used
	end [txDirectFPDUs]int   // batch offset after FPDU k
	iov [3 * txDirectFPDUs]unix.Iovec
}

// sendDirect writes the FPDUs of the current message, and of the
// messages after it, straight from their regions while they are long
// enough, and reports whether it wrote any; if not, fill builds them into
// tx.
func (p *rcPath) sendDirect() bool {
	d := p.txd
	m := &p.cur
	k, total := 0, 0
	for k < txDirectFPDUs && total < txBatch {
		if m.kind == txNone && !p.next() {
			break
		}
		// A long message's short last FPDU goes with it: fill would copy
		// it, and the messages after it, into tx. The MSS is read only
		// for a message long enough to need it (readMSS).
		if m.op == iwarp.OpReadRequest || m.reg == nil ||
			m.off == 0 && (len(m.payload) < txDirectMin || p.maxSeg(m.op) < txDirectMin) || !m.reg.valid.Load() {
			break // fill sends it (emit ends a message whose region went away)
		}
		if d == nil {
			d = new(txDirect)
			p.txd = d
		}
		h := iwarp.Header{Op: m.op}
		seg := p.nextSegment(m, &h)
		n := len(seg)
		ulen := h.Len() + n
		hb := binary.BigEndian.AppendUint16(d.hdr[k][:0], uint16(ulen))
		hb, _ = iwarp.AppendHeader(hb, &h)
		pad := iwarp.Pad(ulen)
		clear(d.trl[k][:pad]) // the last batch may have left a CRC there
		var sum uint32
		if p.crc {
			sum = iwarp.CRC32cUpdate(iwarp.CRC32cUpdate(iwarp.CRC32c(hb), seg), d.trl[k][:pad])
		}
		tb := binary.LittleEndian.AppendUint32(d.trl[k][:pad], sum)
		d.seg[k], d.hl[k], d.tl[k] = seg, uint8(len(hb)), uint8(len(tb))
		total += len(hb) + n + len(tb)
		d.end[k] = total
		k++
		if h.Last {
			p.messageBuilt(m, p.txBase+uint64(total))
		}
	}
	if k == 0 {
		return false
	}
	for j := 0; j < k; j++ {
		v := d.iov[3*j : 3*j+3]
		v[0].Base, v[1].Base, v[2].Base = &d.hdr[j][0], &d.seg[j][0], &d.trl[j][0]
		v[0].SetLen(int(d.hl[j]))
		v[1].SetLen(len(d.seg[j]))
		v[2].SetLen(int(d.tl[j]))
	}
	r, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(p.c.fd), uintptr(unsafe.Pointer(&d.iov[0])), uintptr(3*k))
	for j := range d.iov[:3*k] {
		d.iov[j].Base = nil
	}
	n := int(r)
	if e != 0 {
		n = 0 // pump writes tx, which now holds it all, and handles the error
	}
	// Keep in tx the FPDUs not written whole, from the first one on.
	first, start := 0, 0
	for first < k && d.end[first] <= n {
		start = d.end[first]
		first++
	}
	p.txBase += uint64(start)
	for j := first; j < k; j++ {
		p.tx = append(p.tx, d.hdr[j][:d.hl[j]]...)
		p.tx = append(p.tx, d.seg[j]...)
		p.tx = append(p.tx, d.trl[j][:d.tl[j]]...)
	}
	for j := range d.seg[:k] {
		d.seg[j] = nil
	}
	p.txOff = n - start
	if n > 0 {
		countSent(p.c.fd, n)
		p.completeSends()
	}
	return true
}

// rtrFPDU holds the FPDU of a zero-length RDMA Write to rtrSTag (an RTR,
// or a responder's answer to one), without and with its CRC: the same
// bytes on every connection, built once.
var rtrFPDU = [2][]byte{buildRTRFPDU(false), buildRTRFPDU(true)}

func buildRTRFPDU(crc bool) []byte {
	h := iwarp.Header{Op: iwarp.OpWrite, STag: rtrSTag, Last: true}
	hdr, _ := iwarp.AppendHeader(nil, &h)
	b, _ := iwarp.AppendFPDU(nil, hdr, nil, crc)
	return b
}

// sendRTR writes an RTR that is a zero-length RDMA Write, or a
// responder's answer to one (ackRTR), straight from rtrFPDU when tx has no
// buffer yet and nothing else is to go with it, and reports whether it
// did. Such a control FPDU is most often all that a connection of a server
// that sends nothing writes, and building it in tx allocated tx for it.
// What the socket does not take is copied into tx, the whole FPDU with
// txOff past what was written, as sendDirect keeps it: pump writes the
// rest, or handles the error.
func (p *rcPath) sendRTR() bool {
	if p.rtr != RTRWrite || cap(p.tx) > 0 || p.cur.kind != txNone || len(p.c.wbuf) > 0 || p.irqFront() != nil {
		return false
	}
	if q := p.qp; q != nil {
		q.mu.Lock()
		queued := q.sqCur != q.sqTail
		q.mu.Unlock()
		if queued {
			return false // fill sends it in the same write as the messages
		}
	}
	p.next() // the RTR: a Write of nothing to rtrSTag, at TO 0
	b := rtrFPDU[0]
	if p.crc {
		b = rtrFPDU[1]
	}
	p.messageBuilt(&p.cur, p.txBase+uint64(len(b)))
	n, err := writeOnce(p.c.fd, b)
	if err != nil || n < 0 {
		n = 0
	}
	if n > 0 {
		countSent(p.c.fd, n)
	}
	if n == len(b) {
		p.txBase += uint64(n)
		p.completeSends()
		return true
	}
	p.tx, p.txOff = append(p.tx, b...), n
	return true
}

// minSeg is the least payload of a full FPDU, whatever the MSS.
const minSeg = 64

// segLen is the payload of the next FPDU of an op with rem bytes left:
// all of them when they fit the least FPDU (no need to know the MSS),
// else up to a full FPDU (maxSeg).
func (p *rcPath) segLen(op iwarp.Opcode, rem int) int {
	if rem <= minSeg {
		return rem
	}
	return min(p.maxSeg(op), rem)
}

// maxSeg is the payload of a full FPDU of op. The socket's MSS is read
// (TCP_MAXSEG) the first time a message needs it, not as each end enters
// RTS: most connections never send a message longer than minSeg, and the
// read was two system calls per connection.
func (p *rcPath) maxSeg(op iwarp.Opcode) int {
	if p.maxUntag == 0 {
		p.readMSS()
	}
	if op.Tagged() {
		return int(p.maxTagged)
	}
	return int(p.maxUntag)
}

// readMSS sizes the path's FPDUs to the socket's MSS, as siw does.
func (p *rcPath) readMSS() {
	mss, err := unix.GetsockoptInt(p.c.fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
	if err != nil || mss <= 0 {
		mss = defaultMSS
	}
	p.maxUntag = int32(max(iwarp.MaxPayload(mss, iwarp.OpSend), minSeg))
	p.maxTagged = int32(max(iwarp.MaxPayload(mss, iwarp.OpWrite), minSeg))
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
		s := q.sq.at(q.sqHead)
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
	for len(p.tx) < txBatch && !p.dead && !p.bail {
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
	if e := p.irqFront(); e != nil {
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
		s := q.sq.at(q.sqCur)
		if s.wr.Opcode == fabric.WRRead && p.orqLen() >= int(p.ord) {
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

// pushORQ queues a Read we sent. The caller keeps the queue within ord
// (and the RTR's Read): the ring's bound is never reached.
func (p *rcPath) pushORQ(e orqEntry) { p.reads().orq.Push(e) }

// irqFront is the oldest Read to answer, nil if none.
func (p *rcPath) irqFront() *irqEntry {
	if p.rd == nil {
		return nil
	}
	return p.rd.irq.Front()
}

// emit appends the next FPDU of the current message to tx. The payload's
// region is checked right before its bytes are copied: a region
// deregistered or invalidated meanwhile is not read again (sourceGone).
func (p *rcPath) emit() {
	m := &p.cur
	if m.reg != nil && m.off < len(m.payload) && !m.reg.valid.Load() {
		if p.posting {
			p.bail = true // the Terminate is the loop's to send
			return
		}
		p.sourceGone()
		return
	}
	h := iwarp.Header{Op: m.op}
	var seg []byte
	if m.op == iwarp.OpReadRequest {
		h.MSN, h.Read, h.Last = m.msn, m.read, true
	} else {
		seg = p.nextSegment(m, &h)
	}
	var scratch [iwarp.ReadRequestLen + iwarp.LengthFieldLen]byte // on the stack: the header is copied into tx
	hdr, _ := iwarp.AppendHeader(scratch[:0], &h)
	p.tx, _ = iwarp.AppendFPDU(p.tx, hdr, seg, p.crc)
	if h.Last {
		p.messageBuilt(m, p.txBase+uint64(len(p.tx)))
	}
}

// nextSegment fills h for the next FPDU of m, a Send, Write or Read
// Response (its place in the message, and whether it is the last), and
// returns that FPDU's payload, advancing m past it: emit and sendDirect
// cut messages alike.
func (p *rcPath) nextSegment(m *txMsg, h *iwarp.Header) []byte {
	n := p.segLen(m.op, len(m.payload)-m.off)
	seg := m.payload[m.off : m.off+n]
	if m.op.Tagged() {
		h.STag, h.TO = m.stag, m.to+uint64(m.off)
	} else {
		h.MSN, h.MO, h.InvalSTag = m.msn, uint32(m.off), m.inval
	}
	m.off += n
	h.Last = m.off == len(m.payload)
	return seg
}

// messageBuilt ends the current message m once its last FPDU is built;
// end is the stream position after that FPDU, where a Send's or Write's
// completion waits for TCP to take it.
func (p *rcPath) messageBuilt(m *txMsg, end uint64) {
	countSentMessage(p.c.fd)
	switch m.kind {
	case txSlot:
		m.slot.endPos = end
	case txIRQ:
		p.rd.irq.PopFront()
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

// abort ends the data path after an error: outstanding work requests
// complete (the oldest Read in flight with st), DISCONNECTED is reported
// and nothing more is read or sent. The caller closes the connection.
func (p *rcPath) abort(why error, st fabric.WCStatus) {
	if p.dead {
		return
	}
	if p.rd != nil {
		if e := p.rd.orq.Front(); e != nil && e.slot != nil && !e.slot.done {
			e.slot.done, e.slot.status = true, st
		}
	}
	p.shutdown()
	if why != nil && p.waitRTR {
		p.c.fab().log.Debug().Err(why).Int("fd", p.c.fd).Msg("P2P connection failed")
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
	if q := p.qp; q != nil {
		if r := p.in; r != nil && r.rcv.active {
			r := &r.rcv
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
	if c.rts {
		return // dropped idle: it had no QP (dropIdle)
	}
	if q := c.ep.rcQP(); q != nil {
		q.fail(0)
	}
}
