package netlink

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// Group is an rtnetlink multicast group (RTNLGRP_*, not the legacy RTMGRP_*
// bit mask).
type Group uint32

// Notification groups understood by [Monitor].
const (
	// GroupLink delivers RTM_NEWLINK/RTM_DELLINK (RTMGRP_LINK).
	GroupLink Group = unix.RTNLGRP_LINK
	// GroupIPv4Addr delivers IPv4 RTM_NEWADDR/RTM_DELADDR (RTMGRP_IPV4_IFADDR).
	GroupIPv4Addr Group = unix.RTNLGRP_IPV4_IFADDR
	// GroupIPv6Addr delivers IPv6 RTM_NEWADDR/RTM_DELADDR (RTMGRP_IPV6_IFADDR).
	GroupIPv6Addr Group = unix.RTNLGRP_IPV6_IFADDR
	// GroupIPv4Route delivers IPv4 RTM_NEWROUTE/RTM_DELROUTE (RTMGRP_IPV4_ROUTE).
	GroupIPv4Route Group = unix.RTNLGRP_IPV4_ROUTE
	// GroupIPv6Route delivers IPv6 RTM_NEWROUTE/RTM_DELROUTE (RTMGRP_IPV6_ROUTE).
	GroupIPv6Route Group = unix.RTNLGRP_IPV6_ROUTE
	// GroupIPv4Rule and GroupIPv6Rule carry policy routing rule changes
	// (RTM_NEWRULE/RTM_DELRULE). A Monitor decodes no Change from them;
	// they only move its [Monitor.Epoch].
	GroupIPv4Rule Group = unix.RTNLGRP_IPV4_RULE
	GroupIPv6Rule Group = unix.RTNLGRP_IPV6_RULE
)

// DefaultGroups are the groups [Subscribe] joins when none are given: links
// and IPv4/IPv6 addresses.
var DefaultGroups = []Group{GroupLink, GroupIPv4Addr, GroupIPv6Addr}

// ChangeKind says what a [Change] reports.
type ChangeKind uint8

// Change kinds.
const (
	// LinkUpdated is RTM_NEWLINK: a link appeared or its flags, MTU, name or
	// other attributes changed. Change.Link is set.
	LinkUpdated ChangeKind = iota + 1
	// LinkRemoved is RTM_DELLINK. Change.Link is set.
	LinkRemoved
	// AddrAdded is RTM_NEWADDR: an address was added or its flags changed
	// (e.g. DAD completed). Change.Addr is set.
	AddrAdded
	// AddrRemoved is RTM_DELADDR. Change.Addr is set.
	AddrRemoved
	// RouteAdded is RTM_NEWROUTE (route groups only). Change.Route is set.
	RouteAdded
	// RouteRemoved is RTM_DELROUTE (route groups only). Change.Route is set.
	RouteRemoved
)

// String returns the kind's name, e.g. "AddrRemoved".
func (k ChangeKind) String() string {
	names := [...]string{"", "LinkUpdated", "LinkRemoved", "AddrAdded", "AddrRemoved", "RouteAdded", "RouteRemoved"}
	if k > 0 && int(k) < len(names) {
		return names[k]
	}
	return "ChangeKind(" + strconv.Itoa(int(k)) + ")"
}

// Change is one decoded notification. Only the field selected by Kind is set.
type Change struct {
	// Kind says which notification this is.
	Kind ChangeKind
	// Link is set for LinkUpdated and LinkRemoved.
	Link Link
	// Addr is set for AddrAdded and AddrRemoved. Addr.IfName is resolved
	// best-effort and may be empty if the interface is already gone.
	Addr Addr
	// Route is set for RouteAdded and RouteRemoved (IfName best-effort;
	// LocalIndex unset; MTU only from RTAX_MTU).
	Route Route
}

