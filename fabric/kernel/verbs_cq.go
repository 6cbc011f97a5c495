package kernel

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
	"github.com/cmrt/cmrt/internal/hooks"
	"github.com/cmrt/cmrt/internal/share"
	"github.com/cmrt/cmrt/poll"
)

// vcq is a completion queue of the kernel fabric: the driver's queue in
// shared memory, with its own completion channel, plus a software queue
// for the completions cmrt makes itself (work requests posted after the
// QP's connection is gone complete at once with WCWRFlushErr, as on the
// software fabric). Software completions follow the driver's.
//
// Notification: verbs channels fire once per arming. Wait arms the queue
// (REQ_NOTIFY_CQ, or the shared control word on siw), looks again, and
// waits for the channel. Fd gives a descriptor that is readable while
// completions are queued, as fabric.CQ says: an epoll set of the channel and
// an eventfd, made on the first call; from then on Poll consumes the
// channel's notification and re-arms whenever it empties the queue (and
// looks again, so a completion arriving in between is not missed), and
// raises the eventfd when it leaves completions behind.
type vcq struct {
	vd     *verbsDev
	handle uint32
	ch     *uverbs.CompChannel
	notify [uverbs.HeaderSize + 8]byte // REQ_NOTIFY_CQ, pre-encoded

	mu      sync.Mutex
	prov    provider.CQ
	qp      *vqp // the QP whose receive queue it serves (UD sources), or nil
	closed  bool
	armed   bool        // a notification was requested
	dirty   bool        // completions were taken since the last arming
	soft    []fabric.WC // software completions, oldest first
	raw     [32]provider.WC
	poller  *poll.Poller // Fd's epoll set, nil until Fd
	efd     *poll.EventFD
	pending bool      // efd raised
	onClose hooks.Set // OnClose's functions

	// A queue made apart from any QP (endpoint.CreateCQ), which QPs on
	// its device share, counts its users. It holds its device's context
	// (verbsDev.release on Destroy).
	shared bool
	share  share.Count
}

var _ fabric.CQ = (*vcq)(nil)

// newCQ creates a completion queue of depth entries with its channel.
func newCQ(vd *verbsDev, depth int) (*vcq, error) {
	ch, err := vd.ctx.CreateCompChannel()
	if err != nil {
		return nil, fmt.Errorf("kernel: create completion channel: %w", err)
	}
	c := &vcq{vd: vd, ch: ch}
	resp, err := vd.ctx.Exec(&uverbs.CreateCQ{CQE: uint32(depth), CompChannel: int32(ch.Fd()), DriverOut: vd.drv.CQDriverOut()})
	if err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("kernel: create_cq of %d entries: %w", depth, err)
	}
	var r uverbs.CreateCQResp
	_ = r.Decode(resp)
	c.handle = r.Handle
	c.prov, err = vd.drv.NewCQ(vd.ctx, r, resp[uverbs.CreateCQRespSize:])
	if err != nil {
		_, _ = vd.ctx.Exec(&uverbs.DestroyCQ{Handle: r.Handle})
		_ = ch.Close()
		return nil, fmt.Errorf("kernel: map completion queue: %w", err)
	}
	_, _ = (&uverbs.ReqNotifyCQ{Handle: r.Handle}).Encode(c.notify[:], 0)
	return c, nil
}

// CreateCQ implements fabric.CQCreator: a queue of at least depth entries
// (at most the device's maximum) on the id's device, for QPs of ids on
// that device to share; the id must be bound to it.
func (ep *endpoint) CreateCQ(depth int) (fabric.SharedCQ, error) {
	if depth < 1 {
		return nil, einval("create_cq: depth %d", depth)
	}
	d, _, err := ep.boundDevice("create_cq", nil)
	if err != nil {
		return nil, err
	}
	vd, err := ep.f.acquireVerbs(d)
	if err != nil {
		return nil, err
	}
	if m := int(vd.attr.MaxCQE); m > 0 && depth > m {
		depth = m
	}
	c, err := newCQ(vd, depth)
	if err != nil {
		vd.release()
		return nil, err
	}
	c.shared = true
	return c, nil
}

