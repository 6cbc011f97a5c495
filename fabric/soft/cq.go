package soft

import (
	"context"
	"fmt"
	"sync"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/poll"
)

// cq is a completion queue with its completion channel: an eventfd that is
// readable exactly while completions are queued (level semantics, so a
// reactor can multiplex it without the req_notify dance of verbs). It grows
// instead of overflowing.
//
// The eventfd exists, and is kept in step with the queue, only once Fd has
// been called: callers that wait with Wait (GetSendComp, GetRecvComp) never
// look at it, which saves two syscalls per completion and two descriptors
// per QP.
type cq struct {
	efd    *poll.EventFD // nil until Fd
	signal chan struct{}
	done   chan struct{}
	armed  bool // Fd was called: keep efd readable exactly while n > 0 (under mu)

	mu     sync.Mutex
	wcs    []fabric.WC // ring
	head   int
	n      int
	closed bool
}

func newCQ() (*cq, error) {
	return &cq{signal: make(chan struct{}, 1), done: make(chan struct{}), wcs: make([]fabric.WC, 16)}, nil
}

// Fd implements fabric.CQ. From the first call on, the descriptor is readable
// exactly while completions are queued. It is -1 if the queue is destroyed
// or no eventfd could be opened.
func (c *cq) Fd() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return -1
	}
	if !c.armed {
		efd, err := poll.NewEventFD()
		if err != nil {
			return -1
		}
		c.efd, c.armed = efd, true
		if c.n > 0 {
			_ = c.efd.Add(1)
		}
	}
	return c.efd.Fd()
}

// push queues a completion. Completions after close are dropped.
func (c *cq) push(wc fabric.WC) {
	countCompletion(wc.QPNum)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	if c.n == len(c.wcs) {
		grown := make([]fabric.WC, 2*len(c.wcs))
		for k := 0; k < c.n; k++ {
			grown[k] = c.wcs[(c.head+k)%len(c.wcs)]
		}
		c.wcs, c.head = grown, 0
	}
	c.wcs[(c.head+c.n)%len(c.wcs)] = wc
	c.n++
	if c.n == 1 && c.armed {
		_ = c.efd.Add(1)
	}
	c.mu.Unlock()
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// Poll implements fabric.CQ.
func (c *cq) Poll(out []fabric.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := 0
	for ; k < len(out) && c.n > 0; k++ {
		out[k] = c.wcs[c.head]
		c.wcs[c.head] = fabric.WC{}
		c.head = (c.head + 1) % len(c.wcs)
		c.n--
	}
	if k > 0 && c.n == 0 && c.armed {
		_, _ = c.efd.Read()
	}
	return k
}

// Len returns the number of queued completions.
func (c *cq) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// Wait implements fabric.CQ.
func (c *cq) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		n, closed := c.n, c.closed
		c.mu.Unlock()
		if n > 0 {
			return nil
		}
		if closed {
			return fmt.Errorf("soft: completion queue destroyed: %w", syscall.EBADF)
		}
		select {
		case <-c.signal:
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// close releases the eventfd; waiters return EBADF. As fabric.CQ asks, Fd is
// -1 from here on, and the eventfd is made readable before it is closed: a
// poller holding a duplicate of it (a reactor) wakes, finds Fd() < 0 and
// drops it.
func (c *cq) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.n = 0
	efd := c.efd
	if efd != nil {
		_ = efd.Add(1)
	}
	c.mu.Unlock()
	close(c.done)
	if efd != nil {
		_ = efd.Close()
	}
}
