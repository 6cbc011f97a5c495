package rsocket

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/id"
)

// phase is where a connection is in its life.
type phase uint8

const (
	phDialing   phase = iota // active side, before ESTABLISHED
	phAccepting              // passive side, accepted, before ESTABLISHED
	phOpen                   // established and set up
	phFailed                 // set-up failed or was abandoned
)

// Send work request ids carry what a completion gives back: the kind of
// message, how many send-queue or control slots it used, and the send
// buffer bytes it frees. Receive ids carry the message slot.
const (
	recvFlag = 1 << 63

	kData      = 1 // a data Write and its message: two send-queue slots
	kDirect    = 2 // a direct (iomap) Write: one send-queue slot
	kIOMap     = 3 // an iomap entry Write and its message: two slots
	kCredit    = 4 // a credit message, with or without an SGL Write: n control slots
	kCtrl      = 5 // a control message: one control slot
	kKeepalive = 6 // a zero-length Write: one control slot
)

func sendID(kind, n uint64, rel int) uint64 { return kind<<56 | n<<48 | uint64(uint32(rel)) }

func splitSendID(w uint64) (kind, n uint64, rel int) {
	return w >> 56 & 0x7f, w >> 48 & 0xff, int(uint32(w))
}

// lingerTimeout bounds how long Close waits for a control slot and for the
// send queue to drain before it disconnects.
const lingerTimeout = 3 * time.Second

// Conn is a connected rsocket: a net.Conn over an RC queue pair, speaking
// librdmacm's rsocket protocol, so the peer may be a C program using
// rsocket(7). It is safe for concurrent use: Reads are serialized with each
// other, and so are Writes.
//
// Read returns what has arrived, up to len(b) (a partial read), io.EOF once
// the peer has shut down its sending side (CloseWrite, rshutdown) or closed
// the connection in order and everything before that was read, and an
// error wrapping syscall.ECONNRESET when the connection ended without such
// notice (the peer died, the link broke). Write returns when its bytes are
// posted: copied into the send buffer (or inline) and queued as RDMA Writes
// into the peer's receive buffer; it blocks while the peer's buffer or
// credits are exhausted. Deadlines fail blocked and later calls with an
// error for which errors.Is(err, os.ErrDeadlineExceeded) holds; Close fails
// them with net.ErrClosed.
type Conn struct {
	eng     *engine
	cfg     config
	cm      *id.ID
	qp      id.QP
	laddr   *Addr
	raddr   *Addr
	passive bool
	lis     *Listener
	setup   chan error // the active side's set-up outcome

	// Registered memory. rbuf receives the peer's data (two halves offered
	// in turn); mbuf holds one 4-byte slot per posted receive for message
	// words; tbuf is where the peer writes the descriptors of the buffers
	// it offers (two SGL entries, then the iomap entries); sbuf stages
	// outgoing data.
	rbuf, mbuf, tbuf, sbuf []byte
	rmr, mmr, tmr, smr     id.MR
	nslots                 int // receives posted: rqSize + extraRecvs

	mu        sync.Mutex
	phase     phase
	setupSent bool
	peer      connData
	order     byteOrder // the peer's byte order
	connected bool      // rsockets' rs_connected: control messages may flow
	readable  bool      // the peer may still send us data
	writable  bool      // we may still send data
	downErr   error     // why the connection failed, if it did
	closed    bool
	released  bool // Close is releasing the queue pair: nothing polls it any more
	shutWr    bool // CloseWrite was called
	cqReg     bool
	pending   bool // a passive connection counted in its listener's pending

	// Receive side.
	rOff     int      // where the next unread byte is in rbuf
	rPending int      // bytes announced and not yet read
	rmsg     []uint32 // ring of the lengths of unread data messages
	rmHead   int
	rmN      int
	rAvail   int // bytes read and not yet offered to the peer again
	rFree    int // offset of the next half to offer
	rseqNo   uint16
	rseqComp uint16
	remSGL   sge    // the peer's target SGL
	remSGE   uint32 // the entry of it we write next
	remIOMap sge    // the peer's target iomap (Len: entries)

	// Send side.
	tsgl     [2]sge // the buffers the peer offered (local copies of tbuf's)
	tsge     int    // the one being filled
	nextSGE  int    // the entry a marked credit message updated (connFlagMarked)
	iomaps   []iomap
	lmaps    []*ioMapping // our mappings, by the peer's iomap index
	sPos     int
	sUsed    int
	sqeAvail int
	sseqNo   uint16
	sseqComp uint16
	ctrlSeq  uint32
	ctrlMax  uint32
	scratch  [iomapLen]byte

	rwake, wwake, cwake chan struct{}
	done                chan struct{} // closed by Close
	rdl, wdl            deadline
	rlock, wlock        sync.Mutex
	closeOnce           sync.Once
	ka                  *time.Timer
	keepalives          int // keepalives sent and completed, under mu

	rpoll, spoll cqPoller
	wcs          [16]id.WC // pollCQs' scratch, under mu
}

