package kernel

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/ucma"
	"github.com/cmrt/cmrt/internal/hooks"
)

// source is one open rdma_cm file: the kernel fabric's event channel
// backend. Its fd is the one the reactor polls; the kernel queues the
// events of every id created on (or migrated to) it, FIFO.
//
// Every command is one write(2) with a response address in s.buf, a page
// of mmap'd memory, so the kernel copies responses to memory the Go
// runtime never moves. s.mu serializes the commands (and guards the
// buffers). The fd is non-blocking: GET_EVENT never sleeps in the kernel
// while holding s.mu; a blocking Next waits for readability in the Go
// netpoller (the fd is wrapped in an *os.File), not on an OS thread.
type source struct {
	f        *Fabric
	fd       int
	file     *os.File
	rc       syscall.RawConn
	pollable bool
	waitSem  chan struct{} // one goroutine at a time waits for readability
	nextMu   sync.Mutex    // one dequeue (and what it does to a QP) at a time: events stay in order

	mu     sync.Mutex
	buf    *ucma.Buffers
	ev     ucma.Event
	closed bool
	eps    map[*endpoint]struct{}
	byUID  map[uint64]*endpoint
	// holds counts the listeners that left this fd (see endpoint.former):
	// while one does, Close destroys the ids it knows and keeps the fd
	// open, as requests still queued for them may have their kernel ids
	// here. fdClosed: the fd and buffers are released.
	holds    int
	fdClosed bool
	// onMigrate holds OnMigrate's functions: Migrate calls them (see
	// kick). Close drops them.
	onMigrate hooks.Set
}

// errClosed is what commands on a closed channel return.
var errClosed = fmt.Errorf("kernel: event channel closed: %w", syscall.EBADF)

func newSource(f *Fabric, fd int) (*source, error) {
	buf, err := ucma.NewBuffers()
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("kernel: %w", err)
	}
	file := os.NewFile(uintptr(fd), f.opts.devicePath)
	rc, err := file.SyscallConn()
	if err != nil {
		file.Close()
		buf.Close()
		return nil, fmt.Errorf("kernel: %w", err)
	}
	s := &source{
		f: f, fd: fd, file: file, rc: rc, buf: buf,
		waitSem: make(chan struct{}, 1),
		eps:     make(map[*endpoint]struct{}),
		byUID:   make(map[uint64]*endpoint),
	}
	// Deadlines work only on descriptors the netpoller took.
	s.pollable = file.SetReadDeadline(time.Time{}) == nil
	return s, nil
}

// Fabric implements fabric.EventSource.
func (s *source) Fabric() fabric.Fabric { return s.f }

// Fd implements fabric.EventSource: the rdma_cm fd, readable while events are
// queued.
func (s *source) Fd() int { return s.fd }

// Endpoints returns how many endpoints report to the source.
func (s *source) Endpoints() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.eps)
}

// exec runs fn with the fd and the buffers, holding s.mu and a reference
// on the fd (so a concurrent Close cannot recycle the descriptor number).
func (s *source) exec(fn func(fd int, b *ucma.Buffers) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execLocked(fn)
}

func (s *source) execLocked(fn func(fd int, b *ucma.Buffers) error) error {
	if s.closed {
		return errClosed
	}
	var ferr error
	if err := s.rc.Control(func(fd uintptr) { ferr = fn(int(fd), s.buf) }); err != nil {
		return errClosed
	}
	return ferr
}

