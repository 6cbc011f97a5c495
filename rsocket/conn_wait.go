package rsocket

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

// cqWait is the context with which a blocked caller waits on a
// completion queue itself (fabric.CQ.Wait), on fabrics run by goroutines
// of this process (direct): the goroutine that queues a completion then
// wakes the caller, as a TCP Read is woken once. The reactor does not
// poll these queues (a completion would otherwise go through the queue's
// eventfd, the reactor's loop and a channel, and the eventfd alone costs
// two system calls per completion: BENCHMARKS.md, "rsocket"); callers
// poll them, as rsockets' callers do (it has no thread of its own for
// them): Read, Write and the waits of Close, CloseWrite and the
// keepalive.
//
// Another caller (a Write while a Read waits, or the reactor's handling
// of a CM event) may take a completion first: the waiter's Wait then
// goes on waiting for a queue that is empty again. So whatever changes
// what an armed waiter waits for (a completion handled by someone else,
// Close, the deadline) kicks it: Done is closed. A kicked context gets a
// new channel before its next wait; an unkicked one is reused, so a wait
// allocates nothing.
//
// A fabric that reads the connection on the waiting goroutine (the
// software fabric's direct receive) parks it where a closed channel does
// not reach, and asks for a kick of its own with AfterFunc; the standard
// library's context.AfterFunc does not fit a context whose channel is
// replaced between waits.
type cqWait struct {
	done   chan struct{}
	armed  bool // a caller waits, or is about to; under Conn.mu
	kicked bool // done is closed; under Conn.mu

	amu    sync.Mutex
	after  func()      // AfterFunc's, until kick runs it or stop drops it; under amu
	stopFn func() bool // stop as a value, made by the first AfterFunc
}

// Deadline implements context.Context: none (deadlines kick).
func (w *cqWait) Deadline() (time.Time, bool) { return time.Time{}, false }

// Done implements context.Context. Only the waiting caller calls it; the
// channel is replaced only by that caller, between waits.
func (w *cqWait) Done() <-chan struct{} { return w.done }

// Err implements context.Context: context.Canceled once kicked.
func (w *cqWait) Err() error {
	select {
	case <-w.done:
		return context.Canceled
	default:
		return nil
	}
}

// Value implements context.Context: no values.
func (w *cqWait) Value(any) any { return nil }

// kick ends an armed wait, and runs the function AfterFunc left.
// Called with mu held.
func (w *cqWait) kick() {
	if !w.armed || w.kicked {
		return
	}
	w.kicked = true
	close(w.done)
	w.amu.Lock()
	f := w.after
	w.after = nil
	w.amu.Unlock()
	if f != nil {
		f()
	}
}

// AfterFunc arranges for f to run once when the wait is kicked (at once
// if it has been), unless stop is called first; stop reports whether it
// prevented f. Only the waiting caller's queue calls it, during its Wait
// (the fabric's direct receive: rc_rxwait.go in fabric/soft), so done is
// not replaced meanwhile. It allocates nothing after its first call.
func (w *cqWait) AfterFunc(f func()) (stop func() bool) {
	w.amu.Lock()
	if w.stopFn == nil {
		w.stopFn = w.stop
	}
	select {
	case <-w.done:
		w.amu.Unlock()
		f()
	default:
		w.after = f
		w.amu.Unlock()
	}
	return w.stopFn
}

// stop is what AfterFunc returns.
func (w *cqWait) stop() bool {
	w.amu.Lock()
	defer w.amu.Unlock()
	had := w.after != nil
	w.after = nil
	return had
}

// inProcess reports whether fabric f makes its completions on goroutines
// of this process, as it declares (fabric.InProcessCompleter: the
// software fabric does, the kernel fabric does not): there a blocked
// caller waits on the queue itself and does not spin before it blocks.
// A fabric that declares nothing is taken to make them outside (a device,
// the kernel), where the reactor polls the queues and callers spin.
func inProcess(f fabric.Fabric) bool { return f == nil || fabric.CompletesInProcess(f) }