func newConn(eng *engine, cfg config, passive bool) *Conn {
	c := &Conn{eng: eng, cfg: cfg, passive: passive, setup: make(chan error, 1),
		rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1), cwake: make(chan struct{}, 1),
		done: make(chan struct{}), order: binary.LittleEndian}
	if passive {
		c.phase = phAccepting
	}
	return c
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *Conn) wakeAll() {
	wake(c.rwake)
	wake(c.wwake)
	wake(c.cwake)
}

// createEP creates the queue pair and the buffers and posts the receives,
// as rs_create_ep. It runs before connect or accept; nothing is sent.
func (c *Conn) createEP() error {
	cfg := &c.cfg
	c.nslots = cfg.rqSize + extraRecvs
	attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: cfg.sqSize, MaxRecvWR: c.nslots,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: max(cfg.inline, 64)}}
	if err := c.cm.CreateQP(attr); err != nil {
		return err
	}
	c.qp = c.cm.QP()
	c.rbuf = make([]byte, cfg.recvBuf)
	c.mbuf = make([]byte, c.nslots*msgSize)
	c.tbuf = make([]byte, len(c.tsgl)*sgeLen+cfg.iomapSize*iomapLen)
	c.sbuf = make([]byte, cfg.sendBuf)
	var err error
	if c.rmr, err = c.cm.RegWrite(c.rbuf); err != nil {
		return err
	}
	if c.tmr, err = c.cm.RegWrite(c.tbuf); err != nil {
		return err
	}
	if c.mmr, err = c.cm.RegMsgs(c.mbuf); err != nil {
		return err
	}
	if c.smr, err = c.cm.RegMsgs(c.sbuf); err != nil {
		return err
	}
	for k := 0; k < c.nslots; k++ {
		if err := c.postRecv(k); err != nil {
			return err
		}
	}
	c.rmsg = make([]uint32, c.nslots+1)
	c.iomaps = make([]iomap, cfg.iomapSize)
	half := len(c.rbuf) / 2
	c.rFree, c.rAvail = half, half
	c.rseqComp = uint16(cfg.rqSize >> 1)
	c.sqeAvail = cfg.sqSize - ctrlSlots
	c.ctrlMax = ctrlSlots
	return nil
}

func (c *Conn) postRecv(slot int) error {
	return c.cm.PostRecv(recvFlag|uint64(slot), c.mbuf[slot*msgSize:(slot+1)*msgSize], c.mmr)
}

// connData is what this side tells the peer at set-up. It always says
// little-endian: the peer writes our descriptors in that order.
func (c *Conn) connData() connData {
	flags := uint8(connFlagIOMap | connFlagMarked)
	if c.cfg.unmarked {
		flags = connFlagIOMap
	}
	return connData{Version: connVersion, Flags: flags, Credits: uint16(c.cfg.rqSize),
		IOMapSize: scaleOf(c.cfg.iomapSize),
		TargetSGL: sge{Addr: c.tmr.Addr(), Key: c.tmr.RKey(), Len: uint32(len(c.tsgl))},
		DataBuf:   sge{Addr: c.rmr.Addr(), Key: c.rmr.RKey(), Len: uint32(len(c.rbuf) / 2)}}
}

// savePeer takes in the peer's connection data, as rs_save_conn_data.
// Called with mu held.
func (c *Conn) savePeer(d connData) {
	c.peer = d
	c.order = peerOrder(d.Flags)
	c.remSGL = d.TargetSGL
	c.remSGE = 1 % d.TargetSGL.Len
	c.tsgl[0] = d.DataBuf
	c.nextSGE = 1 % len(c.tsgl)
	c.sseqComp = d.Credits
	if d.Flags&connFlagIOMap != 0 {
		n := valueOf(d.IOMapSize)
		c.remIOMap = sge{Addr: d.TargetSGL.Addr + uint64(sgeLen)*uint64(d.TargetSGL.Len), Key: d.TargetSGL.Key, Len: uint32(n)}
		c.lmaps = make([]*ioMapping, n)
	}
}

