package soft

// The receive side of the RC data path: FPDUs read from the connection are
// deframed and placed (Sends into posted receives, Writes and Read
// Responses into regions) or queued (Read Requests, answered by the send
// side).

import (
	"encoding/binary"
	"errors"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// rx takes bytes the connection read and, when they filled the
// connection's read (more may be waiting), reads the socket itself until
// it is drained or the budget is spent: into the deframer, or, while a
// long FPDU's payload is due (rxDirect), straight into its destination.
// A connection that never receives that much at once never grows the
// deframer to rxChunk.
func (p *rcPath) rx(b []byte) {
	c := p.c
	countReceived(c.fd, len(b))
	if !p.feed(b) {
		return
	}
	p.drain()
	if len(b) < connReadSize {
		return
	}
	p.readMore()
}

// readMore reads the socket itself until it is drained or the budget is
// spent, and reports whether it read anything (bytes, the end of the
// stream or an error) or stopped the data path.
func (p *rcPath) readMore() (got bool) {
	c := p.c
	for budget := rxBudget; budget > 0 && !p.dead && c.state == csRTS; {
		n, err := p.read()
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return got
		case err == errStop:
			return true // terminated: the waiter looks again
		case err != nil:
			c.peerGone(errnoOf(err))
			return true
		case n == 0:
			c.peerGone(0)
			return true
		}
		got = true
		if rxReadHook != nil {
			rxReadHook(n)
		}
		countReceived(c.fd, n)
		p.drain()
		budget -= n
	}
	return got
}

// rxReadHook, set by tests only, sees each of readMore's reads.
var rxReadHook func(n int)

// directDue reports whether a direct FPDU's payload is due: read, not
// conn.readable's stack buffer, reads it straight into its destination.
func (p *rcPath) directDue() bool {
	d := p.dx
	return d != nil && d.on && d.off < len(d.dst) && !p.dead
}

// spareMin is the least spare room in the deframer's buffer that
// readSpare reads into; with less it leaves the read to the stack buffer.
const spareMin = 64

// readSpare is conn.readable's first read of a connection in RTS: into the
// spare room of the deframer's buffer as it is (never grown, so a
// connection keeps the memory it had), the bytes then deframed and placed
// in place, as rx does after a read of the stack buffer, without zeroing
// and copying out of one. It reports done when readable has nothing more
// to do (the socket had nothing, or less than the room, or ended), and
// whether it read anything. It declines (false, false) when the room is
// under spareMin, the deframer has stopped, or a direct FPDU is due or
// likely (its payload and the lookahead are read's).
func (p *rcPath) readSpare() (done, got bool) {
	c := p.c
	if p.dead || p.df.Err() != nil || (p.dx != nil && (p.dx.on || p.dx.streak)) {
		return false, false
	}
	space := p.df.WriteSpace(0)
	if len(space) < spareMin {
		return false, false
	}
	n, err := unix.Read(c.fd, space)
	switch {
	case err == unix.EAGAIN:
		return true, false
	case err == unix.EINTR:
		return false, false
	case err != nil:
		c.peerGone(errnoOf(err))
		return true, true
	case n == 0:
		c.peerGone(0)
		return true, true
	}
	if spareReadHook != nil {
		spareReadHook(n)
	}
	countReceived(c.fd, n)
	_ = p.df.Commit(n)
	p.drain()
	p.dropIdle()
	return n < len(space), true
}

// spareReadHook, set by tests only, sees each of readSpare's reads.
var spareReadHook func(n int)

// errStop is read's report that the data path stopped (a Terminate was
// sent) before it read anything.
var errStop = errors.New("data path stopped")

// feed takes bytes read from the socket elsewhere: the rest of a direct
// FPDU's payload first, then the deframer.
func (p *rcPath) feed(b []byte) bool {
	if d := p.dx; d != nil && d.on {
		k, ok := p.land(b)
		if !ok {
			return false
		}
		b = b[k:]
	}
	_, err := p.df.Write(b)
	return err == nil
}

