package soft

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/netlink"
)

// netmon raises the CM events of address and device changes, as the
// kernel's rdma_cm does for the devices it sits on:
//
//   - DEVICE_REMOVAL for every id on a soft device that is gone: its
//     interface was deleted or lost its last address (a soft device is an
//     interface with an address). The id's connection is closed (its QP
//     fails, and the peer sees the connection end) and the id reports
//     nothing more; the user must destroy it.
//   - ADDR_CHANGE for an id whose local address was removed from an
//     interface that remains a device (it keeps other addresses). The id
//     keeps its connection, which fails later if it needs the address.
//     ADDR_CHANGE is reported once per removal; an address that comes back
//     and goes again reports again.
//
// The ids watched are those with a local address: bound (Bind, or bound by
// ResolveAddr or Listen) or born from a connection request. The watch costs
// a NETLINK_ROUTE subscription (three descriptors), one goroutine and the
// route socket the fabric's lookups share, held while at least one id is
// watched and for the grace period after the last (WithIdleGrace): an idle
// fabric soon holds none. The
// subscription lives in the network namespace of the thread that bound the
// first id, which is the namespace of the fabric's sockets.
type netmon struct {
	f *Fabric

	mu  sync.Mutex
	eps map[*endpoint]struct{}
	cur *monitor // nil while nothing is watched (or the subscription failed)
	// rc is the route socket the fabric's lookups share while ids are
	// watched (see lookupRoute); nil otherwise.
	rc *netlink.Conn
	// idle is armed while nothing is watched but the subscription and rc
	// are kept.
	idle idleTimer
	// routes caches lookups that found a local destination, valid while
	// the subscription has read nothing since (see lookupRoute); emptied
	// with the subscription.
	routes map[routeKey]cachedRoute
}

// routeKey is what a route lookup asks.
type routeKey struct {
	dst, src netip.Addr
	oif      int
}

// cachedRoute is a lookup's answer and the subscription's epoch it is
// valid in.
type cachedRoute struct {
	r     netlink.Route
	epoch uint64
}

// maxCachedRoutes bounds the route cache: past it the cache starts over.
const maxCachedRoutes = 256

// monitor is one subscription and the goroutine that reads it.
type monitor struct {
	m    *netlink.Monitor
	done chan struct{}
}

// track starts watching ep. It may be called with ep.mu held.
func (n *netmon) track(ep *endpoint) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.eps == nil {
		n.eps = make(map[*endpoint]struct{})
	}
	if _, ok := n.eps[ep]; ok {
		return
	}
	n.idle.disarm()
	n.eps[ep] = struct{}{} // what it reported is the endpoint's (addrGone)
	if n.cur == nil {
		n.cur = n.startLocked()
	}
	if n.rc == nil {
		n.rc, _ = netlink.Dial() // on failure, lookups open their own
	}
}

// untrack stops watching ep. After the last one the subscription and the
// route socket stay for the grace period, then stop (at once, before
// untrack returns, with no grace). ep.mu must not be held.
func (n *netmon) untrack(ep *endpoint) {
	n.mu.Lock()
	if _, ok := n.eps[ep]; !ok {
		n.mu.Unlock()
		return
	}
	delete(n.eps, ep)
	var stop *monitor
	var rc *netlink.Conn
	if len(n.eps) == 0 {
		if grace := n.f.opts.idleGrace; grace > 0 {
			n.idle.arm(grace, n)
		} else {
			stop, rc = n.detachLocked()
		}
	}
	n.mu.Unlock()
	closeMonitor(stop, rc)
}

// idleFired implements idleOwner: the subscription stops once its grace
// period is over and nothing is watched.
func (n *netmon) idleFired() {
	n.mu.Lock()
	var stop *monitor
	var rc *netlink.Conn
	if n.idle.due() && len(n.eps) == 0 {
		stop, rc = n.detachLocked()
	}
	n.mu.Unlock()
	closeMonitor(stop, rc)
}

// stopIdle stops the subscription at once if nothing is watched
// (Quiesce).
func (n *netmon) stopIdle() {
	n.mu.Lock()
	var stop *monitor
	var rc *netlink.Conn
	if len(n.eps) == 0 {
		stop, rc = n.detachLocked()
	}
	n.mu.Unlock()
	closeMonitor(stop, rc)
}

