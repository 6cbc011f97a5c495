package rsocket

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

// cqPoller is what the reactor polls for each completion queue of a
// connection on the kernel fabric (elsewhere callers poll the queues
// themselves: cqWait): its Poll handles the connection's completions
// itself, under the connection's lock, and hands none to the reactor. So
// a Read or Write that finds nothing may poll the queues too (pollCQs)
// without waiting for the reactor, and completions are still handled one
// at a time, in order.
type cqPoller struct {
	c  *Conn
	cq id.CQ
}

func (p *cqPoller) Fd() int                        { return p.cq.Fd() }
func (p *cqPoller) Wait(ctx context.Context) error { return p.cq.Wait(ctx) }

// Poll implements id.CQ for the reactor: it handles every queued
// completion of the connection and returns 0.
func (p *cqPoller) Poll([]id.WC) int {
	p.c.mu.Lock()
	p.c.pollCQs()
	p.c.mu.Unlock()
	return 0
}

// noCompletions is the reactor's completion handler for cqPoller, which
// hands it none.
type noCompletions struct{}

func (noCompletions) HandleCompletion(*id.WC) error { return nil }

// pollCQs handles what the completion queues hold now. Called with mu
// held.
func (c *Conn) pollCQs() {
	if c.qp == nil || c.phase == phFailed || c.released {
		return
	}
	wcs := c.wcs[:]
	for {
		n := c.qp.RecvCQ().Poll(wcs)
		for k := 0; k < n; k++ {
			c.recvWC(&wcs[k])
		}
		m := c.qp.SendCQ().Poll(wcs)
		for k := 0; k < m; k++ {
			c.sendWC(&wcs[k])
		}
		if n < len(wcs) && m < len(wcs) {
			return
		}
	}
}

// recvWC handles a receive completion: a message word from the peer, as
// rs_poll_cq does. Called with mu held.
func (c *Conn) recvWC(wc *id.WC) {
	if wc.Status != id.WCSuccess {
		if c.downErr == nil && c.phase == phOpen {
			c.down(fmt.Errorf("rsocket: receive failed (%s): %w", wc.Status, syscall.ECONNRESET))
		}
		return
	}
	m, slot, err := wcMessage(wc, c.mbuf, c.order)
	if err != nil {
		c.protocolError(err)
		return
	}
	if c.held {
		c.held = false // the initiator has spoken: this side may send
		c.wakeAll()
	}
	if c.connected {
		if err := c.postRecv(slot); err != nil {
			c.down(fmt.Errorf("rsocket: post receive: %w", err))
			return
		}
	}
	c.onMessage(m)
	c.updateCredits()
}

// wcMessage returns the message word a successful receive completion
// carries, and the receive slot to post again, as rs_poll_cq takes it: the
// immediate data where the peer sent one (an RDMA Write with Immediate;
// verbs gives it in host order), else the 4-byte Send in the receive's slot
// of mbuf (RS_OPT_MSG_SEND), in the peer's byte order o. Either form is
// taken whatever this side sends, as rsockets takes both. A completion
// naming no slot of mbuf, or a Send of another size, is an error.
func wcMessage(wc *id.WC, mbuf []byte, o byteOrder) (m uint32, slot int, err error) {
	k := wc.WRID &^ recvFlag
	if wc.WRID&recvFlag == 0 || k >= uint64(len(mbuf)/msgSize) {
		return 0, 0, fmt.Errorf("receive completion %#x names no message slot", wc.WRID)
	}
	slot = int(k)
	if wc.WithImm {
		return wc.ImmData, slot, nil
	}
	if wc.ByteLen != msgSize {
		return 0, 0, fmt.Errorf("message of %d bytes in slot %d", wc.ByteLen, slot)
	}
	return o.Uint32(mbuf[slot*msgSize:]), slot, nil
}

