package ring

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/poll"
)

// ErrClosed is returned by a closed Queue (unless New was given another
// error for it). It wraps EBADF, as the kernel reports a closed descriptor.
var ErrClosed = fmt.Errorf("ring: queue closed: %w", syscall.EBADF)

// ErrAgain is returned by a non-blocking Pop of an empty Queue. It wraps
// EAGAIN.
var ErrAgain = fmt.Errorf("ring: queue empty: %w", syscall.EAGAIN)

// Queue is a FIFO that goroutines share, with a descriptor for pollers.
//
// Once Fd has been called, the queue keeps an eventfd readable exactly while
// it is not empty: the level semantics of the kernel's rdma_cm descriptor
// and of a completion channel that a reactor multiplexes without any
// req_notify dance. Before that the queue makes no system call at all, so
// a queue nobody polls (a synchronous id's private channel, a completion
// queue waited on with Wait) costs none per entry.
//
// When it closes, the queue makes its descriptor readable, although empty,
// and then closes it; Fd returns -1 from then on. A poller holding a
// duplicate of the descriptor (the reactor polls duplicates, never the
// owner's number) so wakes, finds the queue closed, and lets it go instead
// of waiting forever on a queue nobody will fill.
type Queue[T any] struct {
	errClosed error
	// signal holds one token while entries, or the close, may wait for a
	// blocked Pop or Wait; each one woken passes it on while others wait
	// (Close has no channel of its own to close: one allocation fewer per
	// queue, one per synchronous id and two per QP).
	signal chan struct{}

	mu      sync.Mutex
	r       Ring[T]
	efd     *poll.EventFD // nil until Fd
	waiters int           // goroutines blocked in Pop or Wait: only they need the token
	closed  bool

	move func(dst, src *T) // Pop's and PopN's move out of a slot (Init), or nil: copy and clear
}

// NewQueue returns an empty queue whose ring starts with room for size
// entries. errClosed, if not nil, is the error its methods return once it is
// closed (it should wrap EBADF); nil means ErrClosed.
func NewQueue[T any](size int, errClosed error) *Queue[T] {
	q := new(Queue[T])
	q.Init(size, errClosed, nil)
	return q
}

// Init makes q, a zero Queue, an empty queue as NewQueue(size, errClosed)
// returns one, for a Queue held by value in the struct that owns it: one
// allocation fewer than pointing to one. q must not be copied once used,
// nor initialized twice.
//
// A non-nil move makes Pop and PopN move entries out with move(dst, src)
// rather than copying and clearing them whole: move copies src into dst
// and clears every pointer src holds; the slot's other bytes stay as move
// left them (a push overwrites the whole slot), so that a pop need not
// write the lines of a large entry another goroutine pushed
// (internal/evq's 376-byte raw events). Close still hands back, and
// clears, what is left. A nil move is NewQueue's copy and clear.
func (q *Queue[T]) Init(size int, errClosed error, move func(dst, src *T)) {
	if errClosed == nil {
		errClosed = ErrClosed
	}
	q.errClosed, q.signal, q.r, q.move = errClosed, make(chan struct{}, 1), New[T](size, 0), move
}

// Moves reports whether Pop and PopN move entries out with the function
// given to Init (false: they copy and clear them whole).
func (q *Queue[T]) Moves() bool { return q.move != nil }

// popOne moves the oldest entry into out; q.mu is held and the queue is not
// empty.
func (q *Queue[T]) popOne(out *T) {
	if q.move == nil {
		q.r.PopInto(out)
		return
	}
	q.move(out, q.r.Front())
	q.r.Discard()
}

// Fd returns the queue's descriptor: from the first call on, it is readable
// exactly while the queue is not empty. It is -1 once the queue is closed,
// or if no eventfd could be opened.
func (q *Queue[T]) Fd() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return -1
	}
	if q.efd == nil {
		efd, err := poll.NewEventFD()
		if err != nil {
			return -1
		}
		q.efd = efd
		if q.r.Len() > 0 {
			_ = efd.Add(1)
		}
	}
	return q.efd.Fd()
}

// Len returns the number of queued entries.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.r.Len()
}

// pushLocked appends *v; q.mu is held.
func (q *Queue[T]) pushLocked(v *T) error {
	if q.closed {
		return q.errClosed
	}
	*q.r.PushBack() = *v
	if q.r.Len() == 1 && q.efd != nil {
		return q.efd.Add(1)
	}
	return nil
}

// wake hands the token to a blocked Pop or Wait, if none holds it.
func (q *Queue[T]) wake() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// Push appends a copy of *v. It fails with the closed error on a closed
// queue (the entry is dropped).
func (q *Queue[T]) Push(v *T) error {
	q.mu.Lock()
	err := q.pushLocked(v)
	w := q.waiters > 0
	q.mu.Unlock()
	if err == nil && w {
		q.wake()
	}
	return err
}

// PushAll appends vs in order.
func (q *Queue[T]) PushAll(vs []T) error {
	q.mu.Lock()
	var err error
	for k := range vs {
		if err = q.pushLocked(&vs[k]); err != nil {
			break
		}
	}
	w := q.waiters > 0
	q.mu.Unlock()
	if w {
		q.wake()
	}
	return err
}