// detachLocked takes the subscription and the route socket away for
// closeMonitor. n.mu is held.
func (n *netmon) detachLocked() (*monitor, *netlink.Conn) {
	n.idle.stop()
	stop, rc := n.cur, n.rc
	n.cur, n.rc = nil, nil
	clear(n.routes)
	return stop, rc
}

// closeMonitor closes what detachLocked took.
func closeMonitor(stop *monitor, rc *netlink.Conn) {
	if rc != nil {
		_ = rc.Close() // waits for a lookup in progress
	}
	if stop != nil {
		_ = stop.m.Close() // wakes the reader
		<-stop.done
	}
}

// sharesRouteSocket reports whether lookups share a route socket (tests).
func (n *netmon) sharesRouteSocket() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.rc != nil
}

// lookupRoute asks the routing table about dst (from src, if valid) with
// one RTM_GETROUTE, or answers from the cache: a lookup that found a local
// destination (the host's own address: loopback, a soft device's address)
// is kept while the address monitor, subscribed to link, address, route
// and rule changes, has read nothing since and has nothing left to read
// (netlink.Monitor.Quiet), which holds until the kernel queues a change
// that could alter the answer. Local routes carry no path MTU learned from
// the network and need no neighbour, so nothing else can make them stale.
// Other answers are not kept.
func (n *netmon) lookupRoute(dst, src netip.Addr, oif int) (r netlink.Route, err error) {
	k := routeKey{dst, src, oif}
	n.mu.Lock()
	mon := n.cur // nil: no subscription, nothing cached nor kept
	if n.rc == nil {
		mon = nil // (set and cleared with cur: detachLocked)
	}
	cached, hit := n.routes[k]
	n.mu.Unlock()
	// The epoch before the lookup: the answer may be kept only if no
	// notification was read meanwhile and none is waiting after it.
	var before uint64
	if mon != nil {
		if hit {
			if e, quiet := mon.m.Quiet(); quiet && e == cached.epoch {
				return cached.r, nil
			}
		}
		before = mon.m.Epoch()
	}
	err = n.withConn(func(c *netlink.Conn) error {
		r, err = c.RouteLookupOIF(dst, src, oif)
		return err
	})
	if mon == nil || err != nil || r.Type != netlink.RouteLocal || before%2 != 0 {
		return r, err
	}
	if e, quiet := mon.m.Quiet(); quiet && e == before {
		n.mu.Lock()
		if n.cur == mon {
			if n.routes == nil || len(n.routes) >= maxCachedRoutes {
				n.routes = make(map[routeKey]cachedRoute)
			}
			n.routes[k] = cachedRoute{r: r, epoch: e}
		}
		n.mu.Unlock()
	}
	return r, nil
}

// lookupNeigh reads the neighbour entry of addr on interface index.
func (n *netmon) lookupNeigh(index int, addr netip.Addr) (ne netlink.Neigh, err error) {
	err = n.withConn(func(c *netlink.Conn) error {
		ne, err = c.NeighGet(index, addr)
		return err
	})
	return ne, err
}

// withConn runs fn on the route socket shared while ids are watched, or
// on a socket of its own when there is none (an unbound id's first
// resolution) or it closed meanwhile.
func (n *netmon) withConn(fn func(c *netlink.Conn) error) error {
	n.mu.Lock()
	rc := n.rc
	n.mu.Unlock()
	if rc != nil {
		if err := fn(rc); !errors.Is(err, netlink.ErrClosed) {
			return err
		}
	}
	c, err := netlink.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// watching returns how many endpoints are watched and whether a
// subscription is running (tests).
func (n *netmon) watching() (int, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.eps), n.cur != nil
}