// Destroy implements fabric.SharedCQ.
func (c *vcq) Destroy() error {
	if !c.shared {
		return einval("destroy_cq: the queue belongs to its QP")
	}
	switch n, again := c.share.Destroy(); {
	case again:
		return einval("destroy_cq: queue destroyed")
	case n > 0:
		return fmt.Errorf("kernel: destroy_cq: %d QPs use the queue: %w", n, syscall.EBUSY)
	}
	c.close()
	c.destroyKernel()
	c.vd.release()
	return nil
}

// qpCQ returns a new QP's completion queue: its own of depth entries
// (given is nil), or the caller's shared queue, which must be on this
// device and is then counted as used (releaseQP gives it back).
func (vd *verbsDev) qpCQ(given fabric.SharedCQ, depth int) (*vcq, error) {
	if given == nil {
		return newCQ(vd, depth)
	}
	c, ok := given.(*vcq)
	if !ok || !c.shared || c.vd != vd {
		return nil, einval("create_qp: completion queue of another fabric or device")
	}
	if !c.share.Acquire() {
		return nil, einval("create_qp: completion queue destroyed")
	}
	return c, nil
}

// releaseQP is a QP's release of its queue, once the QP is gone from the
// kernel (or was never made): its own is closed and destroyed, a shared
// one loses a user and stays.
func (c *vcq) releaseQP() {
	if !c.shared {
		c.close()
		c.destroyKernel()
		return
	}
	c.share.Release()
}

// Fd implements fabric.CQ; -1 once the queue is destroyed or if the
// descriptors cannot be made.
func (c *vcq) Fd() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return -1
	}
	if c.poller == nil {
		p, err := poll.Open(2)
		if err != nil {
			return -1
		}
		efd, err := poll.NewEventFD()
		if err != nil {
			_ = p.Close()
			return -1
		}
		if p.Add(c.ch.Fd(), poll.In, 0) != nil || p.Add(efd.Fd(), poll.In, 1) != nil {
			_ = p.Close()
			_ = efd.Close()
			return -1
		}
		c.poller, c.efd = p, efd
		c.rearmLocked()
		c.setPendingLocked(!c.emptyLocked())
	}
	return c.poller.Fd()
}

// Poll implements fabric.CQ. It makes no system call while completions are
// queued, and does not allocate.
func (c *vcq) Poll(out []fabric.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || len(out) == 0 {
		return 0
	}
	n := c.takeLocked(out)
	if c.poller == nil {
		return n
	}
	for {
		if !c.emptyLocked() {
			if n == len(out) {
				c.setPendingLocked(true)
				return n
			}
			n += c.takeLocked(out[n:])
			continue
		}
		c.rearmLocked()
		if c.emptyLocked() {
			c.setPendingLocked(false)
			return n
		}
	}
}

// Wait implements fabric.CQ: it returns once a completion is queued, ctx ends,
// or the queue is destroyed (EBADF).
func (c *vcq) Wait(ctx context.Context) error {
	err := c.ch.Wait(ctx, c.ready)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed || err != nil {
		return fmt.Errorf("kernel: completion queue destroyed: %w", syscall.EBADF)
	}
	return nil
}

// ready is Wait's condition: completions queued, or the queue armed and
// still empty (then false).
func (c *vcq) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || !c.emptyLocked() {
		return true
	}
	c.rearmLocked()
	return !c.emptyLocked()
}

func (c *vcq) emptyLocked() bool { return len(c.soft) == 0 && c.prov.Empty() }

