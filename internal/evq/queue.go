// Package evq is the event FIFO behind a software event channel: raw CM
// events in arrival order, with a descriptor that is readable exactly while
// the FIFO is not empty (the level semantics of the kernel's rdma_cm fd),
// and a blocking Pop that honours a context. It is a ring.Queue of
// fabric.RawEvent whose closed error is fabric.ErrClosed. It also holds the
// hot path's field-by-field copy of a raw event and its Brief test.
package evq

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/ring"
)

// ErrClosed is returned by Push and Pop on a closed queue. It wraps
// fabric.ErrClosed and EBADF, as the kernel reports a closed channel fd.
var ErrClosed = fmt.Errorf("%w: %w", fabric.ErrClosed, syscall.EBADF)

// Queue is a FIFO of raw events with a pollable descriptor; see ring.Queue.
// Its eventfd is opened, and kept in step, from the first call of Fd on: a
// channel nobody polls (a synchronous id's private one) makes no system
// call per event. Fd is -1 once the queue is closed.
//
// Pop and PopN move an event out with Move: the slot is copied whole and
// only its pointers are cleared, if it holds any, rather than zeroed: the
// pushing goroutine wrote those lines (often on the other CPU), and six
// lines of zeros per event took them back from it for nothing, a push
// overwriting the whole slot anyway (BENCHMARKS.md, "What is slow and
// why", finding 31).
type Queue = ring.Queue[fabric.RawEvent]

// New returns an empty queue. It does not fail; the error is kept for the
// callers written when it opened its eventfd at once.
func New() (*Queue, error) { return NewSize(8), nil }

// NewSize returns an empty queue whose ring starts with room for size
// events (it grows when more wait). Queues of raw events are made here or
// by New, so that every one pops with Move.
func NewSize(size int) *Queue {
	q := new(Queue)
	InitSize(q, size)
	return q
}

// InitSize makes q, a zero Queue held by value (one allocation fewer than
// pointing to one), the empty queue NewSize returns.
func InitSize(q *Queue, size int) { q.Init(size, ErrClosed, Move) }

// IsClosed reports whether err says the queue was closed.
func IsClosed(err error) bool { return errors.Is(err, ErrClosed) }