// onMessage acts on one message word. Called with mu held.
func (c *Conn) onMessage(m uint32) {
	switch msgOp(m) {
	case opSGL:
		c.sseqComp = uint16(msgData(m))
		switch {
		case c.peer.Flags&connFlagMarked == 0:
			// rsockets: any used-up entry may have been written. This
			// message may precede the one that announces an entry,
			// while the peer's Write of it is still landing: a torn
			// entry (part new, part the zeros of a cleared one) is
			// not taken, and is read again at the next message (at
			// the latest at the entry's own, after its Write).
			for j := range c.tsgl {
				if c.tsgl[j].Len == 0 {
					if s := readSGE(c.tbuf[j*sgeLen:], binary.LittleEndian); c.offered(s) {
						c.tsgl[j] = s
					}
				}
			}
		case msgData(m)&msgSGEMark != 0:
			j := c.nextSGE
			c.tsgl[j] = readSGE(c.tbuf[j*sgeLen:], binary.LittleEndian)
			c.nextSGE = (j + 1) % len(c.tsgl)
		}
		c.wakeWrite()
	case opIOMapSGL:
		if k := int(msgData(m) & 0xffff); k < len(c.iomaps) {
			c.iomaps[k] = readIOMap(c.tbuf[len(c.tsgl)*sgeLen+k*iomapLen:], binary.LittleEndian)
		}
		c.wakeWrite()
	case opCtrl:
		switch msgData(m) {
		case ctrlDisconnect:
			c.connected, c.readable, c.writable = false, false, false
			c.wakeAll()
		case ctrlShutdown:
			if c.writable {
				c.readable = false
			} else {
				c.connected, c.readable = false, false
			}
			c.wakeAll()
		}
	case opData:
		n := int(msgData(m))
		if c.rmN == len(c.rmsg) || c.rPending+n > len(c.rbuf) {
			c.protocolError(fmt.Errorf("%d more bytes with %d of %d pending", n, c.rPending, len(c.rbuf)))
			return
		}
		if n == 0 {
			return
		}
		c.rmsg[(c.rmHead+c.rmN)%len(c.rmsg)] = uint32(n)
		c.rmN++
		c.rPending += n
		c.wakeRead()
	}
	// opWrite is never sent; other opcodes are reserved: ignored, as
	// rsockets ignores them.
}

// offered reports whether s is a descriptor an rsockets peer offers: a
// half of the receive buffer it announced at set-up (rs_send_credits
// offers its halves in turn, with that buffer's key), so that a
// descriptor read while the peer's Write of it was landing, or never
// written, is told from a whole one. Called with mu held.
func (c *Conn) offered(s sge) bool {
	b := c.peer.DataBuf
	return s.Len != 0 && s.Len <= b.Len && s.Key == b.Key &&
		s.Addr >= b.Addr && s.Addr-b.Addr <= 2*uint64(b.Len)-uint64(s.Len)
}

// protocolError ends a connection whose peer broke the protocol. Called
// with mu held.
func (c *Conn) protocolError(err error) {
	c.down(fmt.Errorf("rsocket: protocol error: %v: %w", err, syscall.EPROTO))
}

// sendWC handles a send completion: it returns the send-queue, control
// and buffer space the request held. Called with mu held.
func (c *Conn) sendWC(wc *id.WC) {
	if wc.Status != id.WCSuccess {
		if c.downErr == nil && c.phase == phOpen {
			errno := syscall.EIO
			if wc.Status == id.WCWRFlushErr {
				errno = syscall.ECONNRESET
			}
			c.down(fmt.Errorf("rsocket: send failed (%s): %w", wc.Status, errno))
		}
		c.wakeAll()
		return
	}
	kind, n, rel := splitSendID(wc.WRID)
	switch kind {
	case kData, kIOMap:
		c.sqeAvail += int(n)
		c.sUsed -= rel
	case kDirect:
		c.sqeAvail++
		c.sUsed -= rel
	case kCredit:
		c.ctrlMax += uint32(n)
	case kCtrl:
		c.ctrlMax++
	case kKeepalive:
		c.ctrlMax++
		c.keepalives++
	}
	c.updateCredits()
	c.wakeWrite()
	c.wakeCtl()
}

