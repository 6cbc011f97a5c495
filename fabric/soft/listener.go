package soft

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/poll"
)

// listener is the listening TCP socket of an RC id. Its fields belong to
// the loop goroutine.
type listener struct {
	l       *loop
	f       *Fabric
	ep      *endpoint
	fd      int
	gen     uint32
	backlog int
	pending int // accepted connections not yet accepted or rejected by the user
	closed  bool
	paused  bool
	waiting map[*conn]struct{} // accepted connections whose MPA Request has not come yet
}

func (s *listener) start() {
	gen, err := s.l.register(s.fd, poll.In, s)
	if err != nil {
		s.f.log.Error().Err(err).Int("fd", s.fd).Msg("soft: register listener")
		return
	}
	s.gen = gen
}

// onEvents implements pollable: accept every queued connection.
func (s *listener) onEvents(uint32) {
	for !s.closed {
		fd, _, err := unix.Accept4(s.fd, unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
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
			s.f.log.Warn().Err(err).Int("fd", s.fd).Msg("soft: accept")
			return
		}
		if s.pending >= s.backlog {
			// Over the backlog: refuse with a reset, as a full iWARP
			// listener does.
			_ = unix.SetsockoptLinger(fd, unix.SOL_SOCKET, unix.SO_LINGER, &unix.Linger{Onoff: 1, Linger: 0})
			_ = unix.Close(fd)
			continue
		}
		if _, err := s.f.eng.acquire(); err != nil {
			_ = unix.Close(fd)
			continue
		}
		// acquire returned this same loop: a listener holds a reference, so
		// the loop cannot have stopped.
		c := &conn{l: s.l, f: s.f, fd: fd, state: csWaitReq, lis: s, counts: true}
		s.pending++
		if s.waiting == nil {
			s.waiting = make(map[*conn]struct{})
		}
		s.waiting[c] = struct{}{}
		c.startPassive()
	}
}

// backoff stops accepting for a while when the process is out of
// descriptors, instead of spinning on a level-triggered listener.
func (s *listener) backoff(err error) {
	if s.paused {
		return
	}
	s.paused = true
	s.f.log.Warn().Err(err).Int("fd", s.fd).Msg("soft: accept backoff")
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
	return s.ep.newChild(c, localAddr(c.fd), peerAddr(c.fd))
}

// close stops listening and closes the connections still waiting for their
// MPA Request: their initiators see the close (REJECTED), and nothing of
// the listener outlives it. Requests already reported are the channel's.
func (s *listener) close() {
	if s.closed {
		return
	}
	s.closed = true
	for c := range s.waiting {
		c.closeNow() // removes itself from s.waiting
	}
	s.l.unregister(s.fd)
	_ = unix.Close(s.fd)
	s.l.eng.release(s.l)
}
