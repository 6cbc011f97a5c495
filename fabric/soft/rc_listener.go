package soft

import (
	"container/list"
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/poll"
)

// listener is the listening TCP socket of an RC id. Its fields belong to
// the loop goroutine, but pending: a request leaves the count when the
// user reads or answers it, on the user's goroutine.
//
// The backlog counts the requests reported to the user and not yet read
// (CONNECT_REQUEST queued on the listener's channel, not yet taken by
// GetEvent), as the kernel's ucma counts them (it returns a request's
// place at get_event): a request completing its MPA exchange when backlog
// of them wait is refused with a reset, as iw_cm rejects a request ucma
// could not queue (the initiator gets REJECTED).
// TCP connections whose MPA Request has not arrived yet do not count: they
// wait in a pool of their own (halfOpen), bounded in all and per source
// host, where the oldest is evicted when a new connection needs room and
// the request timeout (WithRequestTimeout) closes those that take too
// long. So peers that open connections and send nothing, or trickle their
// Request a byte at a time, cost descriptors for a while but never keep
// other clients out.
type listener struct {
	l       *loop
	f       *Fabric
	ep      *endpoint
	fd      int
	gen     uint32
	backlog int
	pending atomic.Int32 // reported requests not yet read (nor answered) by the user
	closed  bool
	paused  bool
	nodelay bool     // the listening socket has TCP_NODELAY, which Linux gives every socket it accepts
	waiting halfOpen // accepted connections whose MPA Request has not come yet
	look    uint64   // the loop's look (Looks) that last reported the listener
}

// Bounds of a listener's pool of connections waiting for their MPA
// Request: a source host (an IPv4 address, an IPv6 /64) may hold
// max(backlog, halfOpenMinPerSource) of them, the pool halfOpenSources
// times that.
const (
	halfOpenMinPerSource = 64
	halfOpenSources      = 4
)

// halfOpen is a listener's pool of connections whose MPA Request has not
// arrived: all of them oldest first, and each source host's.
type halfOpen struct {
	all      list.List // *conn
	bySource map[netip.Addr]*list.List
}

// add puts c in the pool, from source host src.
func (h *halfOpen) add(c *conn, src netip.Addr) {
	if h.bySource == nil {
		h.bySource = make(map[netip.Addr]*list.List)
	}
	l := h.bySource[src]
	if l == nil {
		l = list.New()
		h.bySource[src] = l
	}
	c.inPool = h.all.PushBack(c)
	c.inSource = l.PushBack(c)
}

// remove takes c out of the pool, if it is there.
func (h *halfOpen) remove(c *conn) {
	if c.inPool == nil {
		return
	}
	h.all.Remove(c.inPool)
	src := sourceOf(c.peer)
	l := h.bySource[src]
	l.Remove(c.inSource)
	if l.Len() == 0 {
		delete(h.bySource, src)
	}
	c.inPool, c.inSource = nil, nil
}

// halfOpenLimits returns the bounds of a listener's pool for its backlog:
// per source host, and in all. Tests may set others (export_test.go).
func (f *Fabric) halfOpenLimits(backlog int) (perSource, all int) {
	if t := f.halfOpenBounds; t[0] > 0 {
		return t[0], t[1]
	}
	per := max(backlog, halfOpenMinPerSource)
	return per, per * halfOpenSources
}

// makeRoom evicts the oldest connection of list l (a source's, or the
// whole pool's) until it holds fewer than n. A connection whose Request
// has arrived unread gets a last read first, and leaves the pool if that
// completes it.
func (s *listener) makeRoom(l func() *list.List, n int) {
	for {
		// Each round takes the front connection out of the pool.
		ls := l()
		if ls == nil || ls.Len() < n {
			return
		}
		c := ls.Front().Value.(*conn)
		c.mu.Lock()
		c.readable(c.l.readBuf())
		if c.inPool == nil {
			c.mu.Unlock()
			continue // its Request came (or it closed)
		}
		s.f.log.Debug().Int("fd", c.fd).Stringer("from", c.peer).Msg("connection without MPA Request evicted")
		c.closeNow()
		c.mu.Unlock()
	}
}

