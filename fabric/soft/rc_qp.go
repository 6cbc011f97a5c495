package soft

// The RC data path (rc_qp.go: the QP and its rings; rc_path.go: the data
// path of a connection and its send side; rc_rx.go: its receive side;
// rc_terminate.go: Terminates, sent and received).
//
// Semantics, in brief:
//   - A QP may exist before its connection. Receives posted before RTS are
//     kept. Sends are refused (EINVAL) until the QP is in RTS, as verbs
//     refuse them: on the passive side from the moment Accept returns, on
//     the active side from ESTABLISHED on; what the wire cannot take yet
//     (the responder's hold, a P2P RTR) waits in order. After the
//     connection ends (disconnect, FIN, Terminate, reject) every
//     outstanding request completes with WCWRFlushErr, and later ones
//     complete at once the same way.
//   - Regions belong to the id's protection domain (mr.go). Every copy to
//     or from one, inbound placement and outbound FPDU alike, checks right
//     before it that the region is still valid, holding the connection's
//     lock; DeregMR takes that lock once after invalidating, so a
//     deregistered region is never touched again.
//   - A send posted on an idle connection is segmented, written and
//     completed on the posting goroutine (rcPath.post); the loop takes
//     over when the socket is full, when it is busy with the connection,
//     and for the rest of a burst of posts, which it packs into large
//     writes. A list posted at once (PostSendList) is one post: its
//     FPDUs go out together, with one write(2) when the socket takes them.
//     DestroyQP drops the Reads the peer asked for and any message in
//     flight; if there was one, the connection ends with a Terminate.
//   - Sends and Writes complete once their last byte is handed to TCP;
//     Reads when their response is placed. Completions are in posting order.
//   - FPDUs are sized to the socket's MSS as siw does (iwarp.MaxPayload),
//     with CRC32c when either side asked for it; any inbound segmentation
//     is accepted. Messages go out whole, one after the other; Read
//     Responses owed to the peer go before the send queue; a Read waits
//     (and everything behind it) while ORD Reads are outstanding.
//   - Protocol and protection errors from the peer (and a Send finding no
//     or too small a receive) get a Terminate with siw's layer and code,
//     DISCONNECTED on the id, and the connection closes; a Read the peer
//     answers with a Terminate completes with WCRemAccessErr or
//     WCRemOpErr. A Terminate from the peer closes the connection too.
//   - Initiators ask for MPA peer-to-peer mode with a Write RTR (WithP2P):
//     the responder sends nothing before the RTR, and then at once. A
//     responder whose initiator asked for no P2P mode (siw's) holds its
//     first FPDU until the initiator's first one or WithResponderHold's
//     delay (siw drops an initiator's connection when an FPDU arrives with
//     the MPA Reply).

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
)

// Queue sizes of an RC queue pair.
const (
	defaultRCQueueDepth = 256     // MaxSendWR / MaxRecvWR of 0
	maxRCQueueDepth     = 1 << 15 // above: EINVAL, as siw's SIW_MAX_QP_WR
	defaultMaxInline    = 256     // MaxInlineData of 0
	maxRCInline         = 64 << 10
)

// qpState is where an RC queue pair is.
type qpState uint8

const (
	// qpReset: not yet on a connection in RTS. Receives are queued, sends
	// refused.
	qpReset qpState = iota
	// qpRTS: attached to a connection's data path.
	qpRTS
	// qpError: the connection is gone. Outstanding work requests were
	// flushed; new ones complete at once with WCWRFlushErr.
	qpError
)

// sendSlot is one send queue entry. wr and inline are written by the poster
// before the slot is published (sqTail); everything else belongs to the
// loop until the slot is retired (sqHead).
type sendSlot struct {
	wr     fabric.SendWR
	m      *mr    // the region of wr.Buf; nil for inline or empty buffers
	inline []byte // SendInline copy, reused with the slot

	endPos uint64          // tx stream position after its last FPDU; 0 until queued
	done   bool            // a Read's response arrived, or the slot failed locally
	status fabric.WCStatus // completion status when done
}

// recvSlot is one receive queue entry.
type recvSlot struct {
	wr fabric.RecvWR
	m  *mr
}

// slotChunk is how many queue entries are allocated at a time.
const slotChunk = 16