// decodeChange decodes one notification message. ok is false for message
// types and address families a Monitor does not report.
func decodeChange(typ uint16, p []byte) (ch Change, ok bool, err error) {
	switch typ {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
		ch.Kind = LinkUpdated
		if typ == unix.RTM_DELLINK {
			ch.Kind = LinkRemoved
		}
		ch.Link, err = parseLink(p)
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		ch.Kind = AddrAdded
		if typ == unix.RTM_DELADDR {
			ch.Kind = AddrRemoved
		}
		ch.Addr, err = parseAddr(p)
	case unix.RTM_NEWROUTE, unix.RTM_DELROUTE:
		ch.Kind = RouteAdded
		if typ == unix.RTM_DELROUTE {
			ch.Kind = RouteRemoved
		}
		ch.Route, err = parseRoute(p)
	default:
		return Change{}, false, nil
	}
	if err == errUnsupportedFamily {
		return Change{}, false, nil
	}
	if err != nil {
		return Change{}, false, err
	}
	return ch, true, nil
}

// monitorRcvBuf is the receive buffer a Monitor asks for, to make overruns
// unlikely during bursts (SO_RCVBUFFORCE when privileged, else SO_RCVBUF,
// which the kernel caps at net.core.rmem_max).
const monitorRcvBuf = 1 << 20

// Monitor receives link/address/route notifications. It has no goroutine of
// its own: either poll [Monitor.Fd] for readability and drain it with
// [Monitor.Read], or block in [Monitor.Next].
//
// Read and Next may be called from any goroutine but are serialized; Close
// may be called concurrently with both and wakes a blocked Next.
type Monitor struct {
	rw      sync.RWMutex // held for reading by Read/Next, for writing by Close while releasing descriptors
	closing atomic.Bool
	stopCtx func() bool // deregisters the Subscribe context hook

	wakeMu sync.Mutex
	wakeFd int // eventfd that interrupts Next; -1 once closed

	// epoch counts the reads of the socket, twice each: odd while a read
	// is in progress, even between reads (see Quiet).
	epoch atomic.Uint64

	readMu   sync.Mutex // serializes Read/Next; guards the fields below
	s        *socket
	pending  []Change // decoded but not yet delivered
	head     int      // first undelivered element of pending
	deferred error    // overrun to report once pending is delivered
	resolver *Conn    // resolves interface names for address/route changes
	names    map[int]string
	linkSub  bool // names is kept current by link notifications
}

// Subscribe opens a Monitor joined to groups (DefaultGroups if none) in the
// calling thread's network namespace. When ctx is done the Monitor is
// closed; pass context.Background() to manage its lifetime with Close alone.
// Subscribing needs no privilege.
func Subscribe(ctx context.Context, groups ...Group) (*Monitor, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("netlink: subscribe: %w", err)
	}
	if len(groups) == 0 {
		groups = DefaultGroups
	}
	var mask uint32
	var extra []Group
	linkSub := false
	for _, g := range groups {
		switch {
		case g == 0:
			return nil, fmt.Errorf("netlink: subscribe: group 0: %w", unix.EINVAL)
		case g <= 32:
			mask |= 1 << (g - 1)
		default:
			extra = append(extra, g)
		}
		linkSub = linkSub || g == GroupLink
	}
	s, err := openSocket(mask, true)
	if err != nil {
		return nil, fmt.Errorf("netlink: subscribe: %w", err)
	}
	m := &Monitor{s: s, wakeFd: -1, names: make(map[int]string), linkSub: linkSub}
	fail := func(err error) (*Monitor, error) {
		s.close()
		if m.wakeFd >= 0 {
			unix.Close(m.wakeFd)
		}
		if m.resolver != nil {
			m.resolver.Close()
		}
		return nil, fmt.Errorf("netlink: subscribe: %w", err)
	}
	for _, g := range extra {
		if err := unix.SetsockoptInt(s.fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, int(g)); err != nil {
			return fail(os.NewSyscallError("setsockopt NETLINK_ADD_MEMBERSHIP", err))
		}
	}
	if unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, monitorRcvBuf) != nil {
		_ = unix.SetsockoptInt(s.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, monitorRcvBuf)
	}
	if m.wakeFd, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
		m.wakeFd = -1
		return fail(os.NewSyscallError("eventfd", err))
	}
	if m.resolver, err = Dial(); err != nil {
		return fail(err)
	}
	if ctx.Done() != nil {
		m.stopCtx = context.AfterFunc(ctx, func() { m.Close() })
	}
	return m, nil
}

