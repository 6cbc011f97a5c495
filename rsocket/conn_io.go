package rsocket

import (
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/id"
)

// Read reads data into b, as rrecv.
func (c *Conn) Read(b []byte) (int, error) {
	c.rlock.Lock()
	defer c.rlock.Unlock()
	if expired(&c.rdl) {
		return 0, c.opErr("read", os.ErrDeadlineExceeded)
	}
	c.mu.Lock()
	for c.rmN == 0 || c.closed {
		err := c.readErr()
		if err == nil && len(b) == 0 {
			c.mu.Unlock()
			return 0, nil
		}
		if err == nil && c.spin(spinRead) {
			continue
		}
		c.mu.Unlock()
		if err == nil {
			err = c.block(&c.rwait, spinRead, c.rwake, &c.rdl)
		}
		if err != nil {
			if err == io.EOF {
				return 0, err
			}
			return 0, c.opErr("read", err)
		}
		c.mu.Lock()
	}
	n := c.copyOut(b)
	c.updateCredits()
	c.mu.Unlock()
	return n, nil
}

// readErr is what a Read with nothing to read returns. Called with mu held.
func (c *Conn) readErr() error {
	switch {
	case c.closed:
		return net.ErrClosed
	case !c.readable && c.phase == phOpen:
		return io.EOF
	case c.downErr != nil:
		return c.downErr
	}
	return nil
}

// copyOut moves announced data into b, message by message, as rrecv's
// loop. Called with mu held.
func (c *Conn) copyOut(b []byte) int {
	n := 0
	for n < len(b) && c.rmN > 0 {
		head := &c.rmsg[c.rmHead]
		k := min(len(b)-n, int(*head))
		if k == int(*head) {
			c.rseqNo++
			c.rmHead = (c.rmHead + 1) % len(c.rmsg)
			c.rmN--
		} else {
			*head -= uint32(k)
		}
		for k > 0 {
			m := copy(b[n:n+min(k, len(c.rbuf)-c.rOff)], c.rbuf[c.rOff:])
			if c.rOff += m; c.rOff == len(c.rbuf) {
				c.rOff = 0
			}
			n, k = n+m, k-m
			c.rPending -= m
			c.rAvail += m
		}
	}
	return n
}

// Write writes b, as rsend: in messages of up to 64 KiB, the first small so
// the transfer starts at once.
func (c *Conn) Write(b []byte) (int, error) {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	if expired(&c.wdl) {
		return 0, c.opErr("write", os.ErrDeadlineExceeded)
	}
	// Where the QP posts lists, the messages of a Write of up to maxXfer
	// bytes are batched (postWriteMsg) and posted before the Write waits
	// or returns (a longer one posts its messages one by one, and the
	// fabric's loop sends them while the rest is copied); posted counts
	// the bytes of the messages posted, what a failed post leaves
	// written.
	n, posted, olen := 0, 0, firstXfer
	batch := c.lists && len(b) <= maxXfer
	c.mu.Lock()
	for n < len(b) {
		if err := c.writeErr(); err != nil {
			if c.postMsgs() != nil {
				n = posted
			}
			c.mu.Unlock()
			return n, c.opErr("write", err)
		}
		left := len(b) - n
		if !c.canSend(left) {
			if err := c.postMsgs(); err != nil {
				return c.writeFailed(posted, err)
			}
			if !c.spin(spinWrite) {
				c.mu.Unlock()
				if err := c.block(&c.wwait, spinWrite, c.wwake, &c.wdl); err != nil {
					return n, c.opErr("write", err)
				}
				c.mu.Lock()
				continue
			}
		}
		x := left
		if olen < left {
			x = olen
			olen = min(2*olen, maxXfer)
		}
		x = min(x, int(c.tsgl[c.tsge].Len))
		k, err := c.postData(b[n:n+x], batch)
		if err != nil {
			return c.writeFailed(posted, err)
		}
		if n += k; c.mn == 0 {
			posted = n
		}
	}
	if err := c.postMsgs(); err != nil {
		return c.writeFailed(posted, err)
	}
	c.mu.Unlock()
	return n, nil
}

// writeFailed ends a Write whose post failed: the connection goes down,
// mu is released, and the Write reports the bytes of the messages posted
// before the failure. Called with mu held.
func (c *Conn) writeFailed(posted int, err error) (int, error) {
	c.down(fmt.Errorf("rsocket: post write: %w", err))
	c.mu.Unlock()
	return posted, c.opErr("write", err)
}