// rearmLocked empties the completion channel and arms the queue again
// unless the arming in place still stands.
//
// Drivers raise a notification after the completion is visible (rxe from
// a tasklet, after advancing the producer index), so a notification can
// come after its completion was taken, and an arming made meanwhile can be
// used up by that completion. Hence: the channel is read until it is
// empty every time (a notification left there would keep Fd readable with
// nothing to poll); the queue is armed again whenever completions were
// taken or a notification was read since the last arming; and a
// notification that comes later, having used up the arming, is read (and
// the queue re-armed) by the next look, which it triggers itself.
func (c *vcq) rearmLocked() {
	read := false
	for k := 0; k < 64; k++ {
		got, err := c.ch.TryRead()
		if !got || err != nil {
			break
		}
		read = true
	}
	if c.armed && !c.dirty && !read {
		return
	}
	c.dirty = false
	if c.prov.Arm(false) {
		if err := c.vd.ctx.Doorbell(c.notify[:]); err != nil {
			c.armed = false // not armed: the next look tries again
			return
		}
	}
	c.armed = true
}

func (c *vcq) setPendingLocked(v bool) {
	if c.efd == nil || v == c.pending {
		return
	}
	if v {
		_ = c.efd.Add(1)
	} else {
		_, _ = c.efd.Read()
	}
	c.pending = v
}

// takeLocked moves completions, the driver's first, into out.
func (c *vcq) takeLocked(out []fabric.WC) int {
	n := 0
	for n < len(out) {
		k := c.prov.Poll(c.raw[:min(len(out)-n, len(c.raw))])
		if k == 0 {
			break
		}
		c.dirty = true
		for j := 0; j < k; j++ {
			c.convert(&c.raw[j], &out[n])
			n++
		}
	}
	for n < len(out) && len(c.soft) > 0 {
		out[n] = c.soft[0]
		c.soft[0] = fabric.WC{}
		c.soft = c.soft[1:]
		n++
	}
	if len(c.soft) == 0 {
		c.soft = c.soft[:0:0]
	}
	return n
}

// convert maps a driver completion to the id layer's.
func (c *vcq) convert(w *provider.WC, out *fabric.WC) {
	*out = fabric.WC{WRID: w.WRID, Status: fabric.WCStatus(w.Status), Opcode: fabric.WCOpcode(w.Opcode), ByteLen: w.ByteLen, QPNum: w.QPNum}
	if w.Status > 0xFF {
		out.Status = fabric.WCGeneralErr
	}
	if w.Opcode&uverbs.WCOpRecv != 0 {
		switch {
		case w.Flags&uverbs.WCFlagWithInv != 0:
			out.Invalidated, out.InvalidatedRKey = true, w.Ex
		case w.Flags&uverbs.WCFlagWithImm != 0:
			out.WithImm, out.ImmData = true, htobe32(w.Ex)
		}
	}
	if q := c.qp; q != nil && q.ud && w.Opcode&uverbs.WCOpRecv != 0 {
		q.udRecvDone(w, out)
	}
}

// push queues a software completion.
func (c *vcq) push(wc fabric.WC) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.soft = append(c.soft, wc)
	c.setPendingLocked(true)
	c.mu.Unlock()
	c.ch.Kick()
}

// close unmaps the queue and closes its descriptors; waiters return EBADF.
// The kernel queue itself goes with DESTROY_CQ (destroyKernel).
func (c *vcq) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true // from here on Fd is -1 and Poll takes nothing
	fs := c.onClose.Close()
	c.mu.Unlock()
	// Those polling Fd let it go before it closes (see fabric.CQ): the
	// descriptor is an epoll set that cannot be made readable for good.
	for _, f := range fs {
		f()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.prov.Close()
	c.soft = nil
	if c.poller != nil {
		_ = c.poller.Close()
		_ = c.efd.Close()
	}
	_ = c.ch.Close()
}

// destroyKernel runs DESTROY_CQ (after the QP using the queue is gone).
func (c *vcq) destroyKernel() {
	_, _ = c.vd.ctx.Exec(&uverbs.DestroyCQ{Handle: c.handle})
}

// OnClose registers f to run when the queue is destroyed, after Fd returns
// -1 and before its descriptor is closed (see fabric.CQ); a reactor
// registering the queue uses it to let its duplicate go. stop unregisters
// f and reports whether it was still registered.
func (c *vcq) OnClose(f func()) (stop func() bool) {
	return c.onClose.Add(f)
}