// read reads the socket once: into the deframer, or, while a direct FPDU's
// payload is due, into its destination with the bytes after it (its pad
// and CRC, the next FPDU's header) into the deframer, in one readv. The
// destination's region is checked right before the read, under c.mu, as
// every copy into a region is (DeregMR waits for c.mu).
func (p *rcPath) read() (int, error) {
	d := p.dx
	if d == nil || !d.on || d.off == len(d.dst) {
		space := p.df.WriteSpace(rxChunk)
		if d != nil && (d.on || d.streak && p.df.Buffered() < iwarp.LengthFieldLen+iwarp.UntaggedHeaderLen) {
			// A direct FPDU's trailer is due, or the peer sends long
			// FPDUs: learn the next one's header before its payload is
			// read, into the deframer or not.
			space = space[:min(len(space), directLookahead)]
		}
		n, err := unix.Read(p.c.fd, space)
		if n > 0 {
			_ = p.df.Commit(n)
		}
		return n, err
	}
	if !d.m.valid.Load() {
		p.directRegionGone()
		return 0, errStop
	}
	if p.predict() {
		return p.readPredicted()
	}
	rest := d.dst[d.off:]
	space := p.df.WriteSpace(directLookahead)
	n, err := readv2(p.c.fd, (*[2]unix.Iovec)(d.iov[:2]), rest, space[:min(len(space), directLookahead)])
	if n > 0 {
		k := min(n, len(rest))
		if p.crc {
			d.crc = iwarp.CRC32cUpdate(d.crc, rest[:k])
		}
		d.off += k
		_ = p.df.Commit(n - k)
	}
	return n, err
}

