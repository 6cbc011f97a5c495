package soft

// The receive side of the RC data path: FPDUs read from the connection are
// deframed and placed (Sends into posted receives, Writes and Read
// Responses into regions) or queued (Read Requests, answered by the send
// side).

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// rx takes bytes the connection read and, when they filled the
// connection's read (more may be waiting), reads the socket straight into
// the deframer until it is drained or the budget is spent. A connection
// that never receives that much at once never grows the deframer to
// rxChunk.
func (p *rcPath) rx(b []byte) {
	c := p.c
	countReceived(c.fd, len(b))
	if _, err := p.df.Write(b); err != nil {
		return
	}
	p.drain()
	if len(b) < connReadSize {
		return
	}
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

// first handles the peer's first FPDU. On the responder it ends the hold
// and, in P2P mode, is the RTR that completes the connection; on a P2P
// initiator it stops repeatRTR.
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
		if !ep.discReported {
			raw := fabric.RawEvent{Type: fabric.EventEstablished, ResponderResources: uint8(min(c.ird, 255)), InitiatorDepth: uint8(min(c.ord, 255))}
			ep.emitLocked(&raw)
		}
		ep.mu.Unlock()
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
	case p.irq.Len() >= p.ird:
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
	p.irq.Push(irqEntry{sinkSTag: r.SinkSTag, sinkTO: r.SinkTO, src: src, m: m})
}

func (p *rcPath) rxReadResponse(h *iwarp.Header, payload, u []byte) {
	if p.wr.active {
		p.terminate(termDDPCatastro, u, errInterleaved)
		return
	}
	if !p.rrOn {
		if p.orq.Len() == 0 {
			p.terminate(termDDPCatastro, u, errNoRead)
			return
		}
		p.rrOn, p.rrDone = true, 0
	}
	e := p.orq.Front()
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
	p.orq.PopFront()
	p.rrOn = false
	p.completeSends()
}