func (s *listener) start() {
	gen, err := s.l.register(s.fd, poll.In, s)
	if err != nil {
		s.f.log.Error().Err(err).Int("fd", s.fd).Msg("register listener")
		return
	}
	s.gen = gen
}

// onEvents implements pollable: accept the queued connections. A listener
// reported after a quiet spell (an empty look or a park since its last
// report) most often has one connection queued: it accepts that one and
// leaves the rest, if any, to its level-triggered report, which the loop's
// next look, right after this round, gives again; an accept4 that finds
// the queue empty was one system call per connection at one connection
// at a time. Reported again by that next look, it has a queue: it accepts
// until the queue is empty.
func (s *listener) onEvents(uint32) {
	look := s.l.Looks()
	drain := look == s.look+1
	s.look = look
	for !s.closed {
		fd, peer, err := accept4(s.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
		if h := acceptHook.Load(); h != nil {
			(*h)(err)
		}
		switch err {
		case nil:
		case unix.EINTR, unix.ECONNABORTED:
			continue
		case unix.EAGAIN:
			return
		case unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM:
			s.backoff(err)
			return
		default:
			s.f.log.Warn().Err(err).Int("fd", s.fd).Msg("accept")
			return
		}
		src := sourceOf(peer)
		per, all := s.f.halfOpenLimits(s.backlog)
		s.makeRoom(func() *list.List { return s.waiting.bySource[src] }, per)
		s.makeRoom(func() *list.List { return &s.waiting.all }, all)
		if _, err := s.f.eng.acquire(); err != nil {
			_ = unix.Close(fd)
			continue
		}
		// acquire returned this same loop: a listener holds a reference, so
		// the loop cannot have stopped.
		// The pool holds the connection only while its Request is to
		// come: most often it is in already (startPassive).
		c := &conn{l: s.l, fd: fd, state: csWaitReq, lis: s, peer: peer}
		c.mu.Lock()
		c.startPassive()
		if c.state == csWaitReq {
			s.waiting.add(c, src)
		}
		c.mu.Unlock()
		if !drain {
			return
		}
	}
}

// acceptHook, set by tests only, sees the outcome of each accept4 of a
// listener.
var acceptHook atomic.Pointer[func(err error)]

// admit counts a passive connection whose MPA Request has come against the
// backlog, reporting false (the connection must be refused) when it is
// full.
func (s *listener) admit(c *conn) bool {
	s.waiting.remove(c)
	// Only the loop adds to pending: a request that leaves meanwhile only
	// makes room.
	if int(s.pending.Load()) >= s.backlog {
		return false
	}
	s.pending.Add(1)
	c.counts = true
	return true
}

// backoff stops accepting for a while when the process is out of
// descriptors, instead of spinning on a level-triggered listener.
func (s *listener) backoff(err error) {
	if s.paused {
		return
	}
	s.paused = true
	s.f.log.Warn().Err(err).Int("fd", s.fd).Msg("accept backoff")
	_ = s.l.modify(s.fd, s.gen, 0)
	time.AfterFunc(100*time.Millisecond, func() {
		s.l.post(func() {
			if !s.closed {
				s.paused = false
				_ = s.l.modify(s.fd, s.gen, poll.In)
			}
		})
	})
}

// newChild makes the endpoint of a connection request.
func (s *listener) newChild(c *conn) (*endpoint, error) {
	return s.ep.rc().newChild(c, c.peer)
}

// close stops listening and closes the connections still waiting for their
// MPA Request: their initiators see the close (REJECTED), and nothing of
// the listener outlives it. Requests already reported are the channel's.
func (s *listener) close() {
	if s.closed {
		return
	}
	s.closed = true
	for e := s.waiting.all.Front(); e != nil; e = s.waiting.all.Front() {
		c := e.Value.(*conn)
		c.mu.Lock()
		c.closeNow() // removes itself from the pool
		c.mu.Unlock()
	}
	s.l.unregister(s.fd)
	_ = unix.Close(s.fd)
	s.l.eng.release(s.l)
}