// readv2 reads fd into a and then b with one readv(2), through iov (kept
// by the caller, so that nothing is allocated).
func readv2(fd int, iov *[2]unix.Iovec, a, b []byte) (int, error) {
	iov[0].Base, iov[1].Base = &a[0], nil
	iov[0].SetLen(len(a))
	iov[1].SetLen(0)
	cnt := 1
	if len(b) > 0 {
		iov[1].Base = &b[0]
		iov[1].SetLen(len(b))
		cnt = 2
	}
	n, _, e := unix.Syscall(unix.SYS_READV, uintptr(fd), uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
	iov[0].Base, iov[1].Base = nil, nil
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

// drain handles every complete FPDU buffered, then sends what they caused.
// An FPDU whose header is in but of whose payload at least directMin bytes
// are still to come is taken over from the deframer (startDirect): its
// payload is read straight into its destination.
func (p *rcPath) drain() {
	for !p.dead && p.c.state == csRTS {
		if d := p.dx; d != nil && d.on {
			if !p.endDirect() {
				break
			}
			continue
		}
		u, err := p.df.Next()
		if errors.Is(err, iwarp.ErrShort) {
			p.startDirect()
			break
		}
		if err != nil {
			p.terminate(iwarp.TerminateFor(err, nil), nil, err)
			return
		}
		if !p.firstRx {
			p.first()
		}
		if long := len(u) >= directMin; long || p.dx != nil {
			if p.dx == nil {
				p.dx = new(rxDirect)
			}
			p.dx.streak = long
		}
		p.handle(u)
	}
	p.pump()
}

// Direct placement: a Send or Write FPDU whose payload mostly has yet to
// arrive is read from the socket straight into the posted receive or the
// region it names, instead of into the deframer and copied from there
// (finding 15 in BENCHMARKS.md). Its header is checked as it arrives, with
// the checks of the deframed path (MSN, offset, receive length, STag,
// access, bounds, region valid), before any payload byte lands; the region
// is checked again before each read. With CRC on, the CRC is computed over
// the bytes as they land and checked when the FPDU's CRC arrives; a
// mismatch terminates the stream and fails the message, as siw does with
// the payload it placed as it came.
const (
	// directMin is the least payload still to come for which an FPDU is
	// placed directly: below it, copying from the deframer costs less
	// than reading the socket once more (a stream of 4 KiB messages, each
	// placed directly with a readv of its own, ran at a third of the
	// rate). It must stay below the FPDUs of a loopback connection, whose
	// MSS in a network namespace (32 741 here) makes them 32 KiB short of
	// a few bytes.
	directMin = 16 << 10
	// directLookahead is how much the readv of a direct FPDU reads past
	// its payload into the deframer: its pad and CRC and the next FPDU's
	// header, and no more of the next payload than a copy costs less than
	// one more read (512 bytes made a read of its own for most headers:
	// more system time than the copies saved).
	directLookahead = 4 << 10
)

// rxDirect is the FPDU being placed directly.
type rxDirect struct {
	on     bool
	streak bool // the last FPDU was long enough to be placed directly
	h      iwarp.Header
	hdr    [iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen]byte // its length field and header, for Terminates
	hl     int                                                  // bytes of hdr used
	m      *mr                                                  // dst's region
	dst    []byte                                               // the payload's destination
	off    int                                                  // bytes of dst placed
	pad    int
	crc    uint32 // CRC32c so far (with CRC on)

	// The FPDUs predicted after this one (readPredicted): np of them,
	// each with its predecessor's pad and CRC and its own length field
	// and header in tb[j][:tn[j]], and its payload span in the receive.
	np   int
	tb   [predictFPDUs][predictTB]byte
	tn   [predictFPDUs]uint8
	span [predictFPDUs][]byte
	miss int // messages to go before predicting again, after a wrong prediction

	iov [2 + 2*predictFPDUs]unix.Iovec // readv's vector, kept to allocate nothing
}

// startDirect takes over the incomplete FPDU at the head of the deframer
// if it is a Send or a Write with at least directMin bytes of payload
// still to come: its header is checked and consumed, and its payload
// buffered so far placed.
func (p *rcPath) startDirect() {
	b := p.df.Peek()
	if len(b) < iwarp.LengthFieldLen+iwarp.ControlLen {
		return
	}
	ulen := int(binary.BigEndian.Uint16(b))
	have := len(b) - iwarp.LengthFieldLen
	if ulen-have < directMin {
		return
	}
	op := iwarp.Opcode(b[iwarp.LengthFieldLen+1] & 0x0f)
	switch op {
	case iwarp.OpSend, iwarp.OpSendInv, iwarp.OpSendSE, iwarp.OpSendSEInv, iwarp.OpWrite:
	default:
		return
	}
	hl := op.HeaderLen()
	if have < hl {
		return
	}
	var h iwarp.Header
	u := b[iwarp.LengthFieldLen : iwarp.LengthFieldLen+have]
	buffered, err := iwarp.ParseULPDU(u, &h)
	if err != nil || h.Op != op {
		return // the deframed path reports it once the FPDU is in
	}
	if !p.firstRx {
		p.first()
	}
	countReceivedMessage(p.c.fd, h.Last)
	n := ulen - hl
	var dst []byte
	var m *mr
	var ok bool
	if op == iwarp.OpWrite {
		dst, ok = p.writeDst(&h, n, u)
	} else {
		dst, ok = p.sendDst(&h, n, u)
	}
	if !ok {
		return
	}
	if op == iwarp.OpWrite {
		m = p.in.wr.m
	} else {
		m = p.in.rcv.m
	}
	d := p.dx
	if d == nil {
		d = new(rxDirect)
		p.dx = d
	}
	head := iwarp.LengthFieldLen + hl
	if d.miss > 0 && h.MO == 0 && op != iwarp.OpWrite {
		d.miss-- // a message's first FPDU: one fewer to go unpredicted
	}
	d.on, d.h, d.m, d.dst, d.pad = true, h, m, dst, iwarp.Pad(ulen)
	d.hl = copy(d.hdr[:], b[:head])
	d.off = copy(dst, buffered)
	if p.crc {
		d.crc = iwarp.CRC32cUpdate(iwarp.CRC32cUpdate(0, b[:head]), dst[:d.off])
	}
	_ = p.df.Discard(head + d.off)
}

// land places bytes read elsewhere (conn.readable) into the direct FPDU's
// payload and returns how many it took.
func (p *rcPath) land(b []byte) (int, bool) {
	d := p.dx
	k := min(len(b), len(d.dst)-d.off)
	if k == 0 {
		return 0, true
	}
	if !d.m.valid.Load() {
		p.directRegionGone()
		return 0, false
	}
	placed := d.dst[d.off : d.off+k]
	copy(placed, b)
	if p.crc {
		// Summed where they landed: b is the reader's stack buffer, and
		// handing it to the CRC would move it to the heap.
		d.crc = iwarp.CRC32cUpdate(d.crc, placed)
	}
	d.off += k
	return k, true
}

// endDirect finishes the direct FPDU once its payload is placed and its
// pad and CRC are buffered: the CRC is checked (with CRC on) and the
// message goes on as after a deframed FPDU. It reports whether the FPDU is
// done, so that drain goes on with the next one.
func (p *rcPath) endDirect() bool {
	d := p.dx
	if d.off < len(d.dst) {
		return false
	}
	b := p.df.Peek()
	if len(b) < d.pad+iwarp.CRCLen {
		return false
	}
	u := d.hdr[iwarp.LengthFieldLen:d.hl]
	if p.crc && iwarp.CRC32cUpdate(d.crc, b[:d.pad]) != binary.LittleEndian.Uint32(b[d.pad:]) {
		d.on = false
		p.terminate(iwarp.TerminateFor(iwarp.ErrCRC, nil), nil, iwarp.ErrCRC)
		return false
	}
	_ = p.df.Discard(d.pad + iwarp.CRCLen)
	d.on, d.streak = false, true
	if d.h.Op == iwarp.OpWrite {
		p.writeDone(&d.h, len(d.dst))
	} else {
		p.sendDone(&d.h, len(d.dst), u)
	}
	d.dst, d.m = nil, nil
	return true
}

// directRegionGone ends the direct FPDU whose region was deregistered
// while its payload was due: as the deframed path does when it finds the
// region gone, the message fails and the stream terminates.
func (p *rcPath) directRegionGone() {
	d := p.dx
	d.on = false
	u := d.hdr[iwarp.LengthFieldLen:d.hl]
	ulen := len(u) + len(d.dst)
	if d.h.Op == iwarp.OpWrite {
		p.terminateAt(termTSTag, u, ulen, errSTag)
	} else {
		p.sendRegionGone(u, ulen)
	}
	d.dst, d.m = nil, nil
}

// first handles the peer's first FPDU. On the responder it ends the hold
// and, in P2P mode, is the RTR that completes the connection (answered by
// ackRTR); on a P2P initiator it stops repeatRTR.
func (p *rcPath) first() {
	p.firstRx = true
	p.stopTimer() // the hold, the wait for the RTR, or repeatRTR's
	if !p.hold {
		return
	}
	p.hold = false
	if p.waitRTR {
		p.waitRTR = false
		c := p.c
		// An id disconnected while it waited for the RTR has reported
		// DISCONNECTED (rcTransport.disconnect, under ep.mu): no
		// ESTABLISHED follows it.
		ep := c.ep
		ep.mu.Lock()
		live := !ep.discReported
		if live {
			raw := fabric.RawEvent{Type: fabric.EventEstablished, ResponderResources: uint8(min(c.ird, 255)), InitiatorDepth: uint8(min(c.ord, 255))}
			ep.emitLocked(&raw)
		}
		ep.mu.Unlock()
		if live {
			p.ackRTR()
		}
	}
}

// handle processes one ULPDU.
func (p *rcPath) handle(u []byte) {
	var hdr iwarp.Header // on the stack: nothing keeps it past the ULPDU
	h := &hdr
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

func (p *rcPath) rxSend(h *iwarp.Header, payload, u []byte) {
	dst, ok := p.sendDst(h, len(payload), u)
	if !ok {
		return
	}
	copy(dst, payload)
	p.sendDone(h, len(payload), u)
}

// sendDst checks an inbound Send FPDU carrying n bytes of payload, whose
// ULPDU starts with u (its header at least), and returns where its payload
// lands in the posted receive. The first FPDU of a message takes the
// receive. Every check (MSN, offset, the receive's length, its region
// still valid) comes before any byte lands; a failed one terminates the
// stream.
func (p *rcPath) sendDst(h *iwarp.Header, n int, u []byte) ([]byte, bool) {
	ulen := h.Len() + n // the ULPDU's length: u may hold only its start
	r := &p.inbound().rcv
	if !r.active {
		switch {
		case h.MSN != p.rxMSN[iwarp.QNSend]:
			p.terminateAt(termUTMSNRange, u, ulen, errMSN)
			return nil, false
		case h.MO != 0:
			p.terminateAt(termUTMO, u, ulen, errMO)
			return nil, false
		case p.qp == nil || !p.qp.popRecv(r):
			p.terminateAt(termUTNoBuf, u, ulen, errNoRecv)
			return nil, false
		}
		r.active, r.placed, r.status = true, 0, fabric.WCSuccess
		r.solicited = h.Op == iwarp.OpSendSE || h.Op == iwarp.OpSendSEInv
		r.inval = h.Op == iwarp.OpSendInv || h.Op == iwarp.OpSendSEInv
		r.invalSTag = h.InvalSTag
	} else if h.MSN != p.rxMSN[iwarp.QNSend] {
		p.terminateAt(termUTMSNRange, u, ulen, errMSN)
		return nil, false
	} else if h.MO != uint32(r.placed) {
		p.terminateAt(termUTMO, u, ulen, errMO)
		return nil, false
	}
	if n > len(r.wr.Buf)-r.placed {
		r.status = fabric.WCLocLenErr
		p.terminateAt(termUTNoBuf, u, ulen, errRecvTooSmall)
		return nil, false
	}
	if n > 0 && !r.m.valid.Load() {
		p.sendRegionGone(u, ulen)
		return nil, false
	}
	return r.wr.Buf[r.placed : r.placed+n], true
}

// sendRegionGone fails the receive being placed, whose region was
// deregistered: nothing more lands in it.
func (p *rcPath) sendRegionGone(u []byte, ulen int) {
	p.inbound().rcv.status = fabric.WCLocProtErr
	p.terminateAt(termDDPCatastro, u, ulen, errRegionGone)
}

// sendDone accounts for the n payload bytes of a Send FPDU placed at
// sendDst, and completes the receive on the message's last FPDU.
func (p *rcPath) sendDone(h *iwarp.Header, n int, u []byte) {
	r := &p.in.rcv
	r.placed += n
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
			p.terminateAt(termCannotInvalidate, u, h.Len()+n, errCannotInvalidate)
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
	dst, ok := p.writeDst(h, len(payload), u)
	if !ok {
		return
	}
	copy(dst, payload)
	p.writeDone(h, len(payload))
}

// writeDst checks an inbound RDMA Write FPDU carrying n bytes of payload,
// whose ULPDU starts with u (its header at least), and returns where its
// payload lands. Every check (STag, access, offset, bounds, the region
// still valid) comes before any byte lands; a failed one terminates the
// stream. A zero-length first FPDU (an RTR) is not checked and places
// nothing: false, without a Terminate.
func (p *rcPath) writeDst(h *iwarp.Header, n int, u []byte) ([]byte, bool) {
	ulen := h.Len() + n // the ULPDU's length: u may hold only its start
	if p.rrOn {
		p.terminateAt(termDDPCatastro, u, ulen, errInterleaved)
		return nil, false
	}
	if n == 0 && (p.in == nil || !p.in.wr.active) {
		return nil, false // zero-length Writes (and RTRs) are not checked
	}
	w := &p.inbound().wr
	if !w.active {
		m := p.lookup(h.STag)
		if m == nil || m.access&fabric.AccessRemoteWrite == 0 {
			p.terminateAt(termTSTag, u, ulen, errSTag)
			return nil, false
		}
		*w = rxWrite{active: true, m: m, stag: h.STag, to: h.TO}
	} else if h.STag != w.stag {
		p.terminateAt(termTSTag, u, ulen, errSTag)
		return nil, false
	} else if h.TO != w.to {
		p.terminateAt(termTBounds, u, ulen, errBounds)
		return nil, false
	}
	if !w.m.valid.Load() {
		p.terminateAt(termTSTag, u, ulen, errSTag)
		return nil, false
	}
	dst, ok := span(w.m, h.TO, n)
	if !ok {
		p.terminateAt(termTBounds, u, ulen, errBounds)
		return nil, false
	}
	return dst, true
}

// writeDone accounts for the n payload bytes of a Write FPDU placed at
// writeDst.
func (p *rcPath) writeDone(h *iwarp.Header, n int) {
	w := &p.in.wr
	w.to += uint64(n)
	if h.Last {
		*w = rxWrite{}
	}
}

func (p *rcPath) rxReadRequest(h *iwarp.Header, u []byte) {
	switch {
	case p.in != nil && p.in.rcv.active:
		p.terminate(termDDPCatastro, u, errInterleaved)
		return
	case !h.Last:
		p.terminate(termDDPCatastro, u, errNotLast)
		return
	case h.MSN != p.rxMSN[iwarp.QNReadRequest]:
		p.terminate(termUTMSNRange, u, errMSN)
		return
	case p.irqLen() >= int(p.ird):
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
	p.reads().irq.Push(irqEntry{sinkSTag: r.SinkSTag, sinkTO: r.SinkTO, src: src, m: m})
}

func (p *rcPath) rxReadResponse(h *iwarp.Header, payload, u []byte) {
	if p.in != nil && p.in.wr.active {
		p.terminate(termDDPCatastro, u, errInterleaved)
		return
	}
	if !p.rrOn {
		if p.orqLen() == 0 {
			p.terminate(termDDPCatastro, u, errNoRead)
			return
		}
		p.rrOn, p.rd.rrDone = true, 0
	}
	rd := p.rd
	e := rd.orq.Front()
	switch {
	case h.STag != e.sinkSTag:
		p.terminate(termTSTag, u, errSTag)
		return
	case h.TO != e.sinkTO+uint64(rd.rrDone),
		len(payload) > len(e.dst)-rd.rrDone,
		h.Last && rd.rrDone+len(payload) != len(e.dst):
		p.terminate(termTBounds, u, errBounds)
		return
	case len(payload) > 0 && !e.m.valid.Load():
		e.slot.done, e.slot.status = true, fabric.WCLocProtErr
		p.terminate(termTSTag, u, errRegionGone)
		return
	}
	rd.rrDone += copy(e.dst[rd.rrDone:], payload)
	if !h.Last {
		return
	}
	if e.slot != nil {
		e.slot.done, e.slot.status = true, fabric.WCSuccess
	}
	rd.orq.PopFront()
	p.rrOn = false
	p.completeSends()
}
