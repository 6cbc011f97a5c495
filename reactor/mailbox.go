package reactor

import (
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/ring"
)

// item is an event waiting for its handler, or a work completion waiting
// for its completion handler (reg set).
type item struct {
	ev  *id.Event
	h   id.Handler
	wc  id.WC
	reg *registration
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
// queue. A struct of two pointers hashes as 16 bytes of memory, where an
// interface key (any) paid a hash through its type for every item: 7% of
// the pool's dispatch in a profile.
type mboxKey struct {
	id  *id.ID
	reg *registration
}

// workerBatch is how many items of one mailbox a worker takes per hold of
// mbMu.
const workerBatch = 16

// enqueueLocked appends it to key's mailbox and, if the mailbox was idle,
// puts it on the run queue; it reports whether it did. mbMu is held.
func (r *Reactor) enqueueLocked(key mboxKey, it *item) bool {
	mb := r.mboxes[key]
	if mb == nil {
		if n := len(r.spare); n > 0 {
			mb, r.spare = r.spare[n-1], r.spare[:n-1]
		} else {
			mb = &mailbox{items: ring.New[item](4, 0)}
		}
		mb.key = key
		r.mboxes[key] = mb
	}
	*mb.items.PushBack() = *it
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
			for ; n < len(buf) && mb.items.PopInto(&buf[n]); n++ {
			}
			if n == 0 {
				mb.scheduled = false
				delete(r.mboxes, mb.key)
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
					if it.ev != nil {
						_ = it.ev.Handle(abandoned{})
					}
				} else if it.reg != nil {
					*wc = it.wc
					r.handleWC(it.reg, wc)
				} else {
					r.handle(it.ev, it.h)
				}
				*it = item{}
			}
			r.handled(n)
			r.mbMu.Lock()
		}
	}
}
