package soft

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
)

// endpoint is the software fabric's side of one id.
type endpoint struct {
	f  *Fabric
	tp transport // what RC and UD ids do their own way (cm_transport.go)

	mu         sync.Mutex
	uid        uint64
	src        *source
	bind       *binding
	local      netip.AddrPort
	remote     netip.AddrPort
	dev        *device
	gateway    netip.Addr
	mtu        int
	resolveGen uint64 // counts resolutions: a late neighbour poll finds another (net_neigh.go)
	pd         *pd    // the id's protection domain, made on first use (mr.go)
	// What moves the id's data, kept once set (fenceDataPath): the RC
	// connection, whose lock every copy holds, and the UD QP's loop.
	copyConn *conn
	copyLoop *loop

	// The small fields last, packed together: every connection's end has
	// an endpoint (TestEndpointSize).
	ps            fabric.PortSpace
	destroyed     bool
	addrResolved  bool
	routeResolved bool
	discReported  bool
	listened      bool // Listen succeeded: queued events may carry requests' endpoints
	removed       bool // DEVICE_REMOVAL reported: nothing more is (net_monitor.go)
	addrGone      bool // ADDR_CHANGE reported for its current address (net_monitor.go)
	opt           epOptions
}

type epOptions struct {
	tos, ack      uint8
	tosSet, ackOn bool
	reuse, afonly bool
}

func einval(format string, args ...any) error {
	return fmt.Errorf("soft: "+format+": %w", append(args, syscall.EINVAL)...)
}

// emit queues an event for the endpoint. Events of a destroyed endpoint, or
// of a request's endpoint not yet accepted (uid 0), are dropped, as the
// kernel drops them.
func (ep *endpoint) emit(r *fabric.RawEvent) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.emitLocked(r)
}

func (ep *endpoint) emitLocked(r *fabric.RawEvent) bool {
	if ep.destroyed || ep.uid == 0 || ep.removed {
		return false
	}
	r.UID = ep.uid
	countEvent(ep.uid, r.Type)
	return ep.src.q.Push(r) == nil
}

func (ep *endpoint) emitType(t fabric.EventType, status int32) {
	r := fabric.RawEvent{Type: t, Status: status}
	ep.emit(&r)
}

// reportDisconnect reports DISCONNECTED once per connection.
func (ep *endpoint) reportDisconnect(status int32) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.discReported {
		return
	}
	ep.discReported = true
	r := fabric.RawEvent{Type: fabric.EventDisconnected, Status: status}
	ep.emitLocked(&r)
}

// connectTimeout bounds an active connection: the ACK_TIMEOUT option
// (4.096µs·2^n per try, RetryCount+1 tries) or the fabric's default.
func (ep *endpoint) connectTimeout(p *fabric.ConnParam) time.Duration {
	ep.mu.Lock()
	on, n := ep.opt.ackOn, ep.opt.ack
	ep.mu.Unlock()
	if !on {
		return ep.f.opts.connectTimeout
	}
	return ackTimeout(n, p.RetryCount)
}

func ackTimeout(n, retries uint8) time.Duration {
	if n > 31 {
		n = 31
	}
	d := time.Duration(4096<<n) * time.Nanosecond * time.Duration(int(retries)+1)
	return min(max(d, 100*time.Millisecond), 10*time.Minute)
}

// applySockopts sets the options of a connected socket: TCP_NODELAY unless
// it has it already (hasNoDelay: accepted from a listening socket that has
// it), and the id's options.
func (ep *endpoint) applySockopts(fd int, retries uint8, hasNoDelay bool) {
	ep.mu.Lock()
	o := ep.opt
	ep.mu.Unlock()
	if !hasNoDelay {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY, 1)
	}
	if o.tosSet {
		setTOS(fd, o.tos)
	}
	if o.ackOn {
		d := ackTimeout(o.ack, retries)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(d/time.Millisecond))
		idle := max(int(d/time.Second/3), 1)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, idle)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, idle)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3)
	}
}

