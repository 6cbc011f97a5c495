package soft

// Direct receive: a goroutine blocked on a completion queue of an RC QP
// whose connection is in RTS reads that connection itself, instead of
// waiting for the loop to read it and hand it the completion (finding 17
// in BENCHMARKS.md). A message then wakes one goroutine, as a TCP read
// does, not the loop and then the waiter.
//
// The waiter claims the read side (rxWait.claimed, under c.mu): the loop
// stops polling the socket for readable (pollEvents; hangups and errors
// still reach it), and the waiter parks in the Go netpoller on a
// duplicate of the socket until it is readable, then runs the loop's
// receive code (conn.readable) under c.mu, as the loop would: every check
// of rc_rx.go (a region deregistered, a QP destroyed, the connection
// closed) holds alike. It gives the read side back (the loop polls for
// readable again) when it returns: a completion is queued, its context
// ends, the queue is destroyed, or the connection leaves RTS or loses its
// QP. A completion queued by another goroutine (a send completion, a
// flush), the queue's close, the context's end and the connection's close
// kick the parked waiter: they set a past read deadline on the duplicate.
//
// Claiming and giving back each cost an epoll_ctl, and a ping-pong waits
// again a few microseconds after its wait returned: so a returning waiter
// keeps the claim, and a wait soon after takes it over without a system
// call. A timer gives the read side back to the loop once no wait has come
// for rxLinger and the socket has something to read (or hung up), or once
// none has come for rxLingerIdle. The timer is armed by a returning wait
// only when it is not pending, and armed again by its own firings, each
// later than the last (up to rxLingerMax) while waits keep coming: a timer
// reset by every wait, or firing every few hundred microseconds, and a
// claim given back whenever the waiter lost its CPU for rxLinger, delayed
// a tenth of a loaded machine's round trips by 10-20 µs (finding 28 in
// BENCHMARKS.md). The price: what the peer sends just after the waits
// stopped is read by the loop up to about rxLingerMax late (rxLinger
// before); once a firing has found them stopped, the timer looks again
// every rxLinger or so.

import (
	"context"
	"errors"
	"os"
	"reflect"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// rxWait is a connection's direct reader: the duplicate of its socket,
// made by the first wait that claims the connection and closed with it,
// and the state of the wait that holds the claim.
type rxWait struct {
	c      *conn
	f      *os.File        // duplicate of c.fd, in the Go netpoller
	rc     syscall.RawConn // f's
	lookFn func(uintptr) bool
	kickFn func()
	linger *time.Timer // gives an unheld claim back (giveBack)

	// Guarded by c.mu, with the fields below.
	armed bool          // linger is pending, or its giveBack runs
	every time.Duration // linger's next period while waits keep coming
	last  int64         // monoNow when the last wait started or returned
	arms  int           // times a returning wait armed linger (tests)

	// Guarded by c.mu.
	claimed  bool // the read side is off the loop (pollEvents)
	held     bool // a waiter holds the claim
	stepping bool // the waiter runs the receive code (look), holding c.mu
	closing  bool // the connection closed while held: the waiter closes f

	// The claimant's, for the wait it runs.
	cq    *cq
	p     *rcPath
	q     *rcQP
	ctx   context.Context
	busy  bool // look found c.mu held: wait for it outside the netpoller
	ended bool // look found the claim void (the connection left RTS, the QP went)

	// The kick on a context's end (onEnd), kept from one wait to the
	// next: the claimant's, or c.mu's while no waiter holds the claim.
	endDone <-chan struct{} // the Done channel of the context it watches
	endStop func() bool     // cancels it
}

// rxPast is the read deadline that kicks a parked direct reader.
var rxPast = time.Unix(1, 0)

// rxLinger is how long a claim outlives the wait that made it, for the
// next wait to take over, when the socket has something to read: longer
// than a ping-pong's turn (posting the next message and its receive),
// short enough that what the peer sends while nobody waits (a Send, a
// Disconnect) is read soon.
const rxLinger = 200 * time.Microsecond

// rxLingerMax bounds the period of the linger timer while waits keep
// coming: what the peer sends once they stop is read at most about that
// late. With 2 ms the firings still delayed a loaded ping-pong's round
// trips as a timer reset by every wait did; with 20 ms they did not
// (finding 28).
const rxLingerMax = 20 * time.Millisecond

// rxLingerIdle is how long a claim with nothing to read outlives the last
// wait.
const rxLingerIdle = 10 * time.Millisecond

// newRxWait makes c's direct reader: a duplicate of the socket that the
// Go netpoller watches. It returns nil if the netpoller cannot take it
// (the wait then goes the loop's way). c.mu is held.
func newRxWait(c *conn) *rxWait {
	fd, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), "soft-rc")
	if f == nil {
		_ = unix.Close(fd)
		return nil
	}
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil { // not pollable
		_ = f.Close()
		return nil
	}
	w := &rxWait{c: c, f: f, rc: rc}
	w.lookFn, w.kickFn = w.look, w.kick
	w.linger = time.AfterFunc(time.Hour, w.giveBack)
	w.linger.Stop()
	return w
}

