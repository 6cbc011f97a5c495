package soft

import "time"

// idleTimer delays stopping what a fabric keeps while idle (its epoll loop,
// its address monitor) by the grace period (WithIdleGrace). The owner's
// lock guards it: arm and disarm are called with the lock held, and the
// expiry, which takes the lock, asks current so that a timer that fired
// while it was being disarmed or re-armed does nothing.
type idleTimer struct {
	t   *time.Timer
	gen uint64
}

// arm starts a grace period of d; when it ends, expire runs (on the
// timer's goroutine, without the lock) with the period's generation.
func (it *idleTimer) arm(d time.Duration, expire func(gen uint64)) {
	it.disarm()
	gen := it.gen
	it.t = time.AfterFunc(d, func() { expire(gen) })
}

// disarm cancels the grace period, if any.
func (it *idleTimer) disarm() {
	if it.t != nil {
		it.t.Stop()
		it.t = nil
	}
	it.gen++
}

// current reports whether gen is the grace period still running.
func (it *idleTimer) current(gen uint64) bool { return it.t != nil && it.gen == gen }
