package soft

import "time"

// idleTimer delays stopping what a fabric keeps while idle (its epoll loop,
// its address monitor) by the grace period (WithIdleGrace). The owner's
// lock guards it: arm, disarm, stop and due are called with the lock held.
//
// A client making one connection at a time arms and disarms it for every
// connection, so the runtime timer is made once and left set: arming
// moves a deadline, disarming clears a flag, and the timer, when it fires,
// sets itself again for the rest of a period that was moved (due). Before,
// every connection stopped and made a timer: three allocations, two
// changes to the runtime's timer heap and, the grace timer being the
// earliest one, a wakeup of the netpoller's thread (an eventfd write and
// read) each time.
type idleTimer struct {
	t        *time.Timer
	armed    bool      // a grace period runs
	pending  bool      // t is set and has not fired
	deadline time.Time // when the armed period ends
}

// idleOwner is what an idleTimer reports to: idleFired runs on the timer's
// goroutine, without the lock, whenever the timer fires; it takes the lock
// and asks due whether the grace period is over.
type idleOwner interface {
	idleFired()
}

// arm starts a grace period of d, or starts it again from now.
func (it *idleTimer) arm(d time.Duration, owner idleOwner) {
	it.armed, it.deadline = true, time.Now().Add(d)
	switch {
	case it.t == nil:
		it.t = time.AfterFunc(d, owner.idleFired)
		it.pending = true
	case !it.pending:
		it.t.Reset(d)
		it.pending = true
	}
	// Still pending: it fires before the new deadline, and due sets it
	// for the rest.
}

// disarm cancels the grace period. A pending timer stays set: it finds
// nothing to do when it fires, unless a period was armed again meanwhile.
func (it *idleTimer) disarm() { it.armed = false }

// stop cancels the grace period and the timer, when what the timer guards
// stops anyway.
func (it *idleTimer) stop() {
	it.armed = false
	if it.t != nil && it.t.Stop() {
		it.pending = false
	}
}

// due reports whether the grace period is over; idleFired asks it. A
// period that was moved and is not over sets the timer for the rest.
func (it *idleTimer) due() bool {
	it.pending = false
	if !it.armed {
		return false
	}
	if rest := time.Until(it.deadline); rest > 0 {
		it.t.Reset(rest)
		it.pending = true
		return false
	}
	it.armed = false
	return true
}