// slots is the ring of a work queue of depth entries, allocated by chunks
// as posts first reach them: a QP created with the default depth (256)
// whose application keeps a few requests outstanding holds a few chunks,
// not the 50 KiB both full rings took, which was most of what creating a
// QP cost. Entries never move, so pointers to them stay valid.
type slots[T any] struct {
	chunks []*[slotChunk]T
	depth  uint64
}

func newSlots[T any](depth int) slots[T] {
	return slots[T]{chunks: make([]*[slotChunk]T, (depth+slotChunk-1)/slotChunk), depth: uint64(depth)}
}

// at returns entry i (a queue index, taken modulo the depth), which a post
// has made exist.
func (s *slots[T]) at(i uint64) *T {
	k := i % s.depth
	return &s.chunks[k/slotChunk][k%slotChunk]
}

// alloc returns entry i for a post, allocating its chunk on first use.
func (s *slots[T]) alloc(i uint64) *T {
	k := i % s.depth
	c := s.chunks[k/slotChunk]
	if c == nil {
		c = new([slotChunk]T)
		s.chunks[k/slotChunk] = c
	}
	return &c[k%slotChunk]
}

// rcQP is the queue pair of an RC endpoint: the iWARP data path on the
// endpoint's TCP connection. Work requests go into fixed rings guarded by
// mu; the connection's data path (rcPath), on the loop or on the posting
// goroutine, consumes them and writes completions.
// A queue pair may be created before the connection exists (after
// ROUTE_RESOLVED, or on CONNECT_REQUEST before accept) and attaches to it
// when it reaches RTS; see PostSend and PostRecv for what happens before.
type rcQP struct {
	ep        *endpoint
	num       uint32
	sigAll    bool
	maxInline int
	scq, rcq  *cq
	pd        *pd // the id's protection domain

	mu        sync.Mutex
	state     qpState
	destroyed bool
	path      *rcPath // the data path it is attached to (qpRTS)
	sq        slots[sendSlot]
	sqHead    uint64 // oldest slot not yet completed
	sqCur     uint64 // next slot the loop starts (loop writes, under mu)
	sqTail    uint64 // next free slot
	rq        slots[recvSlot]
	rqHead    uint64
	rqTail    uint64
}

// rcQPNum numbers RC queue pairs; numbers are unique in the process, so
// per fabric.
var rcQPNum atomic.Uint32

