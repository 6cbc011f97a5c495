package bench

import (
	"sync/atomic"
	"time"
)

// counter is a count that a goroutine can wait on without polling.
type counter struct {
	n      atomic.Int64
	target atomic.Int64
	reach  chan struct{}
}

func newCounter() *counter {
	c := &counter{reach: make(chan struct{}, 1)}
	c.target.Store(1 << 62)
	return c
}

func (c *counter) Load() int64 { return c.n.Load() }

func (c *counter) Add(d int64) {
	if c.n.Add(d) >= c.target.Load() {
		select {
		case c.reach <- struct{}{}:
		default:
		}
	}
}

// wait waits until the count is at least n, or d passes; it reports
// whether the count got there.
func (c *counter) wait(n int64, d time.Duration) bool {
	c.target.Store(n)
	t := time.NewTimer(d)
	defer t.Stop()
	for c.n.Load() < n {
		select {
		case <-c.reach:
		case <-t.C:
			return c.n.Load() >= n
		}
	}
	return true
}