// onEvent handles a CM event of the connection's id, on the reactor loop.
func (c *Conn) onEvent(ev *id.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase == phFailed {
		return
	}
	setupErr := func(err error) {
		if c.phase != phOpen {
			c.failOpen(err)
		}
	}
	switch ev.Type {
	case id.EventAddrResolved:
		if c.phase == phDialing {
			if err := c.cm.ResolveRoute(c.cfg.timeout); err != nil {
				c.failSetup(err)
			}
		}
	case id.EventRouteResolved:
		if c.phase == phDialing {
			if err := c.connect(); err != nil {
				c.failSetup(err)
			}
		}
	case id.EventEstablished:
		c.established(ev)
	case id.EventAddrError, id.EventRouteError, id.EventRejected, id.EventUnreachable, id.EventConnectError:
		setupErr(fmt.Errorf("rsocket: %s: %w", ev.Type, id.StatusErrno(ev.Type, ev.Status)))
	case id.EventDisconnected, id.EventDeviceRemoval:
		if c.phase != phOpen {
			setupErr(fmt.Errorf("rsocket: %s during set-up: %w", ev.Type, syscall.ECONNRESET))
			return
		}
		// Completions the transport queued before it went down come
		// first: a DISCONNECT message among them makes this an orderly
		// end. The loop runs the completion handlers too, so draining here
		// keeps their order.
		c.pollCQs()
		c.down(fmt.Errorf("rsocket: connection lost: %w", syscall.ECONNRESET))
	}
}

// failSetup reports a failed set-up to the dialer, once. Called with mu
// held.
func (c *Conn) failSetup(err error) {
	c.phase = phFailed
	if !c.setupSent {
		c.setupSent = true
		c.setup <- err
	}
}

// connect sends the connection request, after route resolution.
func (c *Conn) connect() error {
	if err := c.createEP(); err != nil {
		return err
	}
	d := c.connData()
	p := &id.ConnParam{PrivateData: d.marshal(nil), ResponderResources: 1, InitiatorDepth: 1,
		FlowControl: 1, RetryCount: 7, RNRRetryCount: 7}
	return c.cm.Connect(p)
}

// established finishes the set-up on ESTABLISHED: the peer's data taken
// in, the completion queues on the reactor, the second half of the receive
// buffer offered. Called with mu held, on the loop.
func (c *Conn) established(ev *id.Event) {
	switch c.phase {
	case phDialing:
		d, err := parseConnData(ev.PrivateData())
		if err != nil {
			c.failSetup(err)
			return
		}
		c.savePeer(d)
	case phAccepting:
		// The queue had room reserved for this connection in onRequest:
		// from here on it counts there, not as pending. l.mu is held
		// until it is queued, so Close cannot miss it.
		l := c.lis
		l.mu.Lock()
		defer l.mu.Unlock()
		l.pending--
		c.pending = false
		if l.closed {
			c.failOpen(net.ErrClosed)
			return
		}
	default:
		return
	}
	c.laddr, c.raddr = newAddr(c.cm.LocalAddr()), newAddr(c.cm.RemoteAddr())
	c.rpoll = cqPoller{c: c, cq: c.qp.RecvCQ()}
	c.spoll = cqPoller{c: c, cq: c.qp.SendCQ()}
	if err := c.eng.r.RegisterCQ(&c.spoll, noCompletions{}); err != nil {
		c.failOpen(err)
		return
	}
	if err := c.eng.r.RegisterCQ(&c.rpoll, noCompletions{}); err != nil {
		_ = c.eng.r.UnregisterCQ(&c.spoll)
		c.failOpen(err)
		return
	}
	c.cqReg = true
	c.phase = phOpen
	c.connected, c.readable, c.writable = true, true, true
	c.updateCredits()
	if c.cfg.keepalive > 0 {
		c.ka = time.AfterFunc(c.cfg.keepalive, c.keepalive)
	}
	if c.passive {
		c.lis.queue <- c // room was reserved in onRequest
		c.lis = nil
		return
	}
	c.setupSent = true
	c.setup <- nil
}

