package soft

import (
	"sync"
	"time"
)

// pathTimers is a loop's deadline heap for the timers of its connections'
// data paths (rcPath.arm): the responder's wait for the RTR or its hold,
// the initiator's RTR repeats. One runtime timer per loop, made by the
// first arm and left set, stands for the earliest deadline; arming a path
// and stopping it only move heap entries. A time.AfterFunc per arm (a
// timer and its closure, and a closure posted when it fired) cost every
// connection two allocations and an addition to the runtime's timer heap
// at each end, and a removal at the first FPDU.
//
// An entry carries the arm's generation (rcPath.tgen): every arm and every
// stop moves it, so an entry taken from the heap before a stop or a new
// arm (its fire already on its way to the path's lock) finds its
// generation gone and does nothing.
type pathTimers struct {
	mu sync.Mutex
	h  []ptEntry   // the heap, earliest deadline first; rcPath.tidx is an entry's index + 1
	t  *time.Timer // fires fired; made by the first arm
	at int64       // the deadline t is set for (monoNow), 0 when t is not set
	// fired and run are the timer's and the loop's functions, made once.
	fired, run func()
	// due is the loop's scratch list of the entries it fires. Loop only.
	due []ptEntry
	// pops counts the entries taken due (tests).
	pops uint64
}

// ptEntry is one armed path timer.
type ptEntry struct {
	p    *rcPath
	when int64 // monoNow deadline
	gen  uint32
	what pathTimer
}

// init makes the functions the timer and the loop run.
func (pt *pathTimers) init(l *loop) {
	pt.run = l.runPathTimers
	pt.fired = func() { l.post(pt.run) }
}

// add arms p's timer to run what at when, replacing an entry p has.
// c.mu of p's connection is held; any goroutine.
func (pt *pathTimers) add(p *rcPath, when int64, gen uint32, what pathTimer) {
	pt.mu.Lock()
	if p.tidx != 0 {
		pt.removeLocked(int(p.tidx) - 1)
	}
	i := len(pt.h)
	pt.h = append(pt.h, ptEntry{p: p, when: when, gen: gen, what: what})
	p.tidx = int32(i + 1)
	pt.up(i)
	if pt.at == 0 || when < pt.at {
		pt.setLocked(when, monoNow())
	}
	pt.mu.Unlock()
}

// remove drops p's entry, if it has one. The runtime timer stays set: it
// finds the heap without it. c.mu of p's connection is held.
func (pt *pathTimers) remove(p *rcPath) {
	pt.mu.Lock()
	if p.tidx != 0 {
		pt.removeLocked(int(p.tidx) - 1)
	}
	pt.mu.Unlock()
}

// setLocked sets the runtime timer for when.
func (pt *pathTimers) setLocked(when, now int64) {
	d := time.Duration(max(when-now, 0))
	if pt.t == nil {
		pt.t = time.AfterFunc(d, pt.fired)
	} else {
		pt.t.Reset(d)
	}
	pt.at = when
}

// runPathTimers fires, on the loop, every path timer that is due, and
// sets the runtime timer for the next.
func (l *loop) runPathTimers() {
	pt := &l.pt
	due := pt.takeDue(monoNow(), pt.due[:0])
	for k := range due {
		e := due[k]
		due[k] = ptEntry{}
		e.p.fire(e.gen, e.what)
	}
	pt.due = due[:0]
}

// takeDue appends to due the entries due at now, earliest first, takes
// them out of the heap and sets the runtime timer for the next.
func (pt *pathTimers) takeDue(now int64, due []ptEntry) []ptEntry {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	pt.at = 0 // the timer fired (a Reset since only makes it fire again)
	for len(pt.h) > 0 && pt.h[0].when <= now {
		due = append(due, pt.h[0])
		pt.removeLocked(0)
		pt.pops++
	}
	if len(pt.h) > 0 {
		pt.setLocked(pt.h[0].when, now)
	}
	return due
}

// removeLocked takes entry i out of the heap.
func (pt *pathTimers) removeLocked(i int) {
	h := pt.h
	h[i].p.tidx = 0
	last := len(h) - 1
	if i != last {
		h[i] = h[last]
		h[i].p.tidx = int32(i + 1)
	}
	h[last] = ptEntry{}
	pt.h = h[:last]
	if i != last {
		if !pt.up(i) {
			pt.down(i)
		}
	}
	if last == 0 && cap(pt.h) > 64 {
		pt.h = nil // a burst's room is not kept once drained
	}
}

// up moves entry i toward the root; it reports whether it moved.
func (pt *pathTimers) up(i int) bool {
	h, moved := pt.h, false
	for i > 0 {
		j := (i - 1) / 2
		if h[j].when <= h[i].when {
			break
		}
		pt.swap(i, j)
		i, moved = j, true
	}
	return moved
}

// down moves entry i toward the leaves.
func (pt *pathTimers) down(i int) {
	h := pt.h
	for {
		j := 2*i + 1
		if j >= len(h) {
			return
		}
		if r := j + 1; r < len(h) && h[r].when < h[j].when {
			j = r
		}
		if h[i].when <= h[j].when {
			return
		}
		pt.swap(i, j)
		i = j
	}
}

func (pt *pathTimers) swap(i, j int) {
	h := pt.h
	h[i], h[j] = h[j], h[i]
	h[i].p.tidx, h[j].p.tidx = int32(i+1), int32(j+1)
}