// Fd returns the socket descriptor for use in the caller's poll/epoll loop
// (wait for readability, then call Read until it returns EAGAIN). It is
// non-blocking and stays valid until Close; remove it from any epoll set
// before Close (or before cancelling the Subscribe context), since the number
// may be reused afterwards. It returns -1 after Close.
func (m *Monitor) Fd() int {
	if m.closing.Load() {
		return -1
	}
	return m.s.fd
}

// Read decodes pending notifications into changes without blocking and
// returns how many it stored. When nothing is pending it returns 0 and
// unix.EAGAIN (syscall.EAGAIN). Decoded changes that do not fit are kept for
// the next call, so with edge-triggered polling call Read until EAGAIN.
//
// If the kernel dropped notifications (ENOBUFS) Read returns an error
// matching both [ErrOverrun] and syscall.ENOBUFS, after first delivering the
// changes received before the loss; a notification that cannot be decoded is
// reported the same way (also matching [ErrMalformed]). In both cases resync
// with [Links]/[Addrs] and continue reading. After Close it returns
// [ErrClosed].
func (m *Monitor) Read(changes []Change) (int, error) {
	m.rw.RLock()
	defer m.rw.RUnlock()
	if m.closing.Load() {
		return 0, ErrClosed
	}
	m.readMu.Lock()
	defer m.readMu.Unlock()
	return m.read(changes)
}

var errOverrun = fmt.Errorf("%w: %w", ErrOverrun, unix.ENOBUFS)

// read implements Read. m.readMu must be held.
func (m *Monitor) read(changes []Change) (int, error) {
	n := copy(changes, m.pending[m.head:])
	m.head += n
	if m.head == len(m.pending) {
		clear(m.pending)
		m.pending, m.head = m.pending[:0], 0
	}
	for n < len(changes) && m.head == len(m.pending) && m.deferred == nil {
		m.epoch.Add(1) // odd: a notification may be leaving the socket
		k, from, err := m.s.recv(unix.MSG_DONTWAIT)
		m.epoch.Add(1)
		if err == unix.EAGAIN {
			break
		}
		if err == unix.ENOBUFS {
			m.lost(errOverrun)
			break
		}
		if err != nil {
			return n, fmt.Errorf("netlink: monitor: %w", os.NewSyscallError("recvfrom", err))
		}
		if from != 0 {
			continue // not from the kernel
		}
		n = m.decode(m.s.buf[:k], changes, n)
	}
	if n > 0 {
		return n, nil
	}
	if err := m.deferred; err != nil {
		m.deferred = nil
		return 0, err
	}
	return 0, unix.EAGAIN
}

// lost records that notifications were lost; the error is reported once the
// changes decoded before the loss have been delivered.
func (m *Monitor) lost(err error) {
	if m.deferred == nil {
		m.deferred = err
	}
	clear(m.names) // link notifications may have been lost too
}

// decode decodes one datagram, storing changes into changes[n:] and the
// overflow into m.pending. It returns the new n.
func (m *Monitor) decode(b []byte, changes []Change, n int) int {
	for len(b) > 0 {
		h, p, rest, err := nextMessage(b)
		if err != nil {
			m.lost(fmt.Errorf("%w: %w", ErrOverrun, err))
			return n
		}
		b = rest
		ch, ok, err := decodeChange(h.Type, p)
		if err != nil {
			m.lost(fmt.Errorf("%w: %w", ErrOverrun, err))
			continue
		}
		if !ok {
			continue
		}
		m.resolveNames(&ch)
		if n < len(changes) {
			changes[n] = ch
			n++
		} else {
			m.pending = append(m.pending, ch)
		}
	}
	return n
}

// resolveNames fills in interface names and maintains the name cache.
func (m *Monitor) resolveNames(ch *Change) {
	switch ch.Kind {
	case LinkUpdated:
		if m.linkSub {
			m.names[ch.Link.Index] = ch.Link.Name
		}
	case LinkRemoved:
		delete(m.names, ch.Link.Index)
	case AddrAdded, AddrRemoved:
		ch.Addr.IfName = m.ifName(ch.Addr.Index)
	case RouteAdded, RouteRemoved:
		if ch.Route.OIF > 0 {
			ch.Route.IfName = m.ifName(ch.Route.OIF)
			ch.Route.Gateway = withLinkZone(ch.Route.Gateway, ch.Route.IfName)
		}
	}
}