func setTOS(fd int, tos uint8) {
	if sa, err := unix.Getsockname(fd); err == nil {
		if _, v6 := sa.(*unix.SockaddrInet6); v6 {
			_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, int(tos))
			return
		}
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_TOS, int(tos))
}

// Bind implements fabric.Endpoint.
func (ep *endpoint) Bind(addr netip.AddrPort) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed || ep.bind != nil {
		return einval("bind: endpoint bound or destroyed")
	}
	return ep.bindLocked(addr)
}

func (ep *endpoint) bindLocked(addr netip.AddrPort) error {
	a := addr.Addr().Unmap()
	var dev *device
	if !a.IsUnspecified() {
		d, err := ep.f.devs.byLocalAddr(a)
		if err != nil {
			return err
		}
		dev = d
	}
	b, err := ep.f.ports.bind(ep.tp.proto(), netip.AddrPortFrom(a, addr.Port()), ep.opt.reuse, ep.opt.afonly)
	if err != nil {
		return err
	}
	if ep.opt.tosSet && b.sockFD() >= 0 {
		setTOS(b.sockFD(), ep.opt.tos)
	}
	ep.bind, ep.dev, ep.local = b, dev, b.addr
	ep.f.mon.track(ep)
	if t, ok := ep.tp.(*udTransport); ok {
		// A bound UD id's socket is read from the start, so that a request
		// to its port is answered at once when it does not listen, as the
		// kernel's SIDR answers one for a service nobody listens on (REP
		// status 1: UNREACHABLE 1 at the requester), not left unread until
		// the requester's retries run out. Should the loop not start, the
		// id still works: its socket is attached by its listen or connect.
		if _, err := t.sockLocked(); err != nil {
			ep.f.log.Debug().Err(err).Msg("UD socket not read until listen or connect")
		}
	}
	return nil
}

// ResolveAddr implements fabric.Endpoint, as the kernel's rdma_resolve_addr:
// an unbound id is bound first (to src when given), then resolution asks
// the routing table. No route (or an unreachable, prohibited or blackhole
// one) fails the call itself with the routing errno (ENETUNREACH, ...),
// leaving the id bound: to src, else to the wildcard address of dst's
// family, with a port. A route found is followed by ADDR_RESOLVED once the
// next hop's link-layer address is known (net_neigh.go), by ADDR_ERROR with
// -ETIMEDOUT when it does not answer within timeout, or with -ENODEV when
// the route's source address is on no device of the fabric. An id bound
// by the call with no src is bound to the source address the route picks.
func (ep *endpoint) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	d := dst.Addr().Unmap()
	if d.IsUnspecified() {
		d = netip.IPv6Loopback()
		if d.Is4() || dst.Addr().Unmap().Is4() {
			d = netip.AddrFrom4([4]byte{127, 0, 0, 1})
		}
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed {
		return einval("resolve_addr: destroyed")
	}
	if ep.bind == nil && src.IsValid() {
		// cma_bind_addr: a given source is bound before anything else.
		if err := ep.bindLocked(netip.AddrPortFrom(src.Addr().Unmap(), src.Port())); err != nil {
			return err
		}
	}
	from := src.Addr().Unmap()
	if ep.bind != nil && !ep.local.Addr().IsUnspecified() {
		from = ep.local.Addr()
	}
	ri, err := ep.f.route(d, from, ep.boundIfindexLocked())
	if err != nil {
		if ep.bind == nil {
			// The kernel binds an unbound id to the wildcard address of
			// the destination's family before it resolves, so the id
			// stays bound (ADDR_BOUND) whatever resolution says.
			wild := netip.IPv4Unspecified()
			if !d.Is4() {
				wild = netip.IPv6Unspecified()
			}
			if berr := ep.bindLocked(netip.AddrPortFrom(wild, 0)); berr != nil {
				return berr
			}
		}
		var de *deviceError
		if !errors.As(err, &de) {
			return fmt.Errorf("soft: resolve_addr: %w", err)
		}
		r := fabric.RawEvent{Type: fabric.EventAddrError, Status: -int32(errnoOf(err))}
		ep.emitLocked(&r)
		return nil
	}
	if ep.bind == nil {
		if err := ep.bindLocked(netip.AddrPortFrom(ri.src, 0)); err != nil {
			return err
		}
	}
	ep.dev = ri.dev
	if ep.local.Addr().IsUnspecified() {
		// Bound to a wildcard: the route picks the source address. An id
		// bound to a specific address keeps it.
		ep.local = netip.AddrPortFrom(ri.src, ep.local.Port())
	}
	ep.remote = netip.AddrPortFrom(d, dst.Port())
	ep.gateway, ep.mtu = ri.gateway, ri.mtu
	ep.resolveGen++
	if usable, _ := ep.f.neighUsable(ri); !usable {
		ep.waitNeighLocked(ri, d, timeout)
		return nil
	}
	ep.addrResolved = true
	r := fabric.RawEvent{Type: fabric.EventAddrResolved}
	ep.emitLocked(&r)
	return nil
}

