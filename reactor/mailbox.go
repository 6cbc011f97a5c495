package reactor

import (
	"net/netip"
	"time"
	"unsafe"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/evq"
	"github.com/cmrt/cmrt/internal/handle"
	"github.com/cmrt/cmrt/internal/ring"
)

// item is an event waiting for its handler, or a work completion waiting
// for its completion handler; kind says which. Its head, the first cache
// line, holds all that a claimed event without parameters needs (most CM
// events, id.Brief): copyItem copies the raw event or the completion, the
// lines after it, only for the items that use them. On the pool every item
// crosses to a worker's CPU through a mailbox, and each line it writes
// there is a miss on a line that worker last read: items that were three
// or more lines were a quarter of the pool's dispatch in a profile
// (BENCHMARKS.md, "What is slow and why").
type item struct {
	ev     *id.Event     // itemEvent: delivered already (a CONNECT_REQUEST)
	reg    *registration // the channel's (its handler, its source), or the completion queue's
	claim  id.Claim      // itemBrief, itemClaim: the worker calls id.DeliverClaimed*
	at     journal.Stamp // the batch's clock reading, for the journal record
	typ    fabric.EventType
	status int32
	arg    uint64
	slot   uint32 // event items: handle.Index of the raw event's uid, which picks the mailbox's entry in recent
	kind   itemKind
	_      [64 - 61]byte // the head is one cache line (TestItemHeadOneLine)

	raw fabric.RawEvent // itemClaim: the claimed event; the loop's batch reads every event here
	_   [itemPad]byte   // items are whole lines, so that a ring's heads are aligned (not last: a zero-size last field is padded)
	wc  id.WC           // itemWC
}

// itemKind says what an item holds.
type itemKind uint8

const (
	itemNone  itemKind = iota // a cleared slot
	itemEvent                 // ev, delivered
	itemBrief                 // a claimed event with typ, status and arg only (id.Brief)
	itemClaim                 // a claimed event with its raw event
	itemWC                    // a work completion of reg's queue
)

// itemPad pads an item to a whole number of cache lines.
const itemPad = (64 - (64+unsafe.Sizeof(fabric.RawEvent{})+unsafe.Sizeof(id.WC{}))%64) % 64

// claimed reports whether the item is a claimed event, delivered by the
// worker.
func (it *item) claimed() bool { return it.kind == itemBrief || it.kind == itemClaim }

// handler returns the handler of an event item.
func (it *item) handler() id.Handler { return it.reg.h }

// setClaim makes a batch item, whose raw event TakeClaim filled, a claim of
// c: brief when the raw event has no parameters.
func (it *item) setClaim(c id.Claim, reg *registration, at journal.Stamp) {
	it.claim, it.reg, it.at = c, reg, at
	it.typ, it.status, it.arg = it.raw.Type, it.raw.Status, it.raw.Arg
	it.slot = uint32(handle.Index(it.raw.UID))
	it.kind = itemClaim
	if id.Brief(&it.raw) {
		it.kind = itemBrief
	}
}

// deliver turns a claimed item into its event (nil: dropped, its id
// destroyed since the claim).
func (it *item) deliver() *id.Event {
	if it.kind == itemBrief {
		return id.DeliverClaimedBrief(it.claim, it.reg.src, it.typ, it.status, it.arg, it.at)
	}
	return id.DeliverClaimed(it.claim, it.reg.src, &it.raw, it.at)
}

// deliverInto is deliver into a worker's own event (id.DeliverClaimedInto),
// which the handler must be done with before the next call.
func (it *item) deliverInto(ev *id.Event) *id.Event {
	if it.kind == itemBrief {
		return id.DeliverClaimedBriefInto(it.claim, it.reg.src, it.typ, it.status, it.arg, it.at, ev)
	}
	return id.DeliverClaimedInto(it.claim, it.reg.src, &it.raw, it.at, ev)
}

// copyItem copies *src into *dst, which may hold an earlier item's bytes:
// the head, and the raw event (its private data only up to its length) or
// the work completion only when the item's kind uses them.
func copyItem(dst, src *item) {
	dst.ev, dst.reg, dst.claim, dst.at = src.ev, src.reg, src.claim, src.at
	dst.typ, dst.status, dst.arg, dst.slot, dst.kind = src.typ, src.status, src.arg, src.slot, src.kind
	switch src.kind {
	case itemWC:
		dst.wc = src.wc
	case itemClaim:
		copyRaw(&dst.raw, &src.raw)
	}
}

