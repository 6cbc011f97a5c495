package soft

import (
	"sync"
	"time"
)

// pathTimers is a loop's deadline heap for the timers of its connections
// and of their data paths: a connection's own (conn.armTimer: the connect
// and request timeouts, the linger after our FIN) and its path's
// (rcPath.arm: the responder's wait for the RTR or its hold, the
// initiator's RTR repeats). One runtime timer per loop, made by the first
// arm and left set, stands for the earliest deadline; arming a timer and
// stopping it only move heap entries. A time.AfterFunc per arm (a timer
// and its closure, and a closure posted when it fired) cost every
// connection two allocations per arm (a path's at each end; a
// connection's: the initiator's connect timeout, the linger of the end
// that disconnects) and an addition to the runtime's timer heap, and a
// removal when it was stopped.
//
// An entry carries the arm's generation (rcPath.tgen, conn.tgen): every
// arm and every stop moves it, so an entry taken from the heap before a
// stop or a new arm (its fire already on its way to the connection's
// lock) finds its generation gone and does nothing.
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

// ptEntry is one armed timer: a data path's (p) or, p nil, a
// connection's (c).
type ptEntry struct {
	p    *rcPath
	c    *conn
	when int64 // monoNow deadline
	gen  uint32
	what pathTimer
}

// setIdx records i (an index + 1, 0: none) as the entry's place in the
// heap, in its path or connection. pt.mu is held.
func (e *ptEntry) setIdx(i int32) {
	if e.p != nil {
		e.p.tidx = i
	} else {
		e.c.tidx = i
	}
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
	pt.pushLocked(ptEntry{p: p, when: when, gen: gen, what: what})
	pt.mu.Unlock()
}

// addConn arms c's own timer to run onTimeout at when, replacing an entry
// c has. c.mu is held; any goroutine.
func (pt *pathTimers) addConn(c *conn, when int64, gen uint32) {
	pt.mu.Lock()
	if c.tidx != 0 {
		pt.removeLocked(int(c.tidx) - 1)
	}
	pt.pushLocked(ptEntry{c: c, when: when, gen: gen})
	pt.mu.Unlock()
}

// pushLocked adds e to the heap and sets the runtime timer if e is now
// the earliest. pt.mu is held.
func (pt *pathTimers) pushLocked(e ptEntry) {
	i := len(pt.h)
	pt.h = append(pt.h, e)
	pt.h[i].setIdx(int32(i + 1))
	pt.up(i)
	if pt.at == 0 || e.when < pt.at {
		pt.setLocked(e.when, monoNow())
	}
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

// removeConn drops c's own entry, if it has one. c.mu is held.
func (pt *pathTimers) removeConn(c *conn) {
	pt.mu.Lock()
	if c.tidx != 0 {
		pt.removeLocked(int(c.tidx) - 1)
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

// runPathTimers fires, on the loop, every timer that is due, and sets the
// runtime timer for the next.
func (l *loop) runPathTimers() {
	pt := &l.pt
	due := pt.takeDue(monoNow(), pt.due[:0])
	for k := range due {
		e := due[k]
		due[k] = ptEntry{}
		if e.p != nil {
			e.p.fire(e.gen, e.what)
		} else {
			e.c.fireTimer(e.gen)
		}
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
	h[i].setIdx(0)
	last := len(h) - 1
	if i != last {
		h[i] = h[last]
		h[i].setIdx(int32(i + 1))
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
	h[i].setIdx(int32(i + 1))
	h[j].setIdx(int32(j + 1))
}
