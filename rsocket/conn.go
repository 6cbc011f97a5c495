package rsocket

import (
	"encoding/binary"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/fabric"
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

	kData      = 1 // a data Write and its message: n send-queue slots (msgWRs)
	kDirect    = 2 // a direct (iomap) Write: one send-queue slot
	kIOMap     = 3 // an iomap entry Write and its message: n slots (msgWRs)
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

	// msgSend is rsockets' RS_OPT_MSG_SEND, chosen from this side's
	// device at createEP: message words go as 4-byte Sends after the
	// Writes they announce (iWARP); otherwise as the immediate data of
	// the Write itself, or of a zero-length Write (InfiniBand, RoCE).
	// Either way the receiving side takes both forms.
	msgSend bool
	swr     fabric.SendWR // postImm's work request, under mu
	// The Writes and Sends of messages posted as one list (postWriteMsg,
	// postMsgs) and the message words the Sends carry, under mu: one
	// message, or the data messages of one Write batched (batch).
	mwr   [2 * batchMsgs]fabric.SendWR
	mword [batchMsgs][msgSize]byte
	mn    int  // messages in mwr
	mlen  int  // their data bytes
	lists bool // the QP posts lists (fabric.SendListPoster): Write batches its messages

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
	// held: an accepting side on iWARP sends nothing until the
	// initiator's first message has arrived, as MPA asks of a responder
	// (RFC 5044): siw, as initiator without peer-to-peer mode, fails a
	// connection whose first FPDU reaches it before it has read the MPA
	// reply. The initiator speaks at once (its credits), so this costs
	// one message's flight.
	held bool

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
	ioLeft   int // the bytes a blocked IOWrite has left to write
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
	direct       bool      // blocked callers wait on the queues (inProcess)
	rwait, wwait cqWait    // a blocked Read's and Write's, under mu
	cwait        cqWait    // Close's or CloseWrite's, waiting for its sends, under mu
	wcs          [16]id.WC // pollCQs' scratch, under mu
}

func newConn(eng *engine, cfg config, passive bool) *Conn {
	c := &Conn{eng: eng, cfg: cfg, passive: passive, setup: make(chan error, 1),
		rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1), cwake: make(chan struct{}, 1),
		done: make(chan struct{}), order: binary.LittleEndian}
	if passive {
		c.phase = phAccepting
	}
	if c.cfg.pollTime < 0 && eng != nil {
		c.cfg.pollTime = pollTimeFor(eng.fab)
	}
	c.direct = eng != nil && inProcess(eng.fab)
	c.rwait.done, c.wwait.done, c.cwait.done = make(chan struct{}), make(chan struct{}), make(chan struct{})
	c.rdl.kick = func() { c.mu.Lock(); c.rwait.kick(); c.mu.Unlock() }
	c.wdl.kick = func() { c.mu.Lock(); c.wwait.kick(); c.mu.Unlock() }
	return c
}
func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
func (c *Conn) wakeAll() {
	c.wakeRead()
	c.wakeWrite()
	c.wakeCtl()
}

// createEP creates the queue pair and the buffers and posts the receives,
// as rs_create_ep. It runs before connect or accept; nothing is sent.
func (c *Conn) createEP() error {
	cfg := &c.cfg
	c.nslots = cfg.rqSize + extraRecvs
	c.msgSend = c.eng.msgSend(c.cm.DeviceName())
	attr := &id.QPInitAttr{Cap: id.QPCap{MaxSendWR: cfg.sqSize, MaxRecvWR: c.nslots,
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: max(cfg.inline, 64)}}
	if err := c.cm.CreateQP(attr); err != nil {
		return err
	}
	c.qp = c.cm.QP()
	_, c.lists = c.qp.(fabric.SendListPoster)
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
// in, the completion queues on the reactor (kernel fabric), the second
// half of the receive buffer offered. Called with mu held, on the loop.
func (c *Conn) established(ev *id.Event) {
	closed := false // a passive connection whose listener closed meanwhile
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
		// A listener closed while the connection was being accepted (in
		// P2P mode the responder is established only when the dialer's
		// RTR arrives, after the dialer is) closes it as an established
		// connection nobody accepted: the dialer reads the end.
		closed = l.closed
	default:
		return
	}
	c.laddr, c.raddr = newAddr(c.cm.LocalAddr()), newAddr(c.cm.RemoteAddr())
	c.rpoll = cqPoller{c: c, cq: c.qp.RecvCQ()}
	c.spoll = cqPoller{c: c, cq: c.qp.SendCQ()}
	if !c.direct {
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
	}
	c.phase = phOpen
	c.connected, c.readable, c.writable = true, true, true
	c.held = c.passive && c.msgSend
	c.updateCredits()
	if c.cfg.keepalive > 0 {
		c.ka = time.AfterFunc(c.cfg.keepalive, c.keepalive)
	}
	if c.passive {
		if closed {
			c.lis = nil
			go c.Close() // it takes mu, which the loop holds here
			return
		}
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