// copyRaw copies a raw event into *d but for the bytes of its private data
// past its length: evq.Copy, whose list of fields is guarded with
// id.Brief's (evq's TestParamsEveryField; here
// TestCopyRawEveryField).
func copyRaw(d, r *fabric.RawEvent) { evq.Copy(d, r) }

// clearItem clears the pointers an item holds (copyItem overwrites the
// rest before any read), so that it keeps nothing reachable.
func clearItem(it *item) {
	switch it.kind {
	case itemWC:
		it.wc = id.WC{}
	case itemBrief:
		// Its raw event holds no pointer: stale bytes that an earlier
		// clearItem left so, or, in the loop's batch, which reads every
		// event into its item, a brief one (no Child, no Group).
	default:
		it.raw.Child, it.raw.Group = nil, netip.Addr{}
	}
	it.ev, it.reg, it.claim, it.kind = nil, nil, id.Claim{}, itemNone
}

// mailbox holds the pending items of one id (or one completion queue), in
// order. It is guarded by the reactor's mbMu. A scheduled mailbox is being
// drained by a worker or waits in the run queue for one: only one worker
// owns it at a time, which keeps the items of one key in order.
//
// A mailbox a worker empties stays in the map, idle (not scheduled, no
// item), for its key's next event, up to maxIdleMailboxes of them; then
// the loop sweeps the idle ones out (sweepIdleLocked). Retiring it at once,
// as the reactor did, made every event of a key that is not always busy
// delete and insert a map entry and take and put back a spare mailbox
// from the two CPUs in turn. And the worker leaves the slots it took items
// from as they are (their pointers are the key's own, or its channel's),
// so that the loop's next write to a slot finds the line shared rather
// than modified in the worker's cache; the sweep clears them.
type mailbox struct {
	key       mboxKey
	items     ring.Ring[item]
	scheduled bool
}

// maxIdleMailboxes is how many idle mailboxes the map keeps before the
// loop sweeps them out. Each holds its ring (four items, 2.5 KB, to begin
// with) and keeps its key, an id perhaps destroyed since, reachable.
const maxIdleMailboxes = 256

// maxSpareMailboxes is how many swept mailboxes are kept for reuse.
const maxSpareMailboxes = 64

// mboxKey names a mailbox: an id, or the registration of a completion
// queue (one of the two is set).
type mboxKey struct {
	id  *id.ID
	reg *registration
}

// mailboxes are the reactor's mailboxes by key: two maps keyed by a
// pointer, which the runtime hashes as one word, where a map keyed by an
// interface (any) hashed through the key's type for every item (7% of
// the pool's dispatch in a profile; a struct key, 16 bytes through the
// generic hash, cost more). Guarded by mbMu.
//
// In front of byID sits recent, the mailboxes last found for an id, by
// the slot index of the uid the event came with (handle.Index: dense, so
// that while the process has at most recentMailboxes ids and joins no two
// share an entry; past that, sharers miss and take the map): a hit is an
// index and a comparison of the mailbox's key with the id, where the map
// hashed the pointer and probed its groups on the loop, the pool's
// busier side, for every item (BENCHMARKS.md, "What is slow and why",
// finding 24). The map stays the authority: an entry of recent is used only
// if its mailbox's key is the id looked up, and every mailbox whose key is
// an id is that id's in the map (del's callers clear a mailbox's key, or
// drop the mailbox, and clear recent: forgetRecent).
type mailboxes struct {
	byID   map[*id.ID]*mailbox
	byCQ   map[*registration]*mailbox
	recent *[recentMailboxes]*mailbox // made with the workers' first mailbox
}

// recentMailboxes is the size of mailboxes.recent (8 KiB of pointers).
const recentMailboxes = 1024

// get returns k's mailbox, or nil if it has none. For an id, slot is the
// handle.Index of its event's uid (the id's own, or one of its multicast
// joins'), which picks its entry in recent; a completion queue's key
// ignores it.
func (m *mailboxes) get(k mboxKey, slot uint32) *mailbox {
	if k.reg != nil {
		return m.byCQ[k.reg]
	}
	if m.recent == nil {
		m.recent = new([recentMailboxes]*mailbox)
	}
	e := &m.recent[slot%recentMailboxes]
	if mb := *e; mb != nil && mb.key.id == k.id {
		return mb
	}
	mb := m.byID[k.id]
	if mb != nil {
		*e = mb
	}
	return mb
}

