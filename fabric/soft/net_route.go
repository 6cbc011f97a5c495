package soft

import (
	"fmt"
	"net/netip"
	"syscall"

	"github.com/cmrt/cmrt/internal/netlink"
)

// routeInfo is what resolution learns of the way to a destination.
type routeInfo struct {
	src     netip.Addr // the source address the kernel would use
	gateway netip.Addr // next hop, invalid when on link
	dev     *device
	mtu     int
	// nexthop and oif name the neighbour the packets go to; nexthop is
	// invalid when none is needed (a local, broadcast or multicast
	// destination).
	nexthop netip.Addr
	oif     int
}

// route asks the kernel's routing table (RTM_GETROUTE) how dst is reached
// from src (any source when src is invalid or unspecified): the source
// address, the next hop, the device that owns the source and the path MTU
// (the route's, else the device's). oif is the interface of the device an
// id is bound to by address (0: none): the kernel's rdma_cm looks its
// routes up bound to it (bound_dev_if), and a lookup bound to an interface
// that finds no route (or a reject route) takes the destination to be on
// that interface's link; so does route, asking again bound to oif.
// Errors carry the kernel's errno (ENETUNREACH, EHOSTUNREACH, ...).
func (f *Fabric) route(dst, src netip.Addr, oif int) (routeInfo, error) {
	if h := f.testHookRoute; h != nil {
		h()
	}
	var ri routeInfo
	if src.IsUnspecified() {
		src = netip.Addr{}
	}
	rt, err := f.mon.lookupRoute(dst, src, 0)
	if err == nil {
		if e := rt.Type.Errno(); e != 0 {
			err = fmt.Errorf("route is %s: %w", rt.Type, e)
		}
	}
	if err != nil && oif > 0 {
		rt, err = f.mon.lookupRoute(dst, src, oif)
	}
	if err != nil {
		return ri, fmt.Errorf("soft: route to %s: %w", dst, err)
	}
	if e := rt.Type.Errno(); e != 0 {
		return ri, fmt.Errorf("soft: route to %s is %s: %w", dst, rt.Type, e)
	}
	ri.src, ri.gateway, ri.mtu = rt.Src.Unmap(), rt.Gateway, rt.MTU
	if rt.Type == netlink.RouteUnicast && rt.OIF > 0 {
		ri.nexthop, ri.oif = dst, rt.OIF
		if rt.Gateway.IsValid() {
			ri.nexthop = rt.Gateway
		}
	}
	if !ri.src.IsValid() {
		return ri, fmt.Errorf("soft: no source address towards %s: %w", dst, syscall.EADDRNOTAVAIL)
	}
	dev, err := f.devs.byLocalAddr(ri.src)
	if err != nil {
		return ri, &deviceError{err}
	}
	ri.dev = dev
	if ri.mtu == 0 {
		ri.mtu = dev.mtu
	}
	return ri, nil
}

// deviceError is a route whose source address belongs to no device of the
// fabric. The kernel's rdma_cm finds such a route, then no RDMA device
// behind the address (cma_acquire_dev_by_src_ip), and reports that as
// ADDR_ERROR rather than failing rdma_resolve_addr.
type deviceError struct{ err error }

func (e *deviceError) Error() string { return e.err.Error() }
func (e *deviceError) Unwrap() error { return e.err }
