package soft

import (
	"errors"
	"net/netip"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
)

// Address resolution ends, as the kernel's rdma_resolve_addr does, only
// once the next hop's link-layer address is known (ARP or NDP): an id
// resolving a host that does not answer on its subnet gets ADDR_ERROR
// -ETIMEDOUT when the resolution's timeout expires, not ADDR_RESOLVED and
// a connect that fails later. A next hop with a usable entry resolves at
// once; otherwise the fabric makes the kernel solicit it and polls the
// entry (the kernel's rdma_cm waits for its neighbour-update events).

const (
	// defaultResolveTimeout applies to a ResolveAddr without a timeout.
	defaultResolveTimeout = 2 * time.Second
	// neighPollFirst and neighPollMax bound the interval between reads of
	// a neighbour entry being resolved: the first read comes after 1 ms
	// (an answer on a LAN takes less), then the interval doubles.
	neighPollFirst = time.Millisecond
	neighPollMax   = 50 * time.Millisecond
	// solicitPort is the port of the datagram that makes the kernel
	// resolve a next hop: the discard service.
	solicitPort = 9
)

// neighUsable reports whether ri's next hop can be reached now: it needs no
// neighbour, or its entry has a link-layer address. failed says the entry
// is missing or failed, so the kernel resolves it again only when asked.
// When the entry cannot be read (old kernels lack RTM_GETNEIGH for one
// entry) resolution does not wait for it.
func (f *Fabric) neighUsable(ri routeInfo) (usable, failed bool) {
	if !ri.nexthop.IsValid() {
		return true, false
	}
	n, err := f.mon.lookupNeigh(ri.oif, ri.nexthop)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return false, true
	case err != nil:
		f.log.Debug().Err(err).Stringer("nexthop", ri.nexthop).Msg("neighbour unreadable, not waiting for it")
		return true, false
	}
	return n.State.Valid(), n.State&unix.NUD_FAILED != 0
}

// solicit makes the kernel resolve the next hop towards dst from src, out
// of interface oif (0: as routed): an empty datagram to dst's discard port
// is queued until the link-layer address is known (or dropped if it never
// is). The socket is bound to oif when given, so that a destination the
// lookup took to be on that link (no route; see route) is sent there.
func solicit(src netip.Addr, dst netip.Addr, oif int) {
	fd, err := newSocket(family(dst.Unmap()), unix.SOCK_DGRAM)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if oif > 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BINDTOIFINDEX, oif)
	}
	if src.IsValid() && !src.IsUnspecified() {
		_ = bindTo(fd, netip.AddrPortFrom(src, 0))
	}
	if connectTo(fd, netip.AddrPortFrom(dst, solicitPort)) == nil {
		_, _ = unix.Write(fd, nil)
	}
}

// neighWait is an address resolution waiting for its next hop.
type neighWait struct {
	ep       *endpoint
	ri       routeInfo
	dst      netip.Addr
	gen      uint64
	deadline time.Time
	wait     time.Duration
}

// waitNeighLocked starts waiting for ri's next hop on behalf of the
// ResolveAddr of dst numbered ep.resolveGen: ADDR_RESOLVED or ADDR_ERROR
// follows. ep.mu is held.
func (ep *endpoint) waitNeighLocked(ri routeInfo, dst netip.Addr, timeout time.Duration) {
	if timeout <= 0 {
		timeout = defaultResolveTimeout
	}
	w := &neighWait{ep: ep, ri: ri, dst: dst, gen: ep.resolveGen,
		deadline: time.Now().Add(timeout), wait: neighPollFirst}
	solicit(ri.src, dst, ri.oif)
	time.AfterFunc(w.wait, w.poll)
}

// poll reads the next hop's entry and ends the resolution, or polls again.
func (w *neighWait) poll() {
	usable, failed := w.ep.f.neighUsable(w.ri)
	ep := w.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed || ep.resolveGen != w.gen {
		return // destroyed, or resolved again meanwhile
	}
	switch {
	case usable:
		ep.addrResolved = true
		r := fabric.RawEvent{Type: fabric.EventAddrResolved}
		ep.emitLocked(&r)
	case !time.Now().Before(w.deadline):
		ep.f.log.Debug().Stringer("nexthop", w.ri.nexthop).Msg("next hop unresolved")
		r := fabric.RawEvent{Type: fabric.EventAddrError, Status: -int32(syscall.ETIMEDOUT)}
		ep.emitLocked(&r)
	default:
		if failed {
			solicit(w.ri.src, w.dst, w.ri.oif) // the kernel probes a failed entry again only when used
		}
		w.wait = min(2*w.wait, neighPollMax, time.Until(w.deadline))
		time.AfterFunc(w.wait, w.poll)
	}
}