// set files mb as k's mailbox, slot as for get.
func (m *mailboxes) set(k mboxKey, slot uint32, mb *mailbox) {
	if k.reg != nil {
		m.byCQ[k.reg] = mb
		return
	}
	m.byID[k.id] = mb
	m.recent[slot%recentMailboxes] = mb
}

// forgetRecent empties recent, after mailboxes left the map.
func (m *mailboxes) forgetRecent() {
	if m.recent != nil {
		clear(m.recent[:])
	}
}

func (m *mailboxes) del(k mboxKey) {
	if k.reg != nil {
		delete(m.byCQ, k.reg)
	} else {
		delete(m.byID, k.id)
	}
}

// all calls f for every mailbox.
func (m *mailboxes) all(f func(*mailbox)) {
	for _, mb := range m.byID {
		f(mb)
	}
	for _, mb := range m.byCQ {
		f(mb)
	}
}

// workerBatch is how many items a worker takes per hold of mbMu: from
// one mailbox, or from several (takeLocked).
const workerBatch = 16

// enqueueLocked appends it to key's mailbox and, if the mailbox was idle,
// puts it on the run queue; it reports whether it did. mbMu is held.
func (r *Reactor) enqueueLocked(key mboxKey, it *item) bool {
	// An event item's slot is its raw event's uid's (the id's, or one of
	// its joins'): from the head, which the loop's batch (64 items, 40
	// KiB, more than an L1) keeps in the line it reads here anyway,
	// rather than from the raw event's first line (one L1 read miss per
	// pool event in cachegrind; BENCHMARKS.md, finding 27).
	mb := r.mboxes.get(key, it.slot)
	if mb != nil && !mb.scheduled {
		r.idleBoxes-- // an idle mailbox in the map, woken
	}
	if mb == nil {
		if n := len(r.spare); n > 0 {
			mb, r.spare = r.spare[n-1], r.spare[:n-1]
		} else {
			mb = &mailbox{items: ring.New[item](4, 0)}
		}
		mb.key = key
		r.mboxes.set(key, it.slot, mb)
	}
	copyItem(mb.items.PushBack(), it)
	if mb.scheduled {
		return false
	}
	mb.scheduled = true
	r.runq.Push(mb)
	return true
}

// sweepIdleLocked removes the idle mailboxes from the map, clearing the
// items their workers left, and keeps up to maxSpareMailboxes of them for
// reuse. mbMu is held (the loop calls it from enqueue, Close from
// abandon).
func (r *Reactor) sweepIdleLocked() {
	r.mboxes.all(func(mb *mailbox) {
		if mb.scheduled {
			return
		}
		r.mboxes.del(mb.key)
		mb.key = mboxKey{}
		clearRing(&mb.items)
		if len(r.spare) < maxSpareMailboxes {
			r.spare = append(r.spare, mb)
		}
	})
	r.mboxes.forgetRecent()
	r.idleBoxes = 0
}

// clearRing zeroes every slot of an empty ring: the items workers left
// there, and what earlier items left in their raw events.
func clearRing(rg *ring.Ring[item]) {
	for k := rg.Cap(); k > 0; k-- {
		*rg.PushBack() = item{}
	}
	for rg.Discard() {
	}
}

// startWorkersLocked reports how many workers to start for n newly
// scheduled mailboxes, and counts them as running. mbMu is held.
func (r *Reactor) startWorkersLocked(n int) int {
	k := min(n, r.opts.Workers-r.running)
	if k < 0 || r.stopping {
		return 0
	}
	r.running += k
	return k
}

// startWorkers starts k workers (counted by startWorkersLocked).
func (r *Reactor) startWorkers(k int) {
	for ; k > 0; k-- {
		r.workers.Add(1)
		go r.workFn()
	}
}

