// Package evq is the event FIFO behind a software event channel: raw CM
// events in arrival order, with an eventfd that is readable exactly while
// the FIFO is not empty (the level semantics of the kernel's rdma_cm fd), and
// a blocking Pop that honours a context.
package evq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/poll"
)

// ErrClosed is returned by Push and Pop on a closed queue. It wraps
// fabric.ErrClosed and EBADF, as the kernel reports a closed channel fd.
var ErrClosed = fmt.Errorf("%w: %w", fabric.ErrClosed, syscall.EBADF)

// errAgain is returned by a non-blocking Pop on an empty queue.
var errAgain = fmt.Errorf("evq: no event queued: %w", syscall.EAGAIN)

// Queue is a FIFO of raw events with a pollable descriptor.
type Queue struct {
	efd    *poll.EventFD
	signal chan struct{} // one token while items may be waiting for a blocked Pop
	done   chan struct{} // closed by Close

	mu     sync.Mutex
	items  []fabric.RawEvent // ring buffer
	head   int
	n      int
	closed bool
}

// New returns an empty queue.
func New() (*Queue, error) {
	efd, err := poll.NewEventFD()
	if err != nil {
		return nil, err
	}
	return &Queue{efd: efd, signal: make(chan struct{}, 1), done: make(chan struct{}), items: make([]fabric.RawEvent, 8)}, nil
}

// Fd is readable while the queue holds events.
func (q *Queue) Fd() int { return q.efd.Fd() }

// Len returns the number of queued events.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

func (q *Queue) grow() {
	items := make([]fabric.RawEvent, 2*len(q.items))
	for k := 0; k < q.n; k++ {
		items[k] = q.items[(q.head+k)%len(q.items)]
	}
	q.items, q.head = items, 0
}

// pushLocked appends ev; the caller holds q.mu.
func (q *Queue) pushLocked(ev *fabric.RawEvent) error {
	if q.closed {
		return ErrClosed
	}
	if q.n == len(q.items) {
		q.grow()
	}
	q.items[(q.head+q.n)%len(q.items)] = *ev
	q.n++
	if q.n == 1 {
		if err := q.efd.Add(1); err != nil {
			return err
		}
	}
	return nil
}

func (q *Queue) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// Push appends a copy of ev.
func (q *Queue) Push(ev *fabric.RawEvent) error {
	q.mu.Lock()
	err := q.pushLocked(ev)
	q.mu.Unlock()
	if err == nil {
		q.wake()
	}
	return err
}

// popLocked removes the oldest event into out; the caller holds q.mu and
// has checked q.n > 0.
func (q *Queue) popLocked(out *fabric.RawEvent) {
	slot := &q.items[q.head]
	*out = *slot
	slot.Child = nil // do not keep the endpoint reachable from the ring
	q.head = (q.head + 1) % len(q.items)
	q.n--
	if q.n == 0 {
		_, _ = q.efd.Read()
	}
}

// Pop removes the oldest event into out. On an empty queue it returns an
// error wrapping EAGAIN, or, with block set, waits for an event, for ctx to
// end (returning ctx.Err()) or for Close (ErrClosed).
func (q *Queue) Pop(ctx context.Context, block bool, out *fabric.RawEvent) error {
	for {
		q.mu.Lock()
		if q.closed {
			q.mu.Unlock()
			return ErrClosed
		}
		if q.n > 0 {
			q.popLocked(out)
			more := q.n > 0
			q.mu.Unlock()
			if more {
				q.wake() // pass the token on to another blocked Pop
			}
			return nil
		}
		q.mu.Unlock()
		if !block {
			return errAgain
		}
		select {
		case <-q.signal:
		case <-q.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Extract removes every event for which match is true, keeping the order
// of the rest, and returns the removed ones in order.
func (q *Queue) Extract(match func(*fabric.RawEvent) bool) []fabric.RawEvent {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []fabric.RawEvent
	kept := 0
	size := len(q.items)
	for k := 0; k < q.n; k++ {
		ev := &q.items[(q.head+k)%size]
		if match(ev) {
			out = append(out, *ev)
		} else {
			q.items[(q.head+kept)%size] = *ev
			kept++
		}
	}
	for k := kept; k < q.n; k++ {
		q.items[(q.head+k)%size] = fabric.RawEvent{}
	}
	if q.n > 0 && kept == 0 {
		_, _ = q.efd.Read()
	}
	q.n = kept
	return out
}

// PushAll appends evs in order.
func (q *Queue) PushAll(evs []fabric.RawEvent) error {
	q.mu.Lock()
	var err error
	for k := range evs {
		if err = q.pushLocked(&evs[k]); err != nil {
			break
		}
	}
	q.mu.Unlock()
	q.wake()
	return err
}

// Close closes the queue and returns the events still in it, so the caller
// can release what they hold. Blocked Pops return ErrClosed. It is
// idempotent; later calls return nil.
//
// Before its descriptor is closed it is made readable, and it stays so: a
// poller that holds a duplicate of it (a reactor does) wakes, reads
// ErrClosed and drops it, instead of waiting forever on a queue nobody
// will fill.
func (q *Queue) Close() []fabric.RawEvent {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	rest := make([]fabric.RawEvent, 0, q.n)
	for q.n > 0 {
		var ev fabric.RawEvent
		q.popLocked(&ev)
		rest = append(rest, ev)
	}
	_ = q.efd.Add(1) // readable although empty: a poller's duplicate wakes
	q.mu.Unlock()
	close(q.done)
	_ = q.efd.Close()
	return rest
}

// IsClosed reports whether err says the queue was closed.
func IsClosed(err error) bool { return errors.Is(err, ErrClosed) }
