// Package handle is the table that turns the uid a fabric reports an event
// with back into the object it names, as librdmacm turns the event's uid
// straight back into its rdma_cm_id pointer: without a lock, and without a
// stale uid ever reaching a live object.
//
// A uid encodes a slot of the table and the slot's generation:
//
//	uid = generation << IndexBits | (index + 1)
//
// so it is never 0 (the kernel drops events of uid 0) and a lookup is an
// index into the table plus a comparison. A slot's generation grows each
// time it is freed, so a uid is never issued twice in a process: a slot
// whose generation would wrap is retired, not reused. Readers (Load) use
// atomics only; Alloc and Free are lock-free too (a Treiber stack of free
// slots with a tag against ABA).
package handle

import (
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
)

// IndexBits is how many low bits of a uid hold its slot's index (plus one).
const IndexBits = 24

const (
	indexMask  = 1<<IndexBits - 1
	maxSlots   = indexMask // index+1 fits in IndexBits and is never 0
	maxGen     = 1<<(64-IndexBits) - 1
	chunkBits  = 8
	chunkSize  = 1 << chunkBits
	chunkCount = (maxSlots + chunkSize - 1) / chunkSize
)

// ErrFull is returned by Alloc when every slot is in use (16 777 215 of
// them). It wraps ENOMEM, as librdmacm's index set fails.
var ErrFull = fmt.Errorf("handle: table full: %w", syscall.ENOMEM)

// Index returns the slot index a uid encodes, which other tables (a
// reactor's mailboxes) may use to keep per-object state without a map. It
// is -1 for uid 0.
func Index(uid uint64) int { return int(uid&indexMask) - 1 }

// slot is one entry of a table.
type slot[T any] struct {
	p    atomic.Pointer[T]
	uid  atomic.Uint64 // the uid p is published under (0 while free)
	gen  atomic.Uint64 // the generation of the slot's next uid
	next atomic.Uint32 // free list: index+1 of the next free slot, 0 at the end
}

type chunk[T any] [chunkSize]slot[T]

// Table maps uids to *T. The zero value is an empty table; it must not be
// copied after first use. Chunks of slots are allocated as the table
// grows, and never freed or moved, so a reader holding a slot's address
// never races a resize.
type Table[T any] struct {
	chunks [chunkCount]atomic.Pointer[chunk[T]] // 512 KiB of zero pages until used
	top    atomic.Uint32                        // slots ever handed out
	free   atomic.Uint64                        // tag << 32 | index+1 of the first free slot
	live   atomic.Int64
}

// at returns slot i, allocating its chunk if need be.
func (t *Table[T]) at(i uint32) *slot[T] {
	c := t.chunks[i>>chunkBits].Load()
	if c == nil {
		fresh := new(chunk[T])
		if t.chunks[i>>chunkBits].CompareAndSwap(nil, fresh) {
			c = fresh
		} else {
			c = t.chunks[i>>chunkBits].Load()
		}
	}
	return &c[i&(chunkSize-1)]
}

// lookup returns slot i, or nil if its chunk was never allocated.
func (t *Table[T]) lookup(i uint32) *slot[T] {
	if i >= maxSlots {
		return nil
	}
	c := t.chunks[i>>chunkBits].Load()
	if c == nil {
		return nil
	}
	return &c[i&(chunkSize-1)]
}

// Alloc publishes p under a new uid and returns the uid; ErrFull if no slot
// is left.
func (t *Table[T]) Alloc(p *T) (uint64, error) {
	if p == nil {
		return 0, errors.New("handle: nil object")
	}
	i, ok := t.pop()
	if !ok {
		n := t.top.Add(1)
		if n > maxSlots {
			t.top.Add(^uint32(0))
			return 0, ErrFull
		}
		i = n - 1
	}
	s := t.at(i)
	uid := s.gen.Load()<<IndexBits | uint64(i+1)
	s.uid.Store(uid)
	s.p.Store(p) // after uid: a reader that sees p sees its uid
	t.live.Add(1)
	return uid, nil
}

// Load returns the object published under uid, or nil if there is none
// (never issued, freed, or its slot reused by another uid since). It takes
// no lock and does not allocate.
//
// A caller that must know the object was not freed after Load (to count
// work against it that its freer waits for) counts first, then calls Load
// again and backs out if it no longer gets the same pointer: Free clears
// the slot before its caller reads the count, and these atomics are
// sequentially consistent, so one of the two sees the other.
func (t *Table[T]) Load(uid uint64) *T {
	// lookup, written out so that Load is inlined (the reactor's claim
	// makes two per event; BENCHMARKS.md, "What is slow and why", finding
	// 27). A uid's index+1 of 0 (never issued) wraps i to 1<<32-1, which
	// the chunk index's modulo takes to the slot numbered maxSlots: never
	// handed out (Alloc's indexes are below it), so its p is nil.
	i := uint32(uid&indexMask) - 1
	c := t.chunks[(i>>chunkBits)%chunkCount].Load()
	if c == nil {
		return nil
	}
	// p before uid: Alloc stores uid before p, so a p of the slot's next
	// occupant comes with its uid, never with this one. A nil p with a
	// matching uid (an Alloc between its two stores) is nil anyway.
	s := &c[i&(chunkSize-1)]
	p := s.p.Load()
	if s.uid.Load() != uid {
		return nil
	}
	return p
}

// Free unpublishes uid; it reports whether uid was live. From its return
// on, Load(uid) is nil, and uid is never issued again.
func (t *Table[T]) Free(uid uint64) bool {
	i := Index(uid)
	s := t.lookup(uint32(i))
	if s == nil || s.uid.Load() != uid || !s.uid.CompareAndSwap(uid, 0) {
		return false
	}
	s.p.Store(nil)
	t.live.Add(-1)
	if g := s.gen.Load(); g < maxGen {
		s.gen.Store(g + 1)
		t.push(uint32(i))
	} // else: retired, so that no uid repeats
	return true
}

// Live returns how many uids are published.
func (t *Table[T]) Live() int { return int(t.live.Load()) }

// Range calls f for every published object, in slot order, until f
// returns false. Objects published or freed meanwhile may or may not be
// seen.
func (t *Table[T]) Range(f func(uid uint64, p *T) bool) {
	n := t.top.Load()
	for i := uint32(0); i < n && i < maxSlots; i++ {
		s := t.lookup(i)
		if s == nil {
			continue
		}
		uid := s.uid.Load()
		if p := s.p.Load(); p != nil && uid != 0 && s.uid.Load() == uid && !f(uid, p) {
			return
		}
	}
}

// pop takes a free slot from the stack.
func (t *Table[T]) pop() (uint32, bool) {
	for {
		h := t.free.Load()
		i := uint32(h)
		if i == 0 {
			return 0, false
		}
		next := t.at(i - 1).next.Load()
		if t.free.CompareAndSwap(h, (h>>32+1)<<32|uint64(next)) {
			return i - 1, true
		}
	}
}

// push returns slot i to the stack.
func (t *Table[T]) push(i uint32) {
	s := t.at(i)
	for {
		h := t.free.Load()
		s.next.Store(uint32(h))
		if t.free.CompareAndSwap(h, (h>>32+1)<<32|uint64(i+1)) {
			return
		}
	}
}
