package soft

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/ring"
	"github.com/cmrt/cmrt/internal/share"
)

// errCQDestroyed is what Wait returns once the queue is destroyed.
var errCQDestroyed = fmt.Errorf("soft: completion queue destroyed: %w", syscall.EBADF)

// cq is a completion queue with its completion channel: a ring.Queue of
// work completions, whose eventfd is readable exactly while completions are
// queued (level semantics, so a reactor can multiplex it without the
// req_notify dance of verbs). It grows instead of overflowing.
//
// The eventfd exists, and is kept in step with the queue, only once Fd has
// been called: callers that wait with Wait (GetSendComp, GetRecvComp) never
// look at it, which saves two syscalls per completion and two descriptors
// per QP.
//
// The queues of an RC QP are filled by its connection alone: a goroutine
// that waits on one while the connection is in RTS reads the connection
// itself (waitDirect, rc_rxwait.go) instead of waiting for the loop to.
type cq struct {
	q *ring.Queue[fabric.WC]
	// qp is the RC QP whose connection fills the queue (nil: a UD QP's).
	qp *rcQP
	// parked is the direct reader parked in the netpoller on this
	// queue's behalf: a completion queued by another goroutine, or the
	// queue's close, kicks it.
	parked atomic.Pointer[rxWait]

	// A queue made apart from any QP (endpoint.CreateCQ), which QPs of
	// fab share, counts its users. fab is nil for a QP's own queue.
	fab   *Fabric
	share share.Count
}

func newCQ() (*cq, error) { return &cq{q: ring.NewQueue[fabric.WC](16, errCQDestroyed)}, nil }

// CreateCQ implements fabric.CQCreator: a queue for QPs of this fabric to
// share. depth bounds nothing here (the queue grows instead of
// overflowing) but must be at least 1, as ibv_create_cq's cqe. The id must
// be bound to a device, as for CreateQP.
func (ep *endpoint) CreateCQ(depth int) (fabric.SharedCQ, error) {
	ep.mu.Lock()
	bound, gone := ep.onDeviceLocked(), ep.destroyed
	ep.mu.Unlock()
	switch {
	case gone:
		return nil, einval("create_cq: id destroyed")
	case !bound:
		return nil, einval("create_cq: id not bound to a device")
	case depth < 1:
		return nil, einval("create_cq: depth %d", depth)
	}
	c, err := newCQ()
	if err != nil {
		return nil, err
	}
	c.fab = ep.f
	return c, nil
}

// Destroy implements fabric.SharedCQ.
func (c *cq) Destroy() error {
	if c.fab == nil {
		return einval("destroy_cq: the queue belongs to its QP")
	}
	switch n, again := c.share.Destroy(); {
	case again:
		return einval("destroy_cq: queue destroyed")
	case n > 0:
		return fmt.Errorf("soft: destroy_cq: %d QPs use the queue: %w", n, syscall.EBUSY)
	}
	c.close()
	return nil
}

// qpCQ returns a new QP's completion queue: its own (given is nil), or the
// caller's shared queue given, which it then counts as a user of
// (releaseQP gives it back).
func (f *Fabric) qpCQ(given fabric.SharedCQ) (*cq, error) {
	if given == nil {
		return newCQ()
	}
	c, ok := given.(*cq)
	if !ok || c.fab != f {
		return nil, einval("create_qp: completion queue of another fabric")
	}
	if !c.share.Acquire() {
		return nil, einval("create_qp: completion queue destroyed")
	}
	return c, nil
}

// releaseQP is a QP's destroy of its queue: its own is closed, a shared
// one loses a user and stays.
func (c *cq) releaseQP() {
	if c.fab == nil {
		c.close()
		return
	}
	c.share.Release()
}

// Fd implements fabric.CQ. From the first call on, the descriptor is readable
// exactly while completions are queued. It is -1 if the queue is destroyed
// or no eventfd could be opened.
func (c *cq) Fd() int { return c.q.Fd() }

// push queues a completion. Completions after close are dropped.
func (c *cq) push(wc fabric.WC) {
	countCompletion(wc.QPNum)
	_ = c.q.Push(&wc)
	c.kick()
}

// kick wakes the direct reader parked for the queue, if any.
func (c *cq) kick() {
	if w := c.parked.Load(); w != nil {
		w.kick()
	}
}

// Poll implements fabric.CQ.
func (c *cq) Poll(out []fabric.WC) int { return c.q.PopN(out) }

// Len returns the number of queued completions.
func (c *cq) Len() int { return c.q.Len() }

// Wait implements fabric.CQ: it returns once a completion is queued, ctx
// ends, or the queue is destroyed (EBADF). On an RC QP's queue whose
// connection is in RTS it reads the connection itself (waitDirect) while
// it waits.
func (c *cq) Wait(ctx context.Context) error {
	if c.qp != nil && !c.q.Ready() {
		if err := c.qp.waitDirect(ctx, c); err != nil {
			return err
		}
	}
	return c.q.Wait(ctx)
}

// close drops what is queued and releases the eventfd; waiters return
// EBADF. As fabric.CQ asks, Fd is -1 from here on, and the eventfd is made
// readable before it is closed: a poller holding a duplicate of it (a
// reactor) wakes, finds Fd() < 0 and drops it.
func (c *cq) close() {
	c.q.Close()
	c.kick()
}