// giveBack is the linger timer's: a claim no waiter has held for rxLinger
// goes back to the loop once there is something for the loop to read (or
// the peer hung up), and in any case once no wait has come for
// rxLingerIdle. While waits keep coming, or one is held for less than
// rxLingerIdle (a stream's receiver, held while a long message comes in),
// the timer is armed again, each time later, up to rxLingerMax; a wait
// held longer (a server waiting for its next request) leaves it off until
// it returns, so an idle connection is not woken. So a waiter that lost
// its CPU for longer than rxLinger between two waits (a loaded machine)
// finds its claim still there, and what the peer sent meanwhile in the
// socket, instead of in the loop's hands.
func (w *rxWait) giveBack() {
	c := w.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rxw != w || !w.claimed || c.state == csClosed {
		w.armed = false
		return
	}
	idle := time.Duration(monoNow() - w.last)
	switch {
	case idle < rxLinger || w.held && idle < rxLingerIdle:
		w.every = min(2*w.every, rxLingerMax)
		w.linger.Reset(w.every)
		return
	case w.held:
		w.armed = false // the wait's return arms it again
		return
	case idle < rxLingerIdle && !c.readReady():
		// The waits stopped, or the waiter lost its CPU: look again
		// every rxLinger until something comes or rxLingerIdle passed.
		w.every = rxLinger
		w.linger.Reset(rxLinger)
		return
	}
	w.armed = false
	w.claimed = false
	_ = c.l.modify(c.fd, c.gen, c.pollEvents())
}

