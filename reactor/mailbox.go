package reactor

import (
	"net/netip"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/ring"
)

// item is an event waiting for its handler (ev, or a claimed event the
// worker delivers: claim, src, at, raw), or a work completion waiting for
// its completion handler (reg set). The fields every item has come first,
// in one cache line; copyItem and clearItem touch the others only when
// the item uses them.
type item struct {
	ev    *id.Event
	h     id.Handler
	reg   *registration
	claim id.Claim           // id.TakeClaim's: the worker calls id.DeliverClaimed
	src   fabric.EventSource // where the claimed event was taken from
	at    journal.Stamp      // the batch's clock reading, for its journal record
	raw   fabric.RawEvent    // the claimed event
	wc    id.WC
}

// claimed reports whether the item is a claimed event, delivered by the
// worker.
func (it *item) claimed() bool { return it.claim.Owner() != nil }

// deliver turns a claimed item into its event (nil: dropped, its id
// destroyed since the claim).
func (it *item) deliver() *id.Event { return id.DeliverClaimed(it.claim, it.src, &it.raw, it.at) }

// copyItem copies *src into *dst, which may hold an earlier item's bytes:
// only the fields the item uses, and a claimed event's private data only
// up to its length. An item is 560 bytes, 256 of them the raw event's
// private data, which the events that are not set-up's have none of:
// copying whole items into a mailbox and out again, and clearing them,
// was a quarter of the pool's dispatch in a profile.
func copyItem(dst, src *item) {
	dst.ev, dst.h, dst.reg, dst.claim = src.ev, src.h, src.reg, src.claim
	switch {
	case src.reg != nil:
		dst.wc = src.wc
		return
	case !src.claimed():
		return
	}
	dst.src, dst.at = src.src, src.at
	copyRaw(&dst.raw, &src.raw)
}

// copyRaw copies a raw event into *d but for the bytes of its private data
// past its length.
func copyRaw(d, r *fabric.RawEvent) {
	// Every field of fabric.RawEvent but PrivateData (TestCopyRawEveryField
	// keeps this list complete).
	d.UID, d.Type, d.Status, d.Child = r.UID, r.Type, r.Status, r.Child
	d.QPNum, d.QKey, d.AH = r.QPNum, r.QKey, r.AH
	d.ResponderResources, d.InitiatorDepth, d.FlowControl = r.ResponderResources, r.InitiatorDepth, r.FlowControl
	d.RetryCount, d.RNRRetryCount, d.SRQ = r.RetryCount, r.RNRRetryCount, r.SRQ
	d.Group, d.Arg, d.PrivateDataLen = r.Group, r.Arg, r.PrivateDataLen
	n := min(max(r.PrivateDataLen, 0), len(r.PrivateData))
	copy(d.PrivateData[:n], r.PrivateData[:n])
}

// clearItem clears the pointers an item holds (copyItem overwrites the
// rest before any read), so that it keeps nothing reachable.
func clearItem(it *item) {
	if it.reg != nil {
		it.wc = id.WC{}
	} else {
		// A claimed event, or the raw event a delivered one was read
		// from (the loop's batch reads every event into its item).
		it.src = nil
		it.raw.Child, it.raw.Group = nil, netip.Addr{}
	}
	it.ev, it.h, it.reg, it.claim = nil, nil, nil, id.Claim{}
}

// mailbox holds the pending items of one id (or one completion queue), in
// order. It is guarded by the reactor's mbMu. A scheduled mailbox is being
// drained by a worker or waits in the run queue for one: only one worker
// owns it at a time, which keeps the items of one key in order.
type mailbox struct {
	key       mboxKey
	items     ring.Ring[item]
	scheduled bool
}

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
type mailboxes struct {
	byID map[*id.ID]*mailbox
	byCQ map[*registration]*mailbox
}

func (m *mailboxes) get(k mboxKey) *mailbox {
	if k.reg != nil {
		return m.byCQ[k.reg]
	}
	return m.byID[k.id]
}

func (m *mailboxes) set(k mboxKey, mb *mailbox) {
	if k.reg != nil {
		m.byCQ[k.reg] = mb
	} else {
		m.byID[k.id] = mb
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

// workerBatch is how many items of one mailbox a worker takes per hold of
// mbMu.
const workerBatch = 16

// enqueueLocked appends it to key's mailbox and, if the mailbox was idle,
// puts it on the run queue; it reports whether it did. mbMu is held.
func (r *Reactor) enqueueLocked(key mboxKey, it *item) bool {
	mb := r.mboxes.get(key)
	if mb == nil {
		if n := len(r.spare); n > 0 {
			mb, r.spare = r.spare[n-1], r.spare[:n-1]
		} else {
			mb = &mailbox{items: ring.New[item](4, 0)}
		}
		mb.key = key
		r.mboxes.set(key, mb)
	}
	copyItem(mb.items.PushBack(), it)
	if mb.scheduled {
		return false
	}
	mb.scheduled = true
	r.runq.Push(mb)
	return true
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

// work is a worker: it drains scheduled mailboxes, workerBatch items per
// hold of mbMu, until the run queue is empty, and then exits.
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
	wc := new(id.WC) // handed to completion handlers: one per worker, not per item
	r.mbMu.Lock()
	for {
		mb, ok := r.runq.Pop()
		if !ok {
			r.running--
			r.mbMu.Unlock()
			return
		}
		for {
			n := 0
			for ; n < len(buf) && mb.items.Len() > 0; n++ {
				f := mb.items.Front()
				copyItem(&buf[n], f)
				clearItem(f)
				mb.items.Discard()
			}
			if n == 0 {
				mb.scheduled = false
				r.mboxes.del(mb.key)
				mb.key = mboxKey{}
				r.spare = append(r.spare, mb)
				break
			}
			r.mbMu.Unlock()
			for k := range buf[:n] {
				it := &buf[k]
				if r.abandoning.Load() {
					// Close gave up waiting: like the items it took from
					// the mailboxes, these are acknowledged unhandled.
					if it.claimed() {
						it.ev = it.deliver()
					}
					if it.ev != nil {
						_ = it.ev.Handle(abandoned{})
					}
				} else if it.claimed() {
					// Delivered here, not by the loop: the event, the
					// id's lock and state and the journal record stay on
					// this CPU (BENCHMARKS.md, "What is slow and why").
					if ev := it.deliver(); ev != nil {
						r.handle(ev, it.h)
					}
				} else if it.reg != nil {
					*wc = it.wc
					r.handleWC(it.reg, wc)
				} else {
					r.handle(it.ev, it.h)
				}
				clearItem(it)
			}
			r.handled(n)
			r.mbMu.Lock()
		}
	}
}