// rcQP returns the endpoint's RC queue pair, if it has one: the
// connection looks it up when it reaches RTS, whether the QP was created
// before or after connect. ep is nil on a passive connection before its
// request.
func (ep *endpoint) rcQP() *rcQP {
	t := ep.rc()
	if t == nil {
		return nil
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return t.qp
}

func queueDepth(n int) (int, error) {
	switch {
	case n == 0:
		return defaultRCQueueDepth, nil
	case n < 0 || n > maxRCQueueDepth:
		return 0, fmt.Errorf("soft: queue depth %d out of range 1..%d: %w", n, maxRCQueueDepth, syscall.EINVAL)
	}
	return n, nil
}

// createQP implements transport: the iWARP data path of an RC endpoint.
func (t *rcTransport) createQP(attr *fabric.QPInitAttr) (fabric.QP, error) {
	ep := t.ep
	sd, err := queueDepth(attr.Cap.MaxSendWR)
	if err != nil {
		return nil, err
	}
	rd, err := queueDepth(attr.Cap.MaxRecvWR)
	if err != nil {
		return nil, err
	}
	inl := attr.Cap.MaxInlineData
	switch {
	case inl < 0 || inl > maxRCInline:
		return nil, fmt.Errorf("soft: inline size %d out of range 0..%d: %w", inl, maxRCInline, syscall.EINVAL)
	case inl < defaultMaxInline:
		inl = defaultMaxInline
	}
	pd, err := ep.protection()
	if err != nil {
		return nil, err
	}
	q := &rcQP{ep: ep, num: rcQPNum.Add(1), sigAll: attr.SigAll, maxInline: inl, pd: pd,
		sq: newSlots[sendSlot](sd), rq: newSlots[recvSlot](rd)}
	if q.scq, err = ep.f.qpCQ(attr.SendCQ); err != nil {
		return nil, err
	}
	if q.rcq, err = ep.f.qpCQ(attr.RecvCQ); err != nil {
		q.scq.releaseQP()
		return nil, err
	}
	// Its own queues are filled by its connection only: a goroutine
	// waiting on one may read that connection itself (waitDirect). A
	// shared queue is filled by every connection of its QPs, on their
	// loops.
	for _, c := range []*cq{q.scq, q.rcq} {
		if c.fab == nil {
			c.qp = q
		}
	}
	ep.mu.Lock()
	c, gone, dup := t.conn, ep.destroyed, t.qp != nil
	if !gone && !dup {
		t.qp = q
	}
	ep.mu.Unlock()
	if dup || gone {
		q.release()
		return nil, einval("create_qp: endpoint has a QP or is destroyed")
	}
	if c != nil {
		// Already connected (or connecting): attach on the loop if the
		// connection is in RTS, before returning, so the QP can send at
		// once; otherwise RTS finds the QP itself.
		c.l.call(func() {
			c.mu.Lock()
			c.attachLater(q)
			c.mu.Unlock()
		})
	}
	return q, nil
}

func (q *rcQP) release() {
	q.scq.releaseQP()
	q.rcq.releaseQP()
}

// Num implements fabric.QP.
func (q *rcQP) Num() uint32 { return q.num }

// SendCQ implements fabric.QP.
func (q *rcQP) SendCQ() fabric.CQ { return q.scq }

// RecvCQ implements fabric.QP.
func (q *rcQP) RecvCQ() fabric.CQ { return q.rcq }

// RegMR implements fabric.QP: the region is registered in the id's protection
// domain (as ibv_reg_mr on the QP's PD), where it outlives the QP. Its RKey
// is an STag peers name in RDMA Reads and Writes on the id's connection.
func (q *rcQP) RegMR(buf []byte, access fabric.Access) (fabric.MR, error) {
	q.mu.Lock()
	dead := q.destroyed
	q.mu.Unlock()
	if dead {
		return nil, einval("reg_mr: QP destroyed")
	}
	return q.pd.RegMR(buf, access)
}

// DeregMR implements fabric.QP (see pd.DeregMR): work requests posted on the
// region and not yet processed complete with WCLocProtErr, and no peer
// touches the region once it returns.
func (q *rcQP) DeregMR(x fabric.MR) error { return q.pd.DeregMR(x) }

// region returns the region of the QP's protection domain that x names.
func (q *rcQP) region(x fabric.MR) (*mr, error) { return q.pd.region(x) }

// checkSend validates a send work request at post time: what verbs would
// reject or fail at once is EINVAL here.
func (q *rcQP) checkSend(wr *fabric.SendWR) (*mr, error) {
	switch wr.Opcode {
	case fabric.WRSend, fabric.WRWrite, fabric.WRRead, fabric.WRSendWithInv:
	default:
		return nil, einval("post_send: opcode %d", wr.Opcode)
	}
	if wr.AH != nil || wr.RemoteQPN != 0 || wr.RemoteQKey != 0 {
		return nil, einval("post_send: UD addressing on an RC QP")
	}
	if len(wr.Buf) > math.MaxInt32 {
		return nil, einval("post_send: %d bytes", len(wr.Buf))
	}
	if wr.Flags&fabric.SendInline != 0 {
		if wr.Opcode == fabric.WRRead {
			return nil, einval("post_send: inline RDMA Read")
		}
		if len(wr.Buf) > q.maxInline {
			return nil, einval("post_send: %d inline bytes over %d", len(wr.Buf), q.maxInline)
		}
		return nil, nil
	}
	if wr.MR == nil {
		if len(wr.Buf) == 0 {
			return nil, nil
		}
		return nil, einval("post_send: buffer without a memory region")
	}
	m, err := q.region(wr.MR)
	if err != nil {
		return nil, err
	}
	if !m.contains(wr.Buf) {
		return nil, einval("post_send: buffer outside its memory region")
	}
	if wr.Opcode == fabric.WRRead && m.access&fabric.AccessLocalWrite == 0 {
		return nil, einval("post_send: RDMA Read into a region without local write access")
	}
	return m, nil
}

// PostSend implements fabric.QP. Before the QP is in RTS (on the passive side
// until Accept, on the active side until ESTABLISHED) it is EINVAL, as
// verbs refuse a send queue not in RTS; after the connection is gone the
// request completes at once with WCWRFlushErr. Requests are processed in
// order and complete in order: Sends and Writes once their last byte is
// handed to TCP (iWARP has no acknowledgement: the peer may not have
// placed them yet), Reads when their response has arrived. A queue already
// holding MaxSendWR uncompleted requests gives ENOMEM; malformed requests
// (bad opcode, buffer outside its region, region of another id) give
// EINVAL.
func (q *rcQP) PostSend(wr *fabric.SendWR) error {
	if wr == nil {
		return einval("post_send: nil work request")
	}
	m, err := q.checkSend(wr)
	if err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.sendableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	if err := q.queueSendLocked(wr, m); err != nil {
		q.mu.Unlock()
		return err
	}
	q.postedLocked()
	return nil
}

// PostSendList implements fabric.SendListPoster: the requests are
// validated and queued in order under one hold of the QP's lock, and the
// connection is told once, so that on an idle connection their FPDUs go
// out with one write(2) (an RDMA Write and the Send that announces it,
// say, which PostSend after PostSend writes with two). It returns how
// many were posted; on the first request PostSend would refuse (EINVAL,
// or ENOMEM when the send queue is full), that request's index with its
// error, the requests before it posted (they go out and complete as
// usual). An empty list posts nothing.
func (q *rcQP) PostSendList(wrs []fabric.SendWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	q.mu.Lock()
	if err := q.sendableLocked(); err != nil {
		q.mu.Unlock()
		return 0, err
	}
	n := 0
	var err error
	for ; n < len(wrs); n++ {
		var m *mr
		if m, err = q.checkSend(&wrs[n]); err != nil {
			break
		}
		if err = q.queueSendLocked(&wrs[n], m); err != nil {
			break
		}
	}
	if n == 0 {
		q.mu.Unlock()
		return 0, err
	}
	q.postedLocked()
	return n, err
}

// sendableLocked reports why the QP takes no send now: destroyed, or not
// yet in RTS. Called with mu held.
func (q *rcQP) sendableLocked() error {
	if q.destroyed {
		return einval("post_send: QP destroyed")
	}
	if q.state == qpReset {
		return einval("post_send: QP not in RTS (connection not established)")
	}
	return nil
}

// queueSendLocked queues wr (checked: m is its region) at the send
// queue's tail, or gives ENOMEM when the queue is full. Called with mu
// held, the QP sendable.
func (q *rcQP) queueSendLocked(wr *fabric.SendWR, m *mr) error {
	if q.sqTail-q.sqHead >= q.sq.depth {
		return fmt.Errorf("soft: post_send: send queue full (%d): %w", q.sq.depth, syscall.ENOMEM)
	}
	s := q.sq.alloc(q.sqTail)
	s.wr, s.m = *wr, m
	s.endPos, s.done, s.status = 0, false, fabric.WCSuccess
	if wr.Flags&fabric.SendInline != 0 {
		s.inline = append(s.inline[:0], wr.Buf...)
		s.wr.Buf, s.wr.MR = s.inline, nil
	}
	q.sqTail++
	return nil
}

// postedLocked hands what was queued to the connection, once for any
// number of requests: flushed at once on a QP in error, else sent by the
// data path (rcPath.post). Called with mu held; it releases it.
func (q *rcQP) postedLocked() {
	st, p := q.state, q.path
	if st == qpError {
		q.flushLocked()
	}
	q.mu.Unlock()
	if st == qpRTS {
		p.post()
	}
}

// PostRecv implements fabric.QP. Receives may be posted in any state before the
// connection is gone; they are consumed in order by the peer's Sends (a
// Send finding none, or one too small, terminates the connection). After
// the connection is gone a receive completes at once with WCWRFlushErr. A
// receive with neither buffer nor region takes a zero-length Send; a region
// without a buffer is EINVAL.
func (q *rcQP) PostRecv(wr *fabric.RecvWR) error {
	if wr == nil {
		return einval("post_recv: nil work request")
	}
	var m *mr
	if len(wr.Buf) > 0 || wr.MR != nil {
		if len(wr.Buf) == 0 {
			return einval("post_recv: memory region without a buffer")
		}
		if wr.MR == nil {
			return einval("post_recv: buffer without a memory region")
		}
		var err error
		if m, err = q.region(wr.MR); err != nil {
			return err
		}
		if !m.contains(wr.Buf) {
			return einval("post_recv: buffer outside its memory region")
		}
		if m.access&fabric.AccessLocalWrite == 0 {
			return einval("post_recv: region without local write access")
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return einval("post_recv: QP destroyed")
	}
	if q.rqTail-q.rqHead >= q.rq.depth {
		return fmt.Errorf("soft: post_recv: receive queue full (%d): %w", q.rq.depth, syscall.ENOMEM)
	}
	*q.rq.alloc(q.rqTail) = recvSlot{wr: *wr, m: m}
	q.rqTail++
	if q.state == qpError {
		q.flushLocked()
	}
	return nil
}

// popRecv takes the oldest posted receive. Under the connection's lock (on
// the loop or a direct reader).
func (q *rcQP) popRecv(r *rxRecv) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.rqHead == q.rqTail || q.state != qpRTS {
		return false
	}
	s := q.rq.at(q.rqHead)
	r.wr, r.m = s.wr, s.m
	*s = recvSlot{}
	q.rqHead++
	return true
}

// sendWC is the completion of a send slot.
func (q *rcQP) sendWC(s *sendSlot, st fabric.WCStatus) fabric.WC {
	op := fabric.WCSend
	switch s.wr.Opcode {
	case fabric.WRWrite:
		op = fabric.WCRDMAWrite
	case fabric.WRRead:
		op = fabric.WCRDMARead
	}
	return fabric.WC{WRID: s.wr.WRID, Status: st, Opcode: op, ByteLen: uint32(len(s.wr.Buf)), QPNum: q.num}
}

// retireLocked completes the send slot at sqHead with status st: a completion is
// written if the request was signaled or failed. Called with mu held.
func (q *rcQP) retireLocked(st fabric.WCStatus) {
	s := q.sq.at(q.sqHead)
	if st != fabric.WCSuccess || q.sigAll || s.wr.Flags&fabric.SendSignaled != 0 {
		q.scq.push(q.sendWC(s, st))
	}
	inline := s.inline
	*s = sendSlot{inline: inline[:0]}
	q.sqHead++
}

// flushLocked completes every outstanding request with WCWRFlushErr; on a
// QP in error state. Called with mu held.
func (q *rcQP) flushLocked() {
	for q.sqHead < q.sqTail {
		q.retireLocked(fabric.WCWRFlushErr)
	}
	q.sqCur = q.sqTail
	for ; q.rqHead < q.rqTail; q.rqHead++ {
		s := q.rq.at(q.rqHead)
		q.rcq.push(fabric.WC{WRID: s.wr.WRID, Status: fabric.WCWRFlushErr, Opcode: fabric.WCRecv, QPNum: q.num})
		*s = recvSlot{}
	}
}

// fail moves the QP to the error state: requests already handed to TCP
// up to stream position written complete normally, the others are
// flushed. Loop only (or with no loop attached).
func (q *rcQP) fail(written uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == qpError {
		return
	}
	for q.sqHead < q.sqCur {
		s := q.sq.at(q.sqHead)
		st := fabric.WCWRFlushErr
		switch {
		case s.done:
			st = s.status
		case s.wr.Opcode != fabric.WRRead && s.endPos != 0 && s.endPos <= written:
			st = fabric.WCSuccess
		}
		q.retireLocked(st)
	}
	q.state, q.path = qpError, nil
	q.flushLocked()
}

// Destroy implements fabric.QP: the QP leaves its connection, its own
// completion queues are closed (shared ones stay, with what it queued
// there) and outstanding requests are dropped. The connection
// stays up, without a QP, until the id disconnects or is destroyed, unless
// the QP's work was on the wire (a message being sent or placed, a Read
// either side asked for): then it ends with a Terminate and DISCONNECTED,
// since the stream cannot go on without it. Once Destroy returns no peer
// reads or writes the id's memory through this QP.
func (q *rcQP) Destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return einval("destroy_qp: QP destroyed")
	}
	q.destroyed = true
	p := q.path
	q.mu.Unlock()
	q.ep.mu.Lock()
	if t := q.ep.rc(); t.qp == q {
		t.qp = nil
	}
	q.ep.mu.Unlock()
	if p != nil {
		p.c.l.call(func() {
			p.c.mu.Lock()
			p.detachQP(q)
			p.c.mu.Unlock()
		})
	}
	q.release()
	return nil
}