// updateCredits offers the peer more receive buffer and message credits
// when enough was consumed, as rs_update_credits. Called with mu held.
func (c *Conn) updateCredits() {
	half := len(c.rbuf) / 2
	if !c.connected || c.phase != phOpen || c.held {
		return
	}
	if c.rAvail < half && int16(c.rseqNo-c.rseqComp) < 0 {
		return
	}
	// An SGL entry and its message take two control slots where the
	// message is a Send of its own; rsockets asks for two then even when
	// it sends the message alone.
	if int32(c.ctrlSeq+uint32(c.msgWRs())-1-c.ctrlMax) >= 0 {
		return
	}
	c.ctrlSeq++
	rq := uint16(c.cfg.rqSize)
	c.rseqComp = c.rseqNo + rq/2
	msg := msgWord(opSGL, uint32(c.rseqNo)+uint32(rq))
	var err error
	if c.rAvail >= half {
		n := uint64(c.msgWRs())
		c.ctrlSeq += uint32(n - 1)
		s := sge{Addr: c.rmr.Addr() + uint64(c.rFree), Key: c.rmr.RKey(), Len: uint32(half)}
		b := appendSGE(c.scratch[:0], c.order, s)
		if !c.cfg.unmarked {
			msg |= msgSGEMark // cmrt peers read the entry when this arrives
		}
		err = c.postWriteMsg(sendID(kCredit, n, 0), b, nil, id.SendInline,
			c.remSGL.Addr+uint64(c.remSGE)*sgeLen, c.remSGL.Key, msg, false)
		c.rAvail -= half
		if c.rFree += half; c.rFree >= len(c.rbuf) {
			c.rFree = 0
		}
		c.remSGE = (c.remSGE + 1) % c.remSGL.Len
	} else {
		err = c.postMsg(msg, sendID(kCredit, 1, 0))
	}
	if err != nil {
		c.down(fmt.Errorf("rsocket: post credits: %w", err))
	}
}

// msgWRs is the number of send-queue slots a message with a Write takes:
// two (the Write and the Send) with msgSend, one (the Write with
// Immediate) without, as rsockets counts them.
func (c *Conn) msgWRs() int {
	if c.msgSend {
		return 2
	}
	return 1
}

// postMsg sends message word m alone, signaled, as rs_post_msg: a 4-byte
// inline Send with msgSend, else a zero-length RDMA Write with m as its
// immediate data. Called with mu held.
func (c *Conn) postMsg(m uint32, wrid uint64) error {
	if !c.msgSend {
		// Zero bytes need no address; the peer's target SGL is a valid one.
		return c.postImm(wrid, nil, nil, 0, c.remSGL.Addr, c.remSGL.Key, m)
	}
	b := c.order.AppendUint32(c.scratch[:0], m)
	return c.cm.PostSend(wrid, b, nil, id.SendInline|id.SendSignaled)
}

// postWriteMsg writes buf into the peer's memory at addr/rkey and
// announces it with message word m, as rs_post_write_msg: one RDMA Write
// with Immediate, or with msgSend an unsignaled Write followed by the
// word as a Send (placed after the Write's data, as RC orders them),
// posted as one list (fabric.PostSendList: on the software fabric both
// leave with one write(2)). Both forms complete once, as wrid, but for a
// Write from registered memory (mr, the send buffer), which is signaled
// and completes on its own: siw (the kernel's soft-iWARP) hands an
// unsignaled Write of a page or more to TCP by reference, not by copy
// (its zero-copy transmit), so its bytes are read from the send buffer
// while TCP holds them, after the Send behind it has completed; had the
// buffer been released at the Send's completion, the next Write's copy
// into it changed bytes still on their way (a C client read corrupted
// data from a Go server on the kernel fabric over siw0 under load).
// rsockets signals every request (its QPs are created with
// sq_sig_all), and siw copies a signaled one. The Write's completion
// then releases the buffer and its send-queue slot, the Send's the
// other slot. A fabric that completes in this process (c.direct: the
// software fabric) has copied a request's bytes before it completes it
// or any later one, and its Writes stay unsignaled. With batch (a Write's data messages) the message may stay in mwr, to go
// with the next ones: up to batchMsgs messages or maxXfer bytes, and
// postMsgs posts what is left. The work requests are the connection's
// own (the QP copies them), so posting allocates nothing. Called with mu
// held.
func (c *Conn) postWriteMsg(wrid uint64, buf []byte, mr id.MR, flags id.SendFlags, addr uint64, rkey, m uint32, batch bool) error {
	if !c.msgSend {
		return c.postImm(wrid, buf, mr, flags, addr, rkey, m)
	}
	k := c.mn
	wwrid, swrid := wrid, wrid
	if mr != nil && !c.direct {
		kind, n, rel := splitSendID(wrid)
		wwrid, swrid = sendID(kind, 1, rel), sendID(kind, n-1, 0)
		flags |= id.SendSignaled
	}
	c.mwr[2*k] = fabric.SendWR{WRID: wwrid, Opcode: fabric.WRWrite, Flags: flags, Buf: buf, MR: mr,
		RemoteAddr: addr, RKey: rkey}
	c.mwr[2*k+1] = fabric.SendWR{WRID: swrid, Opcode: fabric.WRSend, Flags: id.SendInline | id.SendSignaled,
		Buf: c.order.AppendUint32(c.mword[k][:0], m)}
	c.mn++
	c.mlen += len(buf)
	if batch && c.mn < batchMsgs && c.mlen < maxXfer {
		return nil
	}
	return c.postMsgs()
}