// boundIfindexLocked returns the interface of the device the endpoint is
// bound to by address (0 when unbound or bound to a wildcard): the kernel's
// rdma_cm looks routes up on it (bound_dev_if), so that a destination
// without a route is taken to be on its link (see route). ep.mu is held.
func (ep *endpoint) boundIfindexLocked() int {
	if ep.bind == nil || ep.dev == nil || ep.local.Addr().IsUnspecified() {
		return 0
	}
	return ep.dev.ifindex
}

// ResolveRoute implements fabric.Endpoint, as the kernel's rdma_resolve_route
// on an iWARP (or RoCE) device: the route ResolveAddr looked up (source,
// device, next hop, MTU) is the route, so ROUTE_RESOLVED follows without a
// second lookup (cma_resolve_iw_route only queues the event; a route that
// changed since is met by the connection's own TCP).
func (ep *endpoint) ResolveRoute(time.Duration) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed || !ep.addrResolved {
		return einval("resolve_route: address not resolved")
	}
	ep.routeResolved = true
	r := fabric.RawEvent{Type: fabric.EventRouteResolved}
	ep.emitLocked(&r)
	return nil
}

// Listen implements fabric.Endpoint.
func (ep *endpoint) Listen(backlog int) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed {
		return einval("listen: listening or destroyed")
	}
	if ep.bind == nil {
		if err := ep.bindLocked(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
			return err
		}
	}
	if err := ep.tp.listenLocked(backlog); err != nil {
		return err
	}
	ep.listened = true
	return nil
}

// Connect implements fabric.Endpoint.
func (ep *endpoint) Connect(p *fabric.ConnParam) error { return ep.tp.connect(p) }

// Accept implements fabric.Endpoint.
func (ep *endpoint) Accept(uid uint64, p *fabric.ConnParam) error { return ep.tp.accept(uid, p) }

// Reject implements fabric.Endpoint.
func (ep *endpoint) Reject(pd []byte) error { return ep.tp.reject(pd) }

// Establish implements fabric.Endpoint. Soft ids always have their QP, so the
// CM never stops at CONNECT_RESPONSE.
func (ep *endpoint) Establish() error { return einval("establish: not waiting for it") }

// Disconnect implements fabric.Endpoint.
func (ep *endpoint) Disconnect() error { return ep.tp.disconnect() }