// block waits, without mu held, until what the caller waits for (what, as
// spin's) may be there, the connection is closed or the deadline dl
// passes. On fabrics that are not in process (the reactor polls the
// queues there), it waits on ch, which the reactor's handling signals. It
// returns nil when the caller should look again.
func (c *Conn) block(w *cqWait, what int, ch chan struct{}, dl *deadline) error {
	if !c.direct {
		return c.wait(ch, dl)
	}
	c.mu.Lock()
	if c.qp == nil || c.released {
		c.mu.Unlock()
		return c.wait(ch, dl)
	}
	// Looked at again under the same hold of mu that arms w: what was
	// handled since the caller looked (by the reactor) was not kicked.
	c.pollCQs()
	if c.ready(what) {
		c.mu.Unlock()
		return nil
	}
	if w.kicked {
		w.done = make(chan struct{})
		w.kicked = false
	}
	cq := c.waitQueue(what)
	w.armed = true
	c.mu.Unlock()
	err := c.ended(dl) // a deadline or Close before w was armed
	if err == nil {
		if werr := cq.Wait(w); werr != nil && !errors.Is(werr, context.Canceled) {
			// The queue is gone (destroyed): wait for what
			// signals ch (Close, the connection's end).
			err = c.wait(ch, dl)
		}
	}
	c.mu.Lock()
	w.armed = false
	c.mu.Unlock()
	if err == nil {
		err = c.ended(dl)
	}
	return err
}

// waitQueue is the queue a blocked caller waits on: a Write that has the
// peer's credits and buffer (and an IOWrite, which needs none) waits for
// its own sends to complete (room in the send queue or buffer), anything
// else for the peer's messages.
// Called with mu held.
func (c *Conn) waitQueue(what int) id.CQ {
	switch {
	case what == spinIOWrite,
		what != spinRead && !c.held && c.sseqNo != c.sseqComp && c.tsgl[c.tsge].Len != 0:
		return c.qp.SendCQ()
	}
	return c.qp.RecvCQ()
}

// ended is what ends a wait: Close (net.ErrClosed), or the deadline dl.
func (c *Conn) ended(dl *deadline) error {
	select {
	case <-c.done:
		return net.ErrClosed
	case <-dl.wait():
		return os.ErrDeadlineExceeded
	default:
		return nil
	}
}

// ready reports whether what a Read (spinRead) or a Write (spinWrite)
// waits for, or an end, is there. Called with mu held.
func (c *Conn) ready(what int) bool {
	if c.closed || c.downErr != nil {
		return true
	}
	switch what {
	case spinRead:
		return c.rmN > 0 || !c.readable
	case spinIOMap:
		return c.canSend(iomapLen) || !c.writable
	case spinIOWrite:
		return c.sqeAvail >= 1 && (c.ioLeft <= c.cfg.inline || c.sbufFits(c.ioLeft)) || !c.writable
	}
	return c.canSend(sndLowat) || !c.writable
}

// wakeRead and wakeWrite wake a Read or a Write waiting for the
// connection: on its channel, or on a queue. Called with mu held.
func (c *Conn) wakeRead() {
	wake(c.rwake)
	c.rwait.kick()
}

func (c *Conn) wakeWrite() {
	wake(c.wwake)
	c.wwait.kick()
}

// wakeCtl wakes Close or CloseWrite waiting for the send queue. Called
// with mu held.
func (c *Conn) wakeCtl() {
	wake(c.cwake)
	c.cwait.kick()
}

// awaitSends waits, with mu held (released while waiting), until cond
// holds, which send completions bring about (control slots, a drained
// send queue), or lingerTimeout passes: it then reports false. Where the
// reactor does not poll the queues (direct) it polls them itself and
// waits on the send queue.
func (c *Conn) awaitSends(cond func() bool) bool {
	expired := false
	t := time.AfterFunc(lingerTimeout, func() {
		c.mu.Lock()
		expired = true
		c.wakeCtl()
		c.mu.Unlock()
	})
	defer t.Stop()
	for {
		if !c.cqReg {
			c.pollCQs()
		}
		if cond() {
			return true
		}
		if expired {
			return false
		}
		w := &c.cwait
		if !c.direct || c.qp == nil || c.released {
			c.mu.Unlock()
			<-c.cwake
			c.mu.Lock()
			continue
		}
		if w.kicked {
			w.done = make(chan struct{})
			w.kicked = false
		}
		w.armed = true
		cq := c.qp.SendCQ()
		c.mu.Unlock()
		if err := cq.Wait(w); err != nil && !errors.Is(err, context.Canceled) {
			<-c.cwake // the queue is gone: wait for the timer's wake
		}
		c.mu.Lock()
		w.armed = false
	}
}
