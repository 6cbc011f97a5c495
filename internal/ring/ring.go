// Package ring is the one FIFO of the runtime: Ring, a growable ring buffer
// owned by its caller (no lock), and Queue, a Ring behind a mutex with an
// eventfd that is readable exactly while the queue is not empty, which is
// what a reactor multiplexes. The software fabric's event channels
// (internal/evq) and completion queues, and the reactor's mailboxes and run
// queue, are built on them.
package ring

// Ring is a FIFO ring buffer that grows by doubling, up to an optional
// bound. The zero value is an empty, unbounded ring that allocates on its
// first push. It is not safe for concurrent use.
//
// Entries are addressed in place (PushBack, Front, At return pointers into
// the buffer), so large values are written and read without a copy; a
// pointer is valid until the next push or pop.
type Ring[T any] struct {
	buf     []T
	head, n int
	max     int // 0: unbounded
}

// minSize is the size of a ring's first buffer.
const minSize = 4

// New returns an empty ring with room for size entries (allocated now if
// size > 0) that never holds more than max entries (0: no bound).
func New[T any](size, max int) Ring[T] {
	r := Ring[T]{max: max}
	if max > 0 {
		size = min(size, max)
	}
	if size > 0 {
		r.buf = make([]T, size)
	}
	return r
}

// Len returns the number of entries.
func (r *Ring[T]) Len() int { return r.n }

// Cap returns the size of the buffer.
func (r *Ring[T]) Cap() int { return len(r.buf) }

// Full reports whether the ring holds its bound (never, if it has none).
func (r *Ring[T]) Full() bool { return r.max > 0 && r.n >= r.max }

// grow doubles the buffer (at least minSize, at most max), keeping the
// entries in order from index 0.
func (r *Ring[T]) grow() {
	size := max(2*len(r.buf), minSize)
	if r.max > 0 {
		size = min(size, r.max)
	}
	buf := make([]T, size)
	if r.n > 0 {
		k := copy(buf, r.buf[r.head:min(r.head+r.n, len(r.buf))])
		copy(buf[k:], r.buf[:r.n-k])
	}
	r.buf, r.head = buf, 0
}

// PushBack appends a zero entry and returns a pointer to it, for the caller
// to fill in place; it returns nil if the ring is Full.
func (r *Ring[T]) PushBack() *T {
	if r.n == len(r.buf) {
		if r.Full() {
			return nil
		}
		r.grow()
	}
	k := r.head + r.n
	if k >= len(r.buf) {
		k -= len(r.buf)
	}
	r.n++
	return &r.buf[k]
}

// Push appends v; it reports false, and does nothing, if the ring is Full.
func (r *Ring[T]) Push(v T) bool {
	p := r.PushBack()
	if p == nil {
		return false
	}
	*p = v
	return true
}

// Front returns a pointer to the oldest entry, or nil if the ring is empty.
func (r *Ring[T]) Front() *T {
	if r.n == 0 {
		return nil
	}
	return &r.buf[r.head]
}

// At returns a pointer to the k-th oldest entry (0 is Front). It panics if
// k is out of range.
func (r *Ring[T]) At(k int) *T {
	if k < 0 || k >= r.n {
		panic("ring: index out of range")
	}
	k += r.head
	if k >= len(r.buf) {
		k -= len(r.buf)
	}
	return &r.buf[k]
}

// PopFront removes the oldest entry, clearing its slot so that the ring
// keeps nothing it points to reachable. It reports false on an empty ring.
func (r *Ring[T]) PopFront() bool {
	if r.n == 0 {
		return false
	}
	var zero T
	r.buf[r.head] = zero
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return true
}

// Discard removes the oldest entry without clearing its slot, for entries
// the caller has cleared of every pointer itself (a large entry of which a
// part is often unused: package reactor's mailbox items). The slot is then
// not zero: PushBack returns it as it was left, for the caller to
// overwrite. It reports false on an empty ring.
func (r *Ring[T]) Discard() bool {
	if r.n == 0 {
		return false
	}
	r.head++
	if r.head == len(r.buf) {
		r.head = 0
	}
	r.n--
	return true
}

// Pop removes and returns the oldest entry; ok is false on an empty ring.
func (r *Ring[T]) Pop() (v T, ok bool) {
	if r.n == 0 {
		return v, false
	}
	v = r.buf[r.head]
	r.PopFront()
	return v, true
}

// PopInto moves the oldest entry into out (one copy, for large entries);
// it reports false on an empty ring.
func (r *Ring[T]) PopInto(out *T) bool {
	if r.n == 0 {
		return false
	}
	*out = r.buf[r.head]
	return r.PopFront()
}

// Filter keeps, in order, the entries for which keep returns true, and
// removes the others; removed, if not nil, is called for each removed entry
// in order before its slot is cleared. It returns how many were removed.
func (r *Ring[T]) Filter(keep func(*T) bool, removed func(*T)) int {
	kept := 0
	var zero T
	for k := 0; k < r.n; k++ {
		e := r.At(k)
		if keep(e) {
			if kept != k {
				*r.At(kept) = *e
			}
			kept++
		} else if removed != nil {
			removed(e)
		}
	}
	gone := r.n - kept
	for k := kept; k < r.n; k++ {
		*r.At(k) = zero
	}
	r.n = kept
	if r.n == 0 {
		r.head = 0
	}
	return gone
}

// Clear removes every entry (keeping the buffer).
func (r *Ring[T]) Clear() {
	clear(r.buf)
	r.head, r.n = 0, 0
}
