package kernel

import (
	"net/netip"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/ucma"
)

// routeInfo is what the QUERY responses say of an id's route.
type routeInfo struct {
	src, dst ucma.Addr
	guid     uint64
	index    uint32
	port     uint8
	numPaths uint32
	mtu      uint8 // IB MTU enum of the first path record (0: none)
}

func (ri *routeInfo) fromAddr(q *ucma.QueryAddrResp) {
	ri.src, ri.dst = q.Src, q.Dst
	ri.guid, ri.index, ri.port = q.NodeGUID, q.IBDevIndex, q.PortNum
}

func (ri *routeInfo) fromRoute(q *ucma.QueryRouteResp) {
	ri.src, ri.dst = q.Src, q.Dst
	ri.guid, ri.index, ri.port = q.NodeGUID, q.IBDevIndex, q.PortNum
	ri.numPaths = q.NumPaths
	if q.NumPaths > 0 {
		ri.mtu = uint8(q.Route[0].MTU)
	}
}

// route builds the fabric.Route; dev is the device's name ("" if unknown).
func (ri *routeInfo) route(dev string) fabric.Route {
	r := fabric.Route{Src: ipOf(ri.src), Dst: ipOf(ri.dst), NumPaths: int(ri.numPaths)}
	if ri.guid != 0 {
		r.Device, r.PortNum = dev, ri.port
	}
	if ri.numPaths > 0 {
		r.MTU = mtuBytes(ri.mtu)
	}
	return r
}

// ipOf returns the IP endpoint of an address (invalid for none or AF_IB).
func ipOf(a ucma.Addr) netip.AddrPort {
	ap := a.AddrPort()
	if !ap.IsValid() {
		return netip.AddrPort{}
	}
	if ap.Addr().Is4In6() {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return ap
}

// mtuBytes converts an IB MTU enum (IB_MTU_256 = 1 ... IB_MTU_4096 = 5).
func mtuBytes(m uint8) int {
	if m >= 1 && m <= 5 {
		return 128 << m
	}
	return 0
}
