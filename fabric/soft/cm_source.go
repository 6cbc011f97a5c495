package soft

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/evq"
)

// source is the software fabric's event channel backend: an event FIFO
// with an eventfd, and the endpoints that report to it.
type source struct {
	f *Fabric
	q evq.Queue // by value: the source and its FIFO are one allocation

	mu sync.Mutex
	// one is the source's endpoint while it has only one (the private
	// source of a synchronous id has no other): eps, a map allocated per
	// source, is made only for a second one, and then holds them all.
	one    *endpoint
	eps    map[*endpoint]struct{}
	closed bool
}

// sourceQueueSize is the room a source's event FIFO starts with: one raw
// event (376 bytes, the 384-byte size class), grown when more wait. Most
// sources are the private channels of synchronous ids, which hold one
// event at a time (the answer to the call that waits for it): evq.New's
// eight made every synchronous id allocate 3 KiB it never used. A channel
// shared by many ids grows to what its bursts need once and keeps it.
const sourceQueueSize = 1

// newSource returns a source on f with an empty event FIFO.
func newSource(f *Fabric) *source {
	s := &source{f: f}
	evq.InitSize(&s.q, sourceQueueSize)
	return s
}

// Fabric implements fabric.EventSource.
func (s *source) Fabric() fabric.Fabric { return s.f }

// Fd implements fabric.EventSource.
func (s *source) Fd() int { return s.q.Fd() }

// Endpoints returns how many endpoints report to the source.
func (s *source) Endpoints() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.one != nil {
		return 1
	}
	return len(s.eps)
}

// Create implements fabric.EventSource.
func (s *source) Create(uid uint64, ps fabric.PortSpace, qp fabric.QPType) (fabric.Endpoint, error) {
	ep := newEndpoint(s.f, ps, qp)
	ep.uid, ep.src = uid, s
	if !s.adopt(ep) {
		return nil, fmt.Errorf("soft: channel closed: %w", syscall.EBADF)
	}
	return ep, nil
}

func (s *source) adopt(ep *endpoint) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.eps == nil && (s.one == nil || s.one == ep) {
		s.one = ep
		return true
	}
	if s.eps == nil {
		s.eps = make(map[*endpoint]struct{})
	}
	if s.one != nil {
		s.eps[s.one] = struct{}{}
		s.one = nil
	}
	s.eps[ep] = struct{}{}
	return true
}

func (s *source) forget(ep *endpoint) {
	s.mu.Lock()
	if s.one == ep {
		s.one = nil
	} else {
		delete(s.eps, ep)
	}
	s.mu.Unlock()
}

// Next implements fabric.EventSource. Reading a CONNECT_REQUEST returns the
// request's place in its listener's backlog, as ucma's get_event does.
func (s *source) Next(ctx context.Context, block bool, ev *fabric.RawEvent) error {
	if err := s.q.Pop(ctx, block, ev); err != nil {
		return err
	}
	taken(ev)
	return nil
}

var _ fabric.GuardedSource = (*source)(nil)

// NextUnless implements fabric.GuardedSource: Next without waiting, unless
// stop is set.
func (s *source) NextUnless(stop *atomic.Bool, ev *fabric.RawEvent) error {
	if err := s.q.PopUnless(stop, ev); err != nil {
		return err
	}
	taken(ev)
	return nil
}

// taken is what taking ev from the queue does besides: a CONNECT_REQUEST's
// place in its listener's backlog is returned (Next, NextUnless).
func taken(ev *fabric.RawEvent) {
	if ev.Type == fabric.EventConnectRequest {
		if child, ok := ev.Child.(*endpoint); ok {
			child.requestRead()
		}
	}
}

// Fence implements fabric.GuardedSource.
func (s *source) Fence() { s.q.Fence() }

// Migrate implements fabric.EventSource: the endpoint and its queued events move
// here, in order, with no event of it reported in between.
func (s *source) Migrate(e fabric.Endpoint) error {
	ep, ok := e.(*endpoint)
	if !ok || ep.f != s.f {
		return fmt.Errorf("soft: endpoint of another fabric: %w", syscall.EINVAL)
	}
	if !s.adopt(ep) {
		return fmt.Errorf("soft: channel closed: %w", syscall.EBADF)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	old := ep.src
	if old == s {
		return nil
	}
	if ep.destroyed {
		s.forget(ep)
		return fmt.Errorf("soft: endpoint destroyed: %w", syscall.EINVAL)
	}
	// The endpoint's own events and its multicast joins' (which carry the
	// join's uid) move together, in order.
	uids := ep.eventUIDsLocked()
	if len(uids) > 0 {
		moved := old.q.Extract(func(r *fabric.RawEvent) bool {
			for _, u := range uids {
				if r.UID == u {
					return true
				}
			}
			return false
		})
		// A listener's queued requests carry their new endpoints, which
		// report to the listener's channel: they move with it.
		for k := range moved {
			if child, ok := moved[k].Child.(*endpoint); ok {
				child.mu.Lock()
				child.src = s
				child.mu.Unlock()
				old.forget(child)
				s.adopt(child)
			}
		}
		if err := s.q.PushAll(moved); err != nil {
			return err
		}
	}
	ep.src = s
	old.forget(ep)
	return nil
}

// Close implements fabric.EventSource: endpoints still on the source are
// destroyed, as closing a channel destroys the kernel's ids on it.
func (s *source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	eps := make([]*endpoint, 0, len(s.eps)+1)
	if s.one != nil {
		eps = append(eps, s.one)
	}
	for ep := range s.eps {
		eps = append(eps, ep)
	}
	s.mu.Unlock()
	for _, ep := range eps {
		_ = ep.Destroy()
	}
	for _, r := range s.q.Close() {
		if r.Child != nil {
			_ = r.Child.Reject(nil)
			_ = r.Child.Destroy()
		}
	}
	return nil
}

// eventUIDsLocked returns the uids the endpoint's events carry: its own
// (0 before a request is accepted) and those of its multicast joins. ep.mu
// is held.
func (ep *endpoint) eventUIDsLocked() []uint64 {
	var uids []uint64
	if ep.uid != 0 {
		uids = append(uids, ep.uid)
	}
	return ep.tp.appendUIDsLocked(uids)
}