// failOpen gives up on a connection that cannot be served: the dialer
// is told; a passive connection is torn down here. Called with mu held.
func (c *Conn) failOpen(err error) {
	if !c.passive {
		c.failSetup(err)
		return
	}
	c.phase = phFailed
	if c.pending {
		c.pending = false
		c.lis.mu.Lock()
		c.lis.pending--
		c.lis.mu.Unlock()
	}
	c.lis = nil
	c.teardownInHandler()
}

// teardownInHandler destroys a passive connection that never reached its
// user (its completion queues were never registered), from the loop.
func (c *Conn) teardownInHandler() {
	_ = c.cm.Disconnect()
	_ = c.cm.Destroy()
	c.eng.release(true)
}

// down marks the transport gone. Called with mu held.
func (c *Conn) down(err error) {
	if c.downErr == nil {
		c.downErr = err
	}
	c.connected = false
	c.writable = false
	c.wakeAll()
}

// cqPoller is what the reactor polls for each completion queue of a
// connection: its Poll handles the connection's completions itself, under
// the connection's lock, and hands none to the reactor. So a Read or
// Write that finds nothing may poll the queues too (pollCQs) without
// waiting for the reactor, and completions are still handled one at a
// time, in order.
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
	slot := int(wc.WRID &^ recvFlag)
	if slot >= c.nslots || wc.ByteLen != msgSize {
		c.protocolError(fmt.Errorf("message of %d bytes in slot %d", wc.ByteLen, slot))
		return
	}
	m := c.order.Uint32(c.mbuf[slot*msgSize:])
	if c.connected {
		if err := c.postRecv(slot); err != nil {
			c.down(fmt.Errorf("rsocket: post receive: %w", err))
			return
		}
	}
	c.onMessage(m)
	c.updateCredits()
}

// onMessage acts on one message word. Called with mu held.
func (c *Conn) onMessage(m uint32) {
	switch msgOp(m) {
	case opSGL:
		c.sseqComp = uint16(msgData(m))
		switch {
		case c.peer.Flags&connFlagMarked == 0:
			// rsockets: any used-up entry may have been written.
			for j := range c.tsgl {
				if c.tsgl[j].Len == 0 {
					c.tsgl[j] = readSGE(c.tbuf[j*sgeLen:], binary.LittleEndian)
				}
			}
		case msgData(m)&msgSGEMark != 0:
			j := c.nextSGE
			c.tsgl[j] = readSGE(c.tbuf[j*sgeLen:], binary.LittleEndian)
			c.nextSGE = (j + 1) % len(c.tsgl)
		}
		wake(c.wwake)
	case opIOMapSGL:
		if k := int(msgData(m) & 0xffff); k < len(c.iomaps) {
			c.iomaps[k] = readIOMap(c.tbuf[len(c.tsgl)*sgeLen+k*iomapLen:], binary.LittleEndian)
		}
		wake(c.wwake)
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
		wake(c.rwake)
	}
	// opWrite is never sent; other opcodes are reserved: ignored, as
	// rsockets ignores them.
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
		c.sqeAvail += 2
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
	wake(c.wwake)
	wake(c.cwake)
}

