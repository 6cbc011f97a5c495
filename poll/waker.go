package poll

import "sync/atomic"

// Waker wakes a loop blocked in Poller.Wait. Wakeups are coalesced: any
// number of Wake calls between two Resets cost one eventfd write.
//
// The owner loop registers Fd for In, and when it is reported calls Reset
// and then re-checks whatever queue the wakers fill, so no wakeup is lost.
type Waker struct {
	efd     *EventFD
	pending atomic.Bool
}

// NewWaker opens the eventfd behind a Waker.
func NewWaker() (*Waker, error) {
	efd, err := NewEventFD()
	if err != nil {
		return nil, err
	}
	return &Waker{efd: efd}, nil
}

// Fd returns the descriptor to register with the poller.
func (w *Waker) Fd() int { return w.efd.Fd() }

// Wake makes Fd readable unless a wakeup is already pending.
func (w *Waker) Wake() error {
	if w.pending.Load() || w.pending.Swap(true) {
		return nil
	}
	return w.efd.Add(1)
}

// Reset consumes the pending wakeup. The caller must check its queues after
// Reset returns.
func (w *Waker) Reset() {
	_, _ = w.efd.Read()
	w.pending.Store(false)
}

// Close closes the eventfd. It is idempotent.
func (w *Waker) Close() error { return w.efd.Close() }