// ifName returns the name of interface index: from the cache when link
// notifications keep it current, else by asking the kernel. It returns ""
// if the interface no longer exists.
func (m *Monitor) ifName(index int) string {
	if name, ok := m.names[index]; ok {
		return name
	}
	if m.resolver == nil {
		return ""
	}
	m.resolver.mu.Lock()
	name, _, err := m.resolver.linkInfo(index)
	m.resolver.mu.Unlock()
	if err != nil {
		return ""
	}
	if m.linkSub {
		m.names[index] = name
	}
	return name
}

// Next blocks until a change is available, ctx is done or the Monitor is
// closed. It is a convenience for tests and simple consumers; event loops
// should poll Fd and call Read instead. Errors are those of Read (never
// EAGAIN), ctx.Err(), or [ErrClosed].
func (m *Monitor) Next(ctx context.Context) (Change, error) {
	m.rw.RLock()
	defer m.rw.RUnlock()
	if m.closing.Load() {
		return Change{}, ErrClosed
	}
	m.readMu.Lock()
	defer m.readMu.Unlock()
	stop := context.AfterFunc(ctx, m.wake)
	defer stop()
	var one [1]Change
	for {
		if err := ctx.Err(); err != nil {
			return Change{}, err
		}
		if m.closing.Load() {
			return Change{}, ErrClosed
		}
		n, err := m.read(one[:])
		if n == 1 {
			return one[0], nil
		}
		if !errors.Is(err, unix.EAGAIN) {
			return Change{}, err
		}
		fds := []unix.PollFd{{Fd: int32(m.s.fd), Events: unix.POLLIN}, {Fd: int32(m.wakeFd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return Change{}, fmt.Errorf("netlink: monitor: %w", os.NewSyscallError("poll", err))
		}
		if fds[1].Revents != 0 {
			var buf [8]byte
			_, _ = unix.Read(m.wakeFd, buf[:]) // reset the eventfd counter
		}
	}
}

// Epoch returns a number that changes whenever the Monitor reads its
// socket: a notification (or a loss of some) taken from it changes the
// epoch before the taking is over. It is odd while a read is in progress.
func (m *Monitor) Epoch() uint64 { return m.epoch.Load() }

// Quiet reports whether every notification the kernel queued before the
// call has been read, and returns the epoch they were read in: the socket
// holds nothing (no notification, no pending loss) and no read is in
// progress. Something cached while the epoch was e, from the kernel's
// state read after Quiet returned (e, true), is as fresh as a new read for
// as long as Quiet returns (e, true), provided the subscription covers
// every change that can alter it: a change made since was queued before
// a later Quiet, which then either sees it queued or sees a later epoch.
// It costs one poll(2). It reports false once the Monitor is closing.
func (m *Monitor) Quiet() (uint64, bool) {
	if !m.rw.TryRLock() {
		return 0, false // Close is releasing the descriptors
	}
	defer m.rw.RUnlock()
	if m.closing.Load() {
		return 0, false
	}
	fds := [1]unix.PollFd{{Fd: int32(m.s.fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(fds[:], 0); err != nil || n != 0 {
		return 0, false
	}
	e := m.epoch.Load()
	return e, e%2 == 0
}

// wake interrupts a Next blocked in poll.
func (m *Monitor) wake() {
	m.wakeMu.Lock()
	defer m.wakeMu.Unlock()
	if m.wakeFd >= 0 {
		var one [8]byte
		ne.PutUint64(one[:], 1)
		_, _ = unix.Write(m.wakeFd, one[:])
	}
}

// Close stops the Monitor, wakes a blocked Next and releases its
// descriptors. It is idempotent and safe to call concurrently with Read and
// Next.
func (m *Monitor) Close() error {
	if m.closing.Swap(true) {
		return nil
	}
	if m.stopCtx != nil {
		m.stopCtx()
	}
	m.wake()
	m.rw.Lock() // wait for Read/Next to leave
	defer m.rw.Unlock()
	err := m.s.close()
	m.resolver.Close()
	m.wakeMu.Lock()
	unix.Close(m.wakeFd)
	m.wakeFd = -1
	m.wakeMu.Unlock()
	return err
}