// writeErr is what stops a Write. Called with mu held.
func (c *Conn) writeErr() error {
	switch {
	case c.closed:
		return net.ErrClosed
	case c.downErr != nil:
		return c.downErr
	case c.shutWr:
		return syscall.EPIPE
	case !c.writable && c.phase == phOpen:
		return syscall.ECONNRESET // the peer disconnected
	}
	return nil
}

// canSend reports whether a data message may go now, as rs_can_send.
// Called with mu held.
func (c *Conn) canSend(left int) bool {
	if c.held || c.sqeAvail < c.msgWRs() || c.sseqNo == c.sseqComp || c.tsgl[c.tsge].Len == 0 {
		return false
	}
	if min(left, maxXfer, int(c.tsgl[c.tsge].Len)) <= c.cfg.inline {
		return true
	}
	_, space, _ := c.sbufChunk()
	return space >= min(left, sndLowat)
}

// sbufChunk returns where the next staged bytes go in sbuf and how many
// fit there contiguously, and how many bytes at the end are skipped to get
// there. sbuf is a ring released in order by send completions.
func (c *Conn) sbufChunk() (off, n, skip int) {
	size := len(c.sbuf)
	if c.sUsed == 0 {
		c.sPos = 0
		return 0, size, 0
	}
	start := ((c.sPos-c.sUsed)%size + size) % size
	if start < c.sPos {
		tail := size - c.sPos
		if tail >= sndLowat || tail >= start {
			return c.sPos, tail, 0
		}
		return 0, start, tail
	}
	return c.sPos, start - c.sPos, 0
}

// postData sends p, or as much of it as the send buffer takes in one
// piece, as one data message: an RDMA Write into the buffer the peer
// offered, announced by its message word (postWriteMsg). It returns the
// bytes sent. Called with mu held, with canSend.
//
// The target entry is advanced (and, used up, cleared) before the Write
// is posted, as rs_write_data does: once posted, the peer may read the
// data, offer the half again and write its new descriptor into tbuf
// before this goroutine runs again, and a clear made after the post would
// erase that descriptor (the connection then waits for an entry it never
// sees again: the kernel fabric's interop hang).
//
// With batch (a Write's data messages, where the QP posts lists) the
// message may wait in mwr for the next ones (postWriteMsg).
func (c *Conn) postData(p []byte, batch bool) (int, error) {
	t := &c.tsgl[c.tsge]
	addr, key := t.Addr, t.Key
	buf, mr, flags, rel := p, id.MR(nil), id.SendInline, 0
	if len(p) > c.cfg.inline {
		off, space, skip := c.sbufChunk()
		if len(p) > space {
			p = p[:space]
		}
		buf, mr, flags = c.sbuf[off:off+len(p)], c.smr, 0
		copy(buf, p)
		rel = len(p) + skip
		c.sUsed += rel
		c.sPos = off + len(p)
	}
	n := c.msgWRs()
	c.sseqNo++
	c.sqeAvail -= n
	sgeUsed := c.tsge
	t.Addr += uint64(len(buf))
	if t.Len -= uint32(len(buf)); t.Len == 0 {
		// Used up: the peer may now write its next descriptor here.
		// rsockets peers' entries are read whenever used up: clear it.
		if c.peer.Flags&connFlagMarked == 0 {
			clear(c.tbuf[c.tsge*sgeLen : (c.tsge+1)*sgeLen])
		}
		c.tsge = (c.tsge + 1) % len(c.tsgl)
		// Posted at once, not batched: the peer offers the entry
		// again only once it has this message.
		batch = false
	}
	if err := c.postWriteMsg(sendID(kData, uint64(n), rel), buf, mr, flags, addr, key, msgWord(opData, uint32(len(buf))), batch); err != nil {
		return 0, err
	}
	if testPostedData != nil && c.mn == 0 {
		testPostedData(c, sgeUsed, t.Len == 0)
	}
	return len(buf), nil
}

// testPostedData, set by tests only, runs after each postData that posted
// data Writes (mu held: one batched with the next ones is posted with
// them), with the target entry the last of them wrote into and whether it
// used it up.
var testPostedData func(c *Conn, sge int, usedUp bool)

// What spin waits for.
const (
	spinRead    = iota // data to read, or an end
	spinWrite          // room to send, or an end
	spinIOMap          // room to send an iomap entry (IOMap), or an end
	spinIOWrite        // room in the send queue and buffer for ioLeft bytes (IOWrite), or an end
)