// batchMsgs bounds the data messages of one Write posted as one list.
// rsockets cuts a Write into messages that double from firstXfer (a
// 4 KiB Write is two of 2 KiB), so that the first is on the wire while
// the rest is copied; where the posting goroutine itself writes them to
// the fabric's socket, as the software fabric does, each list is a
// write(2), and the messages go faster together.
const batchMsgs = 4

// postMsgs posts the messages in mwr as one list. Called with mu held.
func (c *Conn) postMsgs() error {
	if c.mn == 0 {
		return nil
	}
	wl := c.mwr[:2*c.mn]
	n, err := fabric.PostSendList(c.qp, wl)
	clear(wl)
	c.mn, c.mlen = 0, 0
	if err != nil {
		op := "post_write"
		if n%2 == 1 {
			op = "post_send"
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// postImm posts a signaled RDMA Write with Immediate of buf with
// immediate data m. The work request is the connection's own (the QP
// copies it), so posting allocates nothing. Called with mu held.
func (c *Conn) postImm(wrid uint64, buf []byte, mr id.MR, flags id.SendFlags, addr uint64, rkey, m uint32) error {
	wr := &c.swr
	*wr = fabric.SendWR{WRID: wrid, Opcode: fabric.WRWriteWithImm, Flags: flags | id.SendSignaled,
		Buf: buf, MR: mr, RemoteAddr: addr, RKey: rkey, ImmData: m}
	err := c.qp.PostSend(wr)
	*wr = fabric.SendWR{}
	if err != nil {
		return fmt.Errorf("post_write_with_imm: %w", err)
	}
	return nil
}

// ctrlAvail reports whether a control message may be sent.
func (c *Conn) ctrlAvail() bool { return c.ctrlSeq != c.ctrlMax && !c.held }

// sendCtrl sends a control message. Called with mu held, with ctrlAvail.
func (c *Conn) sendCtrl(code uint32) {
	c.ctrlSeq++
	if err := c.postMsg(msgWord(opCtrl, code), sendID(kCtrl, 1, 0)); err != nil {
		c.down(fmt.Errorf("rsocket: post control message: %w", err))
	}
}

// keepalive sends a zero-length RDMA Write, as rsockets' keepalive
// service: it needs nothing from the peer but fails if the peer is gone.
func (c *Conn) keepalive() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.connected {
		return
	}
	if !c.cqReg {
		c.pollCQs() // the last keepalives' completions, with nobody else polling
	}
	if c.ctrlAvail() {
		c.ctrlSeq++
		if err := c.cm.PostWrite(sendID(kKeepalive, 1, 0), nil, nil, id.SendSignaled, 0, 0); err != nil {
			c.down(fmt.Errorf("rsocket: post keepalive: %w", err))
			return
		}
	}
	c.ka.Reset(c.cfg.keepalive)
}

// allSendsDone reports whether nothing is in the send queue, as
// rs_conn_all_sends_done.
func (c *Conn) allSendsDone() bool {
	return int(c.ctrlMax-c.ctrlSeq)+c.sqeAvail == c.cfg.sqSize || c.downErr != nil || c.phase != phOpen
}