// work is a worker: it drains scheduled mailboxes, up to workerBatch items
// per hold of mbMu (takeLocked), until the run queue is empty, and then
// exits.
//
// Workers are plain goroutines started when a mailbox becomes runnable and
// fewer than Options.Workers run, not a pool of parked goroutines: under
// load a worker goes from mailbox to mailbox without a hand-off, and an
// idle reactor holds no goroutine. BenchmarkHandoff compares starting a
// goroutine with handing the work to an idle worker of a private ants pool
// (ants.PoolWithFuncGeneric.Invoke): the goroutine costs less, and ants'
// pool adds two goroutines of its own (purge and clock) per reactor.
func (r *Reactor) work() {
	defer r.workers.Done()
	var buf [workerBatch]item
	var held [workerBatch]*mailbox
	wc := new(id.WC) // handed to completion handlers: one per worker, not per item
	// The worker's event: it delivers and handles one claimed event at a
	// time, so one Event of its own serves them all (id.DeliverClaimedInto),
	// in its CPU's cache, without the event pool's Get and Put.
	own := new(id.Event)
	many := false // the last batch's handlers were quick: take from several mailboxes
	r.mbMu.Lock()
	for {
		h, n := r.takeLocked(&buf, &held, many)
		if h == 0 {
			r.running--
			r.mbMu.Unlock()
			return
		}
		r.mbMu.Unlock()
		start := journal.Now()
		for k := 0; k < n; {
			k = r.runItems(buf[:n], k, wc, own)
		}
		many = journal.Now()-start < journal.Stamp(n)*quickItem
		r.handled(n)
		r.mbMu.Lock()
		r.releaseLocked(held[:h])
	}
}

// quickItem is the handler time per item under which a worker's next
// batch takes from several mailboxes (takeLocked). A hold of mbMu, which
// the loop and every worker share, costs a few hundred nanoseconds when
// they contend for it: next to handlers slower than this it is a small
// part, and a handler that slow may block, holding up the other
// mailboxes' items in its batch while idle workers could run them.
const quickItem = 2 * journal.Stamp(time.Microsecond)

// takeLocked fills buf with the items of mailboxes from the run queue, in
// order, up to workerBatch, and lists in held the mailboxes it took them
// from, which the worker owns (they stay scheduled) until releaseLocked.
// It returns how many mailboxes and items it took: none when the run
// queue is empty. It takes the first mailbox's items and, when many is
// set (the worker's last batch was quick: see quickItem), the next
// mailbox's while buf has room and the run queue holds at least one
// mailbox per worker besides, so that each worker still finds one. A
// worker taking one mailbox per hold of mbMu locked it once for every
// event of ids with one event each (the many connections of a server),
// on the lock the loop and every worker share (BENCHMARKS.md, "What is
// slow and why", finding 37). mbMu is held.
func (r *Reactor) takeLocked(buf *[workerBatch]item, held *[workerBatch]*mailbox, many bool) (h, n int) {
	for n < len(buf) && (h == 0 || many && r.runq.Len() >= r.opts.Workers) {
		mb, ok := r.runq.Pop()
		if !ok {
			break
		}
		held[h] = mb
		h++
		for ; n < len(buf) && mb.items.Len() > 0; n++ {
			copyItem(&buf[n], mb.items.Front())
			mb.items.Discard() // the slot is left as it is: see mailbox
		}
	}
	return h, n
}

// releaseLocked gives back the mailboxes a worker took (takeLocked) once
// it has run their items: one with more items goes to the back of the run
// queue, still scheduled; an empty one goes idle. mbMu is held.
func (r *Reactor) releaseLocked(held []*mailbox) {
	for k, mb := range held {
		if mb.items.Len() > 0 {
			r.runq.Push(mb)
		} else {
			mb.scheduled = false // idle, kept in the map: see mailbox
			r.idleBoxes++
		}
		held[k] = nil
	}
}

// runItems runs the handlers of items[from:], clearing each item after
// it, under one deferred recover (see handleInline): it returns the index
// of the next item to run, len(items) or, when a handler panicked, the one
// after it. wc is the worker's buffer for completions, own its event
// (item.deliverInto).
func (r *Reactor) runItems(items []item, from int, wc *id.WC, own *id.Event) (next int) {
	var cur running
	next = from
	defer func() {
		if cur.in {
			if v := recover(); v != nil {
				r.recovered(&cur, v)
				clearItem(&items[next])
				next++
			}
		}
	}()
	for ; next < len(items); next++ {
		it := &items[next]
		if r.abandoning.Load() {
			// Close gave up waiting: like the items it took from the
			// mailboxes, these are acknowledged unhandled.
			if it.claimed() {
				it.ev = it.deliver()
			}
			if it.ev != nil {
				_ = it.ev.Handle(abandoned{})
			}
		} else if it.claimed() {
			// Delivered here, not by the loop: the event, the id's lock
			// and state and the journal record stay on this CPU
			// (BENCHMARKS.md, "What is slow and why").
			if ev := it.deliverInto(own); ev != nil {
				r.handle(ev, it.handler(), &cur)
			}
		} else if it.kind == itemWC {
			*wc = it.wc
			r.handleWC(it.reg, wc)
		} else {
			r.handle(it.ev, it.handler(), &cur)
		}
		clearItem(it)
	}
	return next
}