// spin polls the completion queues itself for up to the poll time before
// its caller blocks, as rsockets polls for polling_time before it arms the
// completion channel: a reply that comes within it is taken without a hop
// through the reactor. It reports whether what the caller waits for (or
// an error) is there. Called with mu held.
func (c *Conn) spin(what int) bool {
	c.pollCQs()
	if c.ready(what) {
		return true
	}
	if c.cfg.pollTime <= 0 {
		return false
	}
	for t0 := time.Now(); time.Since(t0) < c.cfg.pollTime; {
		c.mu.Unlock()
		runtime.Gosched()
		c.mu.Lock()
		c.pollCQs()
		if c.ready(what) {
			return true
		}
	}
	return false
}

// wait blocks until ch is signalled, the connection is closed or the
// deadline passes.
func (c *Conn) wait(ch chan struct{}, dl *deadline) error {
	select {
	case <-ch:
		return nil
	case <-c.done:
		return net.ErrClosed
	case <-dl.wait():
		return os.ErrDeadlineExceeded
	}
}
func expired(dl *deadline) bool {
	select {
	case <-dl.wait():
		return true
	default:
		return false
	}
}
func (c *Conn) opErr(op string, err error) error {
	var src, dst net.Addr
	if c.laddr != nil {
		src = c.laddr
	}
	if c.raddr != nil {
		dst = c.raddr
	}
	return &net.OpError{Op: op, Net: "rsocket", Source: src, Addr: dst, Err: err}
}

// CloseWrite shuts down the sending side, as rshutdown(SHUT_WR): the peer
// reads io.EOF once it has read everything written before. Reads go on.
func (c *Conn) CloseWrite() error {
	c.wlock.Lock()
	defer c.wlock.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("close", net.ErrClosed)
	}
	if !c.writable || c.phase != phOpen {
		return nil
	}
	c.writable, c.shutWr = false, true
	code := uint32(ctrlShutdown)
	if !c.readable {
		code = ctrlDisconnect
	}
	if !c.waitCtrl() {
		return c.opErr("close", fmt.Errorf("rsocket: no control slot: %w", syscall.ETIMEDOUT))
	}
	if c.connected {
		c.sendCtrl(code)
		if code == ctrlDisconnect {
			c.connected = false
		}
	}
	return nil
}

// waitCtrl waits, with mu held (released while waiting), until a control
// message may be sent or the connection cannot send one; bounded by
// lingerTimeout. It reports false on timeout.
func (c *Conn) waitCtrl() bool {
	return c.awaitSends(func() bool { return !c.connected || c.ctrlAvail() })
}

// Close closes the connection: blocked and later calls fail with
// net.ErrClosed; the peer is told (it reads io.EOF after the data already
// written), the send queue drains (for up to a few seconds), and the
// connection and its resources are released. Closing again does nothing.
func (c *Conn) Close() error {
	first := false
	c.closeOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	c.mu.Lock()
	c.closed = true
	close(c.done)
	c.rwait.kick()
	c.wwait.kick()
	if c.ka != nil {
		c.ka.Stop()
	}
	if c.phase == phOpen && c.connected {
		c.readable, c.writable = false, false
		if c.waitCtrl() && c.connected {
			c.sendCtrl(ctrlDisconnect)
		}
		c.connected = false
	}
	c.awaitSends(c.allSendsDone)
	reg := c.cqReg
	c.cqReg, c.released = false, true
	c.mu.Unlock()
	c.release(reg)
	return nil
}

// release frees the connection's resources from a user goroutine.
func (c *Conn) release(cqReg bool) {
	if cqReg {
		_ = c.eng.r.UnregisterCQ(&c.spoll)
		_ = c.eng.r.UnregisterCQ(&c.rpoll)
	}
	_ = c.cm.Disconnect()
	_ = c.cm.Destroy()
	c.rdl.stop()
	c.wdl.stop()
	c.eng.release(false)
}

// LocalAddr returns the local address (*Addr).
func (c *Conn) LocalAddr() net.Addr { return c.laddr }

// RemoteAddr returns the peer's address (*Addr).
func (c *Conn) RemoteAddr() net.Addr { return c.raddr }

// SetDeadline sets the read and write deadlines.
func (c *Conn) SetDeadline(t time.Time) error {
	c.rdl.set(t)
	c.wdl.set(t)
	return nil
}

// SetReadDeadline sets the deadline of Read calls, pending ones included.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the deadline of Write calls, pending ones
// included.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.wdl.set(t)
	return nil
}