// startLocked subscribes to link, address, route and rule changes. A failure (out of
// descriptors, netlink forbidden) is logged and leaves the endpoints
// unwatched until the next track tries again. n.mu is held.
func (n *netmon) startLocked() *monitor {
	// The route and rule groups only keep the route cache honest
	// (lookupRoute): their changes raise no event.
	m, err := netlink.Subscribe(context.Background(), netlink.GroupLink, netlink.GroupIPv4Addr, netlink.GroupIPv6Addr,
		netlink.GroupIPv4Route, netlink.GroupIPv6Route, netlink.GroupIPv4Rule, netlink.GroupIPv6Rule)
	if err != nil {
		n.f.log.Warn().Err(err).Msg("address monitor unavailable: no ADDR_CHANGE or DEVICE_REMOVAL events")
		return nil
	}
	mon := &monitor{m: m, done: make(chan struct{})}
	go n.run(mon)
	return mon
}

// run reads changes until the subscription is closed.
func (n *netmon) run(mon *monitor) {
	defer close(mon.done)
	for {
		ch, err := mon.m.Next(context.Background())
		switch {
		case errors.Is(err, netlink.ErrClosed):
			return
		case errors.Is(err, netlink.ErrOverrun):
			// Changes were lost: compare every watched id with the host.
			n.f.log.Warn().Err(err).Msg("address monitor overrun, resyncing")
			n.check()
		case err != nil:
			n.f.log.Warn().Err(err).Msg("address monitor")
			time.Sleep(100 * time.Millisecond) // no busy loop on a persistent error
		case ch.Kind == netlink.AddrRemoved, ch.Kind == netlink.LinkRemoved, ch.Kind == netlink.AddrAdded:
			// AddrAdded re-arms ADDR_CHANGE for an address that came back.
			n.check()
		}
	}
}

// hostView is what the host has now: the interfaces that are soft devices
// and every local address.
type hostView struct {
	devs  map[int]bool
	addrs map[netip.Addr]bool
}

// snapshot rereads the interfaces.
func (t *deviceTable) snapshot() (hostView, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.refreshLocked(); err != nil {
		return hostView{}, err
	}
	v := hostView{devs: make(map[int]bool, len(t.byIndex)), addrs: make(map[netip.Addr]bool, len(t.all))}
	for ix := range t.byIndex {
		v.devs[ix] = true
	}
	for a := range t.all {
		v.addrs[a] = true
	}
	return v, nil
}

// check compares every watched endpoint with the host and reports what
// changed for it. Connections of removed ids are closed once every id is
// marked, so that a peer on the same device learns of the close only after
// its own DEVICE_REMOVAL.
func (n *netmon) check() {
	v, err := n.f.devs.snapshot()
	if err != nil {
		n.f.log.Warn().Err(err).Msg("address monitor: list interfaces")
		return
	}
	n.mu.Lock()
	eps := make([]*endpoint, 0, len(n.eps))
	for ep := range n.eps {
		eps = append(eps, ep)
	}
	n.mu.Unlock()
	var closing []*conn
	for _, ep := range eps {
		if c := n.checkOne(ep, &v); c != nil {
			closing = append(closing, c)
		}
	}
	for _, c := range closing {
		c.l.post(c.taskCloseNow)
	}
}

// checkOne reports DEVICE_REMOVAL or ADDR_CHANGE for ep if its device or
// address is gone. It returns the connection to close after DEVICE_REMOVAL.
func (n *netmon) checkOne(ep *endpoint, v *hostView) *conn {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed || ep.removed {
		return nil
	}
	a := ep.local.Addr().Unmap().WithZone("")
	specific := a.IsValid() && !a.IsUnspecified()
	devGone := ep.dev != nil && !v.devs[ep.dev.ifindex]
	addrGone := specific && !v.addrs[a]
	switch {
	case devGone:
		r := fabric.RawEvent{Type: fabric.EventDeviceRemoval}
		ep.emitLocked(&r)
		// The id reports nothing more (no DISCONNECTED, no connection
		// outcome): it must be destroyed.
		ep.removed, ep.discReported = true, true
		n.f.log.Debug().Stringer("addr", a).Uint64("uid", ep.uid).Msg("device removed")
		if t := ep.rc(); t != nil {
			return t.conn
		}
		return nil
	case addrGone && !ep.addrGone:
		ep.addrGone = true
		r := fabric.RawEvent{Type: fabric.EventAddrChange}
		ep.emitLocked(&r)
		n.f.log.Debug().Stringer("addr", a).Uint64("uid", ep.uid).Msg("address removed")
	case !addrGone:
		ep.addrGone = false
	}
	return nil
}
