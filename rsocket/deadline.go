package rsocket

import (
	"sync"
	"time"
)

// deadline is a settable point in time with a channel that is closed once
// it has passed, so a blocked call can select on it and see a deadline set
// while it waits. The zero value has no deadline.
type deadline struct {
	kick   func() // if set (before use), run without mu once the deadline has passed
	mu     sync.Mutex
	timer  *time.Timer
	passed chan struct{} // closed when the deadline has passed
}

// set arms the deadline at t; the zero time clears it.
func (d *deadline) set(t time.Time) {
	d.mu.Lock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.passed // the timer fired (or is firing): wait until it closed the channel
	}
	d.timer = nil
	if d.passed == nil {
		d.passed = make(chan struct{})
	}
	select {
	case <-d.passed:
		d.passed = make(chan struct{}) // was passed: start afresh
	default:
	}
	if t.IsZero() {
		d.mu.Unlock()
		return
	}
	dt := time.Until(t)
	if dt <= 0 {
		close(d.passed)
		d.mu.Unlock()
		d.passedNow()
		return
	}
	ch := d.passed
	d.timer = time.AfterFunc(dt, func() { close(ch); d.passedNow() })
	d.mu.Unlock()
}

// passedNow runs kick, if set. Never under mu: kick takes the
// connection's lock, under which wait is called.
func (d *deadline) passedNow() {
	if d.kick != nil {
		d.kick()
	}
}

// wait returns the channel closed when the deadline has passed.
func (d *deadline) wait() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.passed == nil {
		d.passed = make(chan struct{})
	}
	return d.passed
}

// stop releases the timer.
func (d *deadline) stop() {
	d.mu.Lock()
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.mu.Unlock()
}
