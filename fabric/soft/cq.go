package soft

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/ring"
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
}

func newCQ() (*cq, error) { return &cq{q: ring.NewQueue[fabric.WC](16, errCQDestroyed)}, nil }

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