// Create implements fabric.EventSource: CREATE_ID with uid, which the kernel
// echoes in every event of the id.
func (s *source) Create(uid uint64, ps fabric.PortSpace, qp fabric.QPType) (fabric.Endpoint, error) {
	if uid == 0 {
		return nil, fmt.Errorf("kernel: create_id: uid 0 (the kernel drops its events): %w", syscall.EINVAL)
	}
	ep := &endpoint{f: s.f, ps: ps, qp: qp, src: s, uid: uid}
	err := s.exec(func(fd int, b *ucma.Buffers) error {
		resp, err := b.Exec(fd, &ucma.CreateID{UID: uid, PS: ps, QPType: qp})
		if err != nil {
			return err
		}
		ep.handle, _ = ucma.DecodeUint32Resp(resp)
		s.eps[ep] = struct{}{}
		s.byUID[uid] = ep
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kernel: create_id: %w", err)
	}
	return ep, nil
}

// Next implements fabric.EventSource: GET_EVENT on the non-blocking fd; with
// block set, an empty queue is waited out in the netpoller until an event
// arrives, ctx ends or the source is closed.
func (s *source) Next(ctx context.Context, block bool, ev *fabric.RawEvent) error {
	err := s.next(ev)
	if err == nil || !block || !errors.Is(err, syscall.EAGAIN) {
		return wrapNext(err)
	}
	if ctx == nil {
		ctx = context.Background()
	}
	select {
	case s.waitSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-s.waitSem }()
	if !s.pollable {
		return s.pollNext(ctx, ev)
	}

	// One waiter at a time: ctx ending sets a past read deadline, which
	// wakes the netpoller wait; the deadline is cleared before the next
	// waiter runs.
	var amu sync.Mutex
	active := true
	stop := context.AfterFunc(ctx, func() {
		amu.Lock()
		if active {
			_ = s.file.SetReadDeadline(time.Unix(1, 0))
		}
		amu.Unlock()
	})
	defer func() {
		stop()
		amu.Lock()
		active = false
		_ = s.file.SetReadDeadline(time.Time{})
		amu.Unlock()
	}()
	for {
		var gerr error
		// The runtime resets the readiness state before the first call,
		// so an event that arrives after a failed GET_EVENT always wakes
		// the wait: no lost wakeups.
		rerr := s.rc.Read(func(uintptr) bool {
			gerr = s.next(ev)
			return !errors.Is(gerr, syscall.EAGAIN)
		})
		switch {
		case rerr == nil:
			return wrapNext(gerr)
		case errors.Is(rerr, os.ErrDeadlineExceeded):
			// A stale deadline (Migrate's or Close's kick): wait again.
			// Cleared under amu and ctx checked after, so that ctx ending
			// meanwhile is not lost.
			amu.Lock()
			_ = s.file.SetReadDeadline(time.Time{})
			amu.Unlock()
			if err := ctx.Err(); err != nil {
				return err
			}
		default:
			return errClosed
		}
	}
}

// pollNext waits with poll(2) for descriptors the netpoller refused: in
// short slices, checking ctx and Close between them.
func (s *source) pollNext(ctx context.Context, ev *fabric.RawEvent) error {
	for {
		err := s.next(ev)
		if !errors.Is(err, syscall.EAGAIN) {
			return wrapNext(err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		_ = s.rc.Control(func(fd uintptr) {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_, _ = unix.Poll(pfd, 50)
		})
	}
}

func wrapNext(err error) error {
	if err == nil || errors.Is(err, errClosed) {
		return err
	}
	return fmt.Errorf("kernel: get_event: %w", err)
}

var _ fabric.GuardedSource = (*source)(nil)

// NextUnless implements fabric.GuardedSource: stop is read under nextMu,
// which orders the dequeues.
func (s *source) NextUnless(stop *atomic.Bool, ev *fabric.RawEvent) error {
	return wrapNext(s.nextUnless(stop, ev))
}

// Fence implements fabric.GuardedSource.
func (s *source) Fence() {
	s.nextMu.Lock()
	// Empty on purpose: holding the lock once orders Fence after every
	// dequeue that held it.
	s.nextMu.Unlock()
}

// next dequeues one event into ev and applies it to the id's QP (which
// may rewrite the event, or drop it: then the next one is taken).
func (s *source) next(ev *fabric.RawEvent) error { return s.nextUnless(nil, ev) }

// nextUnless is next, or nothing and EAGAIN if stop (non-nil) is set.
func (s *source) nextUnless(stop *atomic.Bool, ev *fabric.RawEvent) error {
	s.nextMu.Lock()
	defer s.nextMu.Unlock()
	if stop != nil && stop.Load() {
		return syscall.EAGAIN
	}
	for {
		var p postEvent
		var req request
		err := s.exec(func(fd int, b *ucma.Buffers) error { return s.getEventLocked(fd, b, ev, &p, &req) })
		if err != nil {
			return err
		}
		if req.child != nil {
			s.adopt(req.lis, req.child)
		}
		if !p.apply(ev) {
			return nil
		}
	}
}

// request is a connection request's listener and new id, as read.
type request struct{ lis, child *endpoint }

// getEventLocked dequeues one event and maps it to ev; p gets the id (or
// join) the event is for, req a connection request's ids. s.mu is held.
func (s *source) getEventLocked(fd int, b *ucma.Buffers, ev *fabric.RawEvent, p *postEvent, req *request) error {
	resp, err := b.Exec(fd, &ucma.GetEvent{})
	if err != nil {
		return err
	}
	e := &s.ev
	if err := e.Decode(resp); err != nil {
		return err
	}
	switch e.Event {
	case fabric.EventMulticastJoin, fabric.EventMulticastError:
		decodeEvent(e, true, ev)
		if j, ok := s.f.join(e.ID); ok {
			ev.Group = j.group
			p.join = &j
		}
	case fabric.EventConnectRequest:
		ps, qp := fabric.PSTCP, fabric.RC
		lis := s.byUID[e.UID]
		if lis != nil {
			ps, qp = lis.ps, lis.qp
		}
		decodeEvent(e, qp == fabric.UD, ev)
		// resp.id is the new connection's kernel id, on this fd, with
		// uid 0 until it is accepted.
		child := &endpoint{f: s.f, ps: ps, qp: qp, src: s, handle: e.ID,
			reqIRD: e.Conn.ResponderResources, reqORD: e.Conn.InitiatorDepth}
		s.eps[child] = struct{}{}
		ev.Child = child
		if lis != nil {
			req.lis, req.child = lis, child
		}
	default:
		ep := s.byUID[e.UID]
		decodeEvent(e, ep != nil && ep.qp == fabric.UD, ev)
		p.ep = ep
	}
	return nil
}

// decodeEvent maps a decoded event_resp to a RawEvent. ud selects the UD
// view of the param union (UD ids and multicast events), as the kernel
// fills it; the ECE is ignored. Multicast events carry no private data
// (librdmacm puts the join's context there instead).
func decodeEvent(e *ucma.Event, ud bool, raw *fabric.RawEvent) {
	*raw = fabric.RawEvent{UID: e.UID, Type: e.Event, Status: e.Status}
	switch {
	case e.Event == fabric.EventUser:
		raw.Arg = e.Arg
	case e.Event == fabric.EventMulticastJoin || e.Event == fabric.EventMulticastError:
		raw.QPNum, raw.QKey, raw.AH = e.UD.QPNum, e.UD.QKey, ahAttr(&e.UD.AHAttr)
	case ud:
		raw.QPNum, raw.QKey, raw.AH = e.UD.QPNum, e.UD.QKey, ahAttr(&e.UD.AHAttr)
		raw.SetPrivateData(e.UD.Data())
	default:
		c := &e.Conn
		raw.QPNum = c.QPNum
		raw.ResponderResources, raw.InitiatorDepth = c.ResponderResources, c.InitiatorDepth
		raw.FlowControl, raw.RetryCount, raw.RNRRetryCount, raw.SRQ = c.FlowControl, c.RetryCount, c.RNRRetryCount, c.SRQ
		raw.SetPrivateData(c.Data())
	}
}

func ahAttr(a *ucma.AHAttr) fabric.AHAttr {
	return fabric.AHAttr{
		DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
		TrafficClass: a.TrafficClass, DLID: a.DLID, SL: a.SL, SrcPathBits: a.SrcPathBits,
		StaticRate: a.StaticRate, IsGlobal: a.IsGlobal, PortNum: a.PortNum,
	}
}

// Migrate implements fabric.EventSource: MIGRATE_ID written on this fd with
// the endpoint's current fd; the kernel moves the id and its queued events.
// The kernel makes no poller of this fd see them (see kick): Migrate wakes a
// Next waiting here and calls the OnMigrate functions, which a reactor
// polling the fd installs to read it once.
func (s *source) Migrate(e fabric.Endpoint) error {
	moved, err := s.migrate(e)
	if moved {
		s.migrated()
	}
	return err
}

// migrate is Migrate but for the OnMigrate functions, which it reports
// due: the id moved (with its queued events, if any).
func (s *source) migrate(e fabric.Endpoint) (moved bool, _ error) {
	ep, ok := e.(*endpoint)
	if !ok || ep.f != s.f {
		return false, fmt.Errorf("kernel: migrate_id: endpoint of another fabric: %w", syscall.EINVAL)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed {
		return false, fmt.Errorf("kernel: migrate_id: endpoint destroyed: %w", syscall.EINVAL)
	}
	old := ep.src
	if old == s {
		return false, nil
	}
	var cerr error
	err := old.rc.Control(func(oldfd uintptr) {
		cerr = s.exec(func(fd int, b *ucma.Buffers) error {
			if _, err := b.Exec(fd, &ucma.MigrateID{ID: ep.handle, OldFD: int(oldfd)}); err != nil {
				return err
			}
			s.eps[ep] = struct{}{}
			if ep.uid != 0 {
				s.byUID[ep.uid] = ep
			}
			return nil
		})
	})
	if err != nil {
		return false, fmt.Errorf("kernel: migrate_id: %w", errClosed)
	}
	if cerr != nil {
		return false, fmt.Errorf("kernel: migrate_id: %w", cerr)
	}
	old.forget(ep)
	ep.src = s
	s.kick()
	if ep.listening && !slices.Contains(ep.former, old) {
		// The requests that came while the listener was on old have
		// their kernel ids there (ucma creates a request's id on its
		// listener's file, and MIGRATE_ID moves the listener and its
		// queued events, not those ids): keep old's fd open for them
		// until the listener goes (adopt moves each when it is read).
		old.hold()
		ep.former = append(ep.former, old)
	}
	return true, nil
}

// adopt moves the kernel id of a connection request just read on s to s's
// fd, when it is still on the fd of a file its listener left: there,
// commands on s's fd would find it on another file (EINVAL), and closing
// that file would destroy it and reject the request, which the application
// has been handed (as rdma_migrate_id of a synchronous listener does in
// librdmacm, closing the private channel).
func (s *source) adopt(lis, child *endpoint) {
	lis.mu.Lock()
	former := slices.Clone(lis.former)
	lis.mu.Unlock()
	for _, f := range former {
		if f == s {
			continue
		}
		var cerr error
		err := f.rc.Control(func(oldfd uintptr) {
			cerr = s.exec(func(fd int, b *ucma.Buffers) error {
				_, err := b.Exec(fd, &ucma.MigrateID{ID: child.handle, OldFD: int(oldfd)})
				return err
			})
		})
		if err == nil && cerr == nil {
			return
		}
	}
}

// kick wakes a Next waiting for s's fd to become readable: MIGRATE_ID
// queues the id's events on the fd without waking its waiters (ucma wakes
// them when an event is added, not when events are moved), so a waiter
// would sleep on the moved events until another came. The waiter takes the
// past deadline as stale and reads again. An epoll of the fd is not woken
// so: that is what the OnMigrate functions are for (migrated).
func (s *source) kick() {
	if s.pollable {
		_ = s.file.SetReadDeadline(time.Unix(1, 0))
	}
}

// OnMigrate implements fabric.MigrateNotifier: f runs after every Migrate
// to s that moved an id, until stop or Close. A reactor polling s's fd
// installs one to read the events MIGRATE_ID moved here, which its epoll
// is not told of.
func (s *source) OnMigrate(f func()) (stop func() bool) {
	return s.onMigrate.Add(f)
}

// migrated calls the OnMigrate functions, without s.mu (they may read s).
func (s *source) migrated() { s.onMigrate.Run() }

// hold keeps s's fd open past Close until release (see holds).
func (s *source) hold() {
	s.mu.Lock()
	s.holds++
	s.mu.Unlock()
}

// release drops a hold; the last one of a closed source closes its fd.
func (s *source) release() {
	s.mu.Lock()
	s.holds--
	last := s.holds == 0 && s.closed && !s.fdClosed
	if last {
		s.fdClosed = true
	}
	s.mu.Unlock()
	if last {
		_ = s.closeFd()
	}
}

// closeFd closes the fd, then the buffers. The fd is closed without s.mu:
// closing waits for the calls that hold it (a Next's read, a Control), and
// those may be waiting for s.mu.
func (s *source) closeFd() error {
	err := s.file.Close()
	s.mu.Lock()
	_ = s.buf.Close()
	s.mu.Unlock()
	return err
}

// forget removes ep from the source's tables.
func (s *source) forget(ep *endpoint) {
	s.mu.Lock()
	s.forgetLocked(ep)
	s.mu.Unlock()
}

func (s *source) forgetLocked(ep *endpoint) {
	delete(s.eps, ep)
	if ep.uid != 0 && s.byUID[ep.uid] == ep {
		delete(s.byUID, ep.uid)
	}
}

// Close implements fabric.EventSource: closing the rdma_cm file destroys
// every kernel id still on it, with their queued events (connection
// requests not yet taken are rejected by the kernel).
func (s *source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.onMigrate.Close()
	eps := make([]*endpoint, 0, len(s.eps))
	for ep := range s.eps {
		eps = append(eps, ep)
	}
	s.eps, s.byUID = nil, nil
	s.mu.Unlock()
	gone := eps[:0]
	for _, ep := range eps {
		if ep.gone(s) {
			gone = append(gone, ep)
		}
	}
	s.mu.Lock()
	if s.holds == 0 || s.fdClosed {
		done := s.fdClosed
		s.fdClosed = true
		s.mu.Unlock()
		if done {
			return nil // the last listener's release closed it
		}
		return s.closeFd()
	}
	// A listener that left keeps the fd open: destroy the ids the fd
	// holds as closing it would (the requests not yet read stay, for
	// adopt), and wake the readers, which find the source closed.
	if !s.fdClosed {
		_ = s.rc.Control(func(fd uintptr) {
			for _, ep := range gone {
				_, _ = s.buf.Exec(int(fd), &ucma.DestroyID{ID: ep.handle})
			}
		})
	}
	s.mu.Unlock()
	s.kick()
	return nil
}