// await blocks a Pop or Wait that found the queue empty (q.mu is held, and
// is held again when it returns) until a push, Close or ctx's end. A ctx
// that never ends (context.Background, what a synchronous id's blocking
// call without Context passes) has no Done channel: await then receives
// the token alone, a channel receive instead of a two-case select (which
// locks and sorts its channels on every park and wake).
func (q *Queue[T]) await(ctx context.Context) error {
	q.waiters++
	q.mu.Unlock()
	var err error
	if done := ctx.Done(); done == nil {
		<-q.signal
	} else {
		select {
		case <-q.signal:
		case <-done:
			err = ctx.Err()
		}
	}
	q.mu.Lock()
	q.waiters--
	return err
}

// popLocked moves the oldest entry into out; q.mu is held and the queue is
// not empty.
func (q *Queue[T]) popLocked(out *T) {
	q.popOne(out)
	if q.r.Len() == 0 && q.efd != nil {
		_, _ = q.efd.Read()
	}
}

// Pop moves the oldest entry into out. On an empty queue it returns
// ErrAgain, or, with block set, waits for an entry, for ctx to end
// (returning ctx.Err()) or for Close (the closed error). A closed queue
// returns the closed error, also while entries were left in it (Close
// hands them to its caller).
func (q *Queue[T]) Pop(ctx context.Context, block bool, out *T) error {
	q.mu.Lock()
	for {
		if q.closed {
			q.closedLocked()
			q.mu.Unlock()
			return q.errClosed
		}
		if q.r.Len() > 0 {
			q.popLocked(out)
			more := q.r.Len() > 0 && q.waiters > 0
			q.mu.Unlock()
			if more {
				q.wake() // pass the token on to another blocked Pop
			}
			return nil
		}
		if !block {
			q.mu.Unlock()
			return ErrAgain
		}
		if err := q.await(ctx); err != nil {
			q.mu.Unlock()
			return err
		}
	}
}

// PopUnless is Pop without waiting, except that it takes nothing, and
// returns ErrAgain, when *stop is set: stop is read under the queue's
// lock, so that once stop is set and Fence has returned no PopUnless given
// it takes an entry (fabric.GuardedSource).
func (q *Queue[T]) PopUnless(stop *atomic.Bool, out *T) error {
	q.mu.Lock()
	if q.closed {
		q.closedLocked()
		q.mu.Unlock()
		return q.errClosed
	}
	if q.r.Len() == 0 || stop.Load() {
		q.mu.Unlock()
		return ErrAgain
	}
	// Pop's tail, written out (a helper both share was a call more per
	// event on an inline reactor's take).
	q.popLocked(out)
	more := q.r.Len() > 0 && q.waiters > 0
	q.mu.Unlock()
	if more {
		q.wake() // pass the token on to a blocked Pop
	}
	return nil
}

// Fence returns once every PopUnless that began before it has returned:
// it takes and releases the queue's lock.
func (q *Queue[T]) Fence() {
	q.mu.Lock()
	// Empty on purpose: holding the lock once orders Fence after every
	// PopUnless that held it.
	q.mu.Unlock()
}

// PopN moves up to len(out) of the oldest entries into out, under one
// lock, and returns how many; 0 on an empty or closed queue.
func (q *Queue[T]) PopN(out []T) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0
	}
	k := 0
	for ; k < len(out) && q.r.Len() > 0; k++ {
		q.popOne(&out[k])
	}
	if k > 0 && q.r.Len() == 0 && q.efd != nil {
		_, _ = q.efd.Read()
	}
	return k
}

// Wait returns once the queue is not empty, when ctx ends (ctx.Err()) or
// once it is closed (the closed error).
func (q *Queue[T]) Wait(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		if q.closed {
			q.closedLocked()
			return q.errClosed
		}
		if q.r.Len() > 0 {
			if q.waiters > 0 {
				q.wake() // another waiter may want to know too
			}
			return nil
		}
		if err := q.await(ctx); err != nil {
			return err
		}
	}
}

// Extract removes every entry for which match is true, keeping the order
// of the rest, and returns the removed ones in order.
func (q *Queue[T]) Extract(match func(*T) bool) []T {
	q.mu.Lock()
	defer q.mu.Unlock()
	var out []T
	had := q.r.Len()
	q.r.Filter(func(v *T) bool { return !match(v) }, func(v *T) { out = append(out, *v) })
	if had > 0 && q.r.Len() == 0 && q.efd != nil {
		_, _ = q.efd.Read()
	}
	return out
}

// Close closes the queue and returns the entries still in it, so that the
// caller can release what they hold. Blocked Pops and Waits return the
// closed error. It is idempotent: later calls return nil.
//
// Its descriptor, if Fd was called, is made readable before it is closed
// (see Queue).
func (q *Queue[T]) Close() []T {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	rest := make([]T, q.r.Len())
	for k := range rest {
		q.r.PopInto(&rest[k])
	}
	efd := q.efd
	if efd != nil {
		_ = efd.Add(1) // readable although empty: a poller's duplicate wakes
	}
	w := q.waiters > 0
	q.mu.Unlock()
	if w {
		q.wake() // each blocked Pop or Wait passes it on (closedLocked)
	}
	if efd != nil {
		_ = efd.Close()
	}
	return rest
}

// closedLocked passes the wake token on to the next Pop or Wait blocked
// on a closed queue: Close wakes one, and each wakes the next. q.mu is
// held; wake never blocks.
func (q *Queue[T]) closedLocked() {
	if q.waiters > 0 {
		q.wake()
	}
}

// Ready reports whether a Wait would return at once: entries are queued,
// or the queue is closed.
func (q *Queue[T]) Ready() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed || q.r.Len() > 0
}

// Closed reports whether Close was called.
func (q *Queue[T]) Closed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// IsClosed reports whether err is ErrClosed.
func IsClosed(err error) bool { return errors.Is(err, ErrClosed) }