// updateCredits offers the peer more receive buffer and message credits
// when enough was consumed, as rs_update_credits. Called with mu held.
func (c *Conn) updateCredits() {
	half := len(c.rbuf) / 2
	if !c.connected || c.phase != phOpen {
		return
	}
	if c.rAvail < half && int16(c.rseqNo-c.rseqComp) < 0 {
		return
	}
	if int32(c.ctrlSeq+1-c.ctrlMax) >= 0 { // two control slots needed
		return
	}
	c.ctrlSeq++
	rq := uint16(c.cfg.rqSize)
	c.rseqComp = c.rseqNo + rq/2
	msg := msgWord(opSGL, uint32(c.rseqNo)+uint32(rq))
	var err error
	if c.rAvail >= half {
		c.ctrlSeq++
		s := sge{Addr: c.rmr.Addr() + uint64(c.rFree), Key: c.rmr.RKey(), Len: uint32(half)}
		b := appendSGE(c.scratch[:0], c.order, s)
		err = c.cm.PostWrite(sendID(kCredit, 2, 0), b, nil, id.SendInline,
			c.remSGL.Addr+uint64(c.remSGE)*sgeLen, c.remSGL.Key)
		if !c.cfg.unmarked {
			msg |= msgSGEMark // cmrt peers read the entry when this arrives
		}
		if err == nil {
			err = c.postMsg(msg, sendID(kCredit, 2, 0))
		}
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

// postMsg sends a message word as a 4-byte inline Send (iWARP's
// RS_OPT_MSG_SEND), signaled. Called with mu held.
func (c *Conn) postMsg(m uint32, wrid uint64) error {
	b := c.order.AppendUint32(c.scratch[:0], m)
	return c.cm.PostSend(wrid, b, nil, id.SendInline|id.SendSignaled)
}

// ctrlAvail reports whether a control message may be sent.
func (c *Conn) ctrlAvail() bool { return c.ctrlSeq != c.ctrlMax }

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

// Read reads data into b, as rrecv.
func (c *Conn) Read(b []byte) (int, error) {
	c.rlock.Lock()
	defer c.rlock.Unlock()
	if expired(&c.rdl) {
		return 0, c.opErr("read", os.ErrDeadlineExceeded)
	}
	c.mu.Lock()
	for c.rmN == 0 {
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
			err = c.wait(c.rwake, &c.rdl)
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
	n, olen := 0, firstXfer
	c.mu.Lock()
	for n < len(b) {
		if err := c.writeErr(); err != nil {
			c.mu.Unlock()
			return n, c.opErr("write", err)
		}
		left := len(b) - n
		if !c.canSend(left) && !c.spin(spinWrite) {
			c.mu.Unlock()
			if err := c.wait(c.wwake, &c.wdl); err != nil {
				return n, c.opErr("write", err)
			}
			c.mu.Lock()
			continue
		}
		x := left
		if olen < left {
			x = olen
			olen = min(2*olen, maxXfer)
		}
		x = min(x, int(c.tsgl[c.tsge].Len))
		k, err := c.postData(b[n : n+x])
		if err != nil {
			c.down(fmt.Errorf("rsocket: post write: %w", err))
			c.mu.Unlock()
			return n, c.opErr("write", err)
		}
		n += k
	}
	c.mu.Unlock()
	return n, nil
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
	if c.sqeAvail < 2 || c.sseqNo == c.sseqComp || c.tsgl[c.tsge].Len == 0 {
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
// offered, then the message word. It returns the bytes sent. Called with
// mu held, with canSend.
func (c *Conn) postData(p []byte) (int, error) {
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
	wrid := sendID(kData, 2, rel)
	if err := c.cm.PostWrite(wrid, buf, mr, flags, addr, key); err != nil {
		return 0, err
	}
	if err := c.postMsg(msgWord(opData, uint32(len(buf))), wrid); err != nil {
		return 0, err
	}
	c.sseqNo++
	c.sqeAvail -= 2
	t.Addr += uint64(len(buf))
	if t.Len -= uint32(len(buf)); t.Len == 0 {
		// Used up: the peer may now write its next descriptor here.
		// rsockets peers' entries are read whenever used up: clear it.
		if c.peer.Flags&connFlagMarked == 0 {
			clear(c.tbuf[c.tsge*sgeLen : (c.tsge+1)*sgeLen])
		}
		c.tsge = (c.tsge + 1) % len(c.tsgl)
	}
	return len(buf), nil
}

// What spin waits for.
const (
	spinRead  = iota // data to read, or an end
	spinWrite        // room to send, or an end
)

// spin polls the completion queues itself for up to the poll time before
// its caller blocks, as rsockets polls for polling_time before it arms the
// completion channel: a reply that comes within it is taken without a hop
// through the reactor. It reports whether what the caller waits for (or
// an error) is there. Called with mu held.
func (c *Conn) spin(what int) bool {
	ready := func() bool {
		if c.closed || c.downErr != nil {
			return true
		}
		if what == spinRead {
			return c.rmN > 0 || !c.readable
		}
		return c.canSend(sndLowat) || !c.writable
	}
	c.pollCQs()
	if ready() {
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
		if ready() {
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
	t := time.NewTimer(lingerTimeout)
	defer t.Stop()
	for c.connected && !c.ctrlAvail() {
		c.mu.Unlock()
		select {
		case <-c.cwake:
		case <-t.C:
			c.mu.Lock()
			return false
		}
		c.mu.Lock()
	}
	return true
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
	t := time.NewTimer(lingerTimeout)
	for expired := false; !c.allSendsDone() && !expired; {
		c.mu.Unlock()
		select {
		case <-c.cwake:
		case <-t.C:
			expired = true
		}
		c.mu.Lock()
	}
	t.Stop()
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