// SetOption implements fabric.Endpoint.
func (ep *endpoint) SetOption(level fabric.OptionLevel, name fabric.OptionName, val []byte) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if level == fabric.OptionLevelIB {
		if !ep.addrResolved || ep.routeResolved {
			return einval("IB path outside ADDR_RESOLVED")
		}
		ep.routeResolved = true
		r := fabric.RawEvent{Type: fabric.EventRouteResolved}
		ep.emitLocked(&r)
		return nil
	}
	switch name {
	case fabric.OptionTOS:
		ep.opt.tos, ep.opt.tosSet = val[0], true
		if ep.bind != nil && ep.bind.sockFD() >= 0 {
			setTOS(ep.bind.sockFD(), val[0])
		}
	case fabric.OptionReuseAddr:
		on := val[0]|val[1]|val[2]|val[3] != 0
		ep.opt.reuse = on
		if ep.bind != nil {
			ep.f.ports.mu.Lock()
			ep.bind.reuse = on && !ep.bind.listening
			ep.f.ports.mu.Unlock()
		}
	case fabric.OptionAFOnly:
		ep.opt.afonly = val[0]|val[1]|val[2]|val[3] != 0
	case fabric.OptionAckTimeout:
		ep.opt.ack, ep.opt.ackOn = val[0], true
	}
	return nil
}

// Join implements fabric.Endpoint: UD ids join IP multicast groups
// (ud_mcast.go), RC ids cannot (ENOSYS).
func (ep *endpoint) Join(uid uint64, group netip.Addr, sendOnly bool) error {
	return ep.tp.join(uid, group, sendOnly)
}

// Leave implements fabric.Endpoint.
func (ep *endpoint) Leave(group netip.Addr) error { return ep.tp.leave(group) }

// CreateQP implements fabric.QPCreator: RC endpoints get an iWARP queue
// pair on their TCP connection, UD endpoints a datagram queue pair on their
// UDP socket. The id must be bound to a device (an address that is not a
// wildcard, by Bind, ResolveAddr or a connection request), as librdmacm's
// rdma_create_qp needs id->verbs: EINVAL otherwise.
func (ep *endpoint) CreateQP(attr *fabric.QPInitAttr) (fabric.QP, error) {
	ep.mu.Lock()
	bound := ep.onDeviceLocked()
	ep.mu.Unlock()
	if !bound {
		return nil, einval("create_qp: id not bound to a device")
	}
	return ep.tp.createQP(attr)
}

// Notify implements fabric.Endpoint; soft QPs raise no asynchronous events the
// CM must hear of.
func (ep *endpoint) Notify(fabric.AsyncEvent) error { return nil }

// Query implements fabric.Endpoint.
func (ep *endpoint) Query() (fabric.Route, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	r := fabric.Route{Src: ep.local, Dst: ep.remote, Gateway: ep.gateway, MTU: ep.mtu}
	if ep.dev != nil {
		r.Device, r.PortNum = ep.dev.info.Name, 1
	}
	if ep.routeResolved || ep.tp.connectedLocked() {
		r.NumPaths = 1
	}
	return r, nil
}

// requestRead returns the place of the request that made this endpoint in
// its listener's backlog: the user has read its CONNECT_REQUEST.
func (ep *endpoint) requestRead() { ep.tp.requestRead() }

// Destroy implements fabric.Endpoint: queued events are dropped (requests queued
// on a listener are rejected), a listening socket is closed before it
// returns and a connection right after (by its loop, which Destroy does not
// wait for), the port is released, and once it returns no peer reads or
// writes the id's memory.
func (ep *endpoint) Destroy() error {
	ep.mu.Lock()
	if ep.destroyed {
		ep.mu.Unlock()
		return nil
	}
	ep.destroyed = true
	uid, src, b, listened := ep.uid, ep.src, ep.bind, ep.listened
	ep.bind = nil
	ep.mu.Unlock()

	// A listener's queued requests carry new endpoints that must be
	// rejected and destroyed. Other ids' queued events need no scan of the
	// channel (which made mass teardown quadratic): the id layer drops the
	// events of a destroyed id when it takes them.
	if uid != 0 && listened {
		for _, r := range src.q.Extract(func(r *fabric.RawEvent) bool { return r.UID == uid }) {
			if r.Child != nil {
				_ = r.Child.Reject(nil)
				_ = r.Child.Destroy()
			}
		}
	}
	src.forget(ep)
	ep.tp.destroy()
	ep.releasePD()
	ep.fenceConn()
	ep.f.ports.remove(b)
	ep.f.mon.untrack(ep)
	return nil
}