// readReady reports whether the socket has bytes to read, has hung up or
// has an error pending: what the loop would be told of.
func (c *conn) readReady() bool {
	fds := [1]unix.PollFd{{Fd: int32(c.fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	n, err := unix.Poll(fds[:], 0)
	return err != nil || n > 0
}

// lingerOn keeps the claim for rxLinger after a wait returned. c.mu is
// held.
func (w *rxWait) lingerOn() {
	w.last = monoNow()
	if !w.armed {
		w.armed = true
		w.arms++
		w.every = rxLinger
		w.linger.Reset(rxLinger)
	}
}

// kick wakes the parked waiter (or makes its next park return at once).
func (w *rxWait) kick() { _ = w.f.SetReadDeadline(rxPast) }

// The contexts a direct wait takes: those that never end (Done nil); the
// standard library's cancelable ones (WithCancel, WithCancelCause,
// WithTimeout, WithDeadline), on which context.AfterFunc, which kicks the
// parked waiter when they end, starts no goroutine; and contexts of their
// own that implement afterFuncer. Any other context (another type of its
// own, one that only carries values) waits as before: an AfterFunc on it
// would start a goroutine per wait that watches it.
var (
	stdCancelCtx = func() reflect.Type {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		return reflect.TypeOf(ctx)
	}()
	stdTimerCtx = func() reflect.Type {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		return reflect.TypeOf(ctx)
	}()
)

// afterFuncer is a context of its own that a direct wait takes: AfterFunc
// arranges for f to run once, on any goroutine, when the context ends (at
// once if it has), unless stop is called first; stop reports whether it
// prevented that.
type afterFuncer interface {
	AfterFunc(f func()) (stop func() bool)
}

// directCtx reports whether a direct wait takes ctx (see stdCancelCtx).
func directCtx(ctx context.Context) bool {
	if ctx.Done() == nil {
		return true
	}
	if _, ok := ctx.(afterFuncer); ok {
		return true
	}
	t := reflect.TypeOf(ctx)
	return t == stdCancelCtx || t == stdTimerCtx
}

// onEnd has w's waiter kicked when ctx ends (nothing to do if it never
// does). The registration outlives the wait: the next wait on a context
// with the same Done channel (most often the same context: a goroutine
// serving a connection waits with its own again and again) keeps it as it
// is, where a registration per wait was two allocations each
// (context.AfterFunc's), the only ones of a blocking wait; a wait on
// another context replaces it, and the reader's close drops it
// (dropEnd). A kick from a context whose wait has returned makes a later
// wait look at its queue and context once more, nothing else. Called by
// the claimant.
func (w *rxWait) onEnd(ctx context.Context) {
	done := ctx.Done()
	if done == nil || done == w.endDone {
		return
	}
	w.dropEnd()
	if a, ok := ctx.(afterFuncer); ok {
		w.endStop = a.AfterFunc(w.kickFn)
	} else {
		w.endStop = context.AfterFunc(ctx, w.kickFn)
	}
	w.endDone = done
}

// dropEnd cancels the kick onEnd registered, if any: by the claimant, or
// under c.mu while no waiter holds the claim.
func (w *rxWait) dropEnd() {
	if w.endStop != nil {
		w.endStop()
	}
	w.endDone, w.endStop = nil, nil
}

// waitDirect waits on cq, one of q's queues, reading q's connection
// itself until cq is ready, ctx ends (ctx.Err()) or the connection can no
// longer be read this way. It returns nil at once, having done nothing,
// when it cannot claim the connection: q is not in RTS, or another waiter
// holds the claim, or ctx is not one it takes (directCtx). The caller then
// waits on cq as usual (a completion queued meanwhile is there at once).
func (q *rcQP) waitDirect(ctx context.Context, cq *cq) error {
	if !directCtx(ctx) {
		return nil
	}
	q.mu.Lock()
	p := q.path
	if q.destroyed || q.state != qpRTS {
		p = nil
	}
	q.mu.Unlock()
	if p == nil {
		return nil
	}
	c := p.c
	c.mu.Lock()
	w := c.rxw
	if !p.readsFor(q) || (w != nil && w.held) {
		c.mu.Unlock()
		return nil
	}
	if w == nil {
		if w = newRxWait(c); w == nil {
			c.mu.Unlock()
			return nil
		}
		c.rxw = w
	}
	w.held, w.cq, w.p, w.q, w.ctx = true, cq, p, q, ctx
	w.last = monoNow()
	if !w.claimed {
		w.claimed = true
		_ = c.l.modify(c.fd, c.gen, c.pollEvents())
	}
	c.mu.Unlock()

	w.onEnd(ctx)
	err := w.run()
	cq.parked.Store(nil)

	c.mu.Lock()
	w.held, w.cq, w.p, w.q, w.ctx = false, nil, nil, nil, nil
	switch {
	case w.closing || c.state == csClosed:
		w.claimed = false
		c.rxw = nil
		w.linger.Stop()
		w.armed = false
		w.dropEnd()
		_ = w.f.Close()
	case p.readsFor(q):
		// Kept for the next wait; the timer gives it back if none
		// comes.
		w.lingerOn()
	default:
		// The loop reads again; what came since the last look is
		// reported to it at once (level-triggered).
		w.claimed = false
		_ = c.l.modify(c.fd, c.gen, c.pollEvents())
	}
	c.mu.Unlock()
	return err
}

// readsFor reports whether a waiter on q's queues may read the path's
// connection: it is in RTS with q attached. c.mu is held.
func (p *rcPath) readsFor(q *rcQP) bool {
	c := p.c
	return c.state == csRTS && c.dp == p && !p.dead && p.qp == q
}

// run parks in the netpoller and reads (look) until the queue is ready,
// ctx ends or the claim is void.
func (w *rxWait) run() error {
	for {
		if w.cq.q.Ready() {
			return nil
		}
		if err := w.ctx.Err(); err != nil {
			return err
		}
		w.busy, w.ended = false, false
		err := w.rc.Read(w.lookFn)
		switch {
		case w.ended:
			return nil
		case w.busy:
			w.c.mu.Lock() // wait for the holder, then look again
			w.c.mu.Unlock()
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Kicked: look at the queue and ctx again. A kick after this
			// reset follows a completion or an end that the next look
			// sees.
			_ = w.f.SetReadDeadline(time.Time{})
		case err != nil:
			return nil // f is closed
		}
	}
}

// look is the netpoller callback of run: it reads the socket under c.mu
// with the loop's receive code, and reports false (park until readable)
// when the socket had nothing and nothing else happened since run looked.
func (w *rxWait) look(uintptr) bool {
	cq, c := w.cq, w.c
	cq.parked.Store(nil)
	if !c.mu.TryLock() {
		// Not while holding f: closeNow closes f under c.mu.
		w.busy = true
		return true
	}
	if w.closing || !w.p.readsFor(w.q) {
		c.mu.Unlock()
		w.ended = true
		return true
	}
	w.stepping = true
	got := c.readable(nil) // not on the loop: the loop's read buffer is not ours
	w.stepping = false
	c.mu.Unlock()
	if got {
		return true
	}
	// Parked from here: a completion queued by another goroutine, or
	// ctx's end, after this look kicks.
	cq.parked.Store(w)
	if cq.q.Ready() || w.ctx.Err() != nil {
		cq.parked.Store(nil)
		return true
	}
	return false
}

// closeConn is closeNow's part for a connection with a direct reader, c.mu
// held: the duplicate is closed now, or by the waiter holding the claim,
// which is kicked. It reports true when the waiter itself closes the
// connection (in look): closing the socket and leaving the epoll set are
// then left to the loop, whose they are.
func (w *rxWait) closeConn() bool {
	c := w.c
	w.claimed = false
	if !w.held {
		c.rxw = nil
		w.linger.Stop()
		w.armed = false
		w.dropEnd()
		_ = w.f.Close()
		return false
	}
	w.closing = true
	w.kick()
	if !w.stepping {
		return false
	}
	fd, l := c.fd, c.l
	if !l.post(func() {
		l.unregister(fd)
		_ = unix.Close(fd)
		l.eng.release(l)
	}) {
		return false
	}
	return true
}
