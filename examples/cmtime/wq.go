package main

import "sync"

// workQueue is cmtime's work queue: a FIFO of work items served by a fixed
// number of goroutines (-n, cmtime's threads). Inserting never blocks, so
// the event goroutine can queue work while every worker is busy.
type workQueue struct {
	mu      sync.Mutex
	cond    sync.Cond
	items   []func()
	running bool
	wg      sync.WaitGroup
}

func newWorkQueue(threads int) *workQueue {
	q := &workQueue{running: true}
	q.cond.L = &q.mu
	q.wg.Add(threads)
	for range threads {
		go q.serve()
	}
	return q
}

// insert queues fn (wq_insert).
func (q *workQueue) insert(fn func()) {
	q.mu.Lock()
	q.items = append(q.items, fn)
	q.mu.Unlock()
	q.cond.Signal()
}

func (q *workQueue) serve() {
	defer q.wg.Done()
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for q.running && len(q.items) == 0 {
			q.cond.Wait()
		}
		if !q.running {
			return
		}
		fn := q.items[0]
		q.items[0] = nil
		q.items = q.items[1:]
		q.mu.Unlock()
		fn()
		q.mu.Lock()
	}
}

// stop ends the workers after the items they are running, dropping the
// queued ones, and waits for them (wq_cleanup).
func (q *workQueue) stop() {
	q.mu.Lock()
	q.running = false
	q.items = nil
	q.mu.Unlock()
	q.cond.Broadcast()
	q.wg.Wait()
}
