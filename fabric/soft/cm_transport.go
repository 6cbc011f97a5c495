package soft

import (
	"net/netip"

	"github.com/cmrt/cmrt/fabric"
)

// transport is what an endpoint's service type does its own way. The
// endpoint (cm_endpoint.go) holds the common state (binding, addresses,
// route, events, protection domain) and hands the rest to its transport:
// RC ids (rcTransport, rc_transport.go) are TCP connections set up by the
// iWARP MPA exchange, UD ids (udTransport, ud_transport.go) UDP sockets
// set up by SIDR, with multicast. A transport lives inside its endpoint's
// allocation (rcEndpoint, udEndpoint) and its state is guarded by the
// endpoint's mu unless its file says otherwise.
type transport interface {
	// proto is the kind of socket the endpoint's port holds.
	proto() proto
	// listenLocked makes the bound endpoint listen. ep.mu is held (UD
	// releases it while its loop applies the listen).
	listenLocked(backlog int) error
	// connect starts an active connection to the resolved destination.
	connect(p *fabric.ConnParam) error
	// accept and reject answer the connection request the endpoint was
	// born from.
	accept(uid uint64, p *fabric.ConnParam) error
	reject(pd []byte) error
	// disconnect ends the connection.
	disconnect() error
	// requestRead returns the place of the request the endpoint was born
	// from in its listener's backlog, once the user read its
	// CONNECT_REQUEST (ucma counts the requests queued and not yet read).
	requestRead()
	// join and leave are multicast memberships.
	join(uid uint64, group netip.Addr, sendOnly bool) error
	leave(group netip.Addr) error
	// createQP makes the endpoint's queue pair; the endpoint is bound to
	// a device.
	createQP(attr *fabric.QPInitAttr) (fabric.QP, error)
	// destroy releases what the transport holds, once the endpoint is
	// marked destroyed and has left its channel. Not on a loop goroutine.
	destroy()
	// connectedLocked reports whether the endpoint has (or is setting up)
	// a connection, for Query. ep.mu is held.
	connectedLocked() bool
	// appendUIDsLocked appends the uids other than the endpoint's own
	// that its events carry (multicast joins'). ep.mu is held.
	appendUIDsLocked(uids []uint64) []uint64
}

// rcEndpoint and udEndpoint are an endpoint and its transport in one
// allocation.
type (
	rcEndpoint struct {
		endpoint
		rc rcTransport
	}
	udEndpoint struct {
		endpoint
		ud udTransport
	}
)

// newEndpoint makes an endpoint of the fabric for an id of port space ps
// and QP type qp (UD ids get the UD transport, every other type RC's).
func newEndpoint(f *Fabric, ps fabric.PortSpace, qp fabric.QPType) *endpoint {
	if qp == fabric.UD {
		e := &udEndpoint{}
		e.ud.ep = &e.endpoint
		e.endpoint.f, e.endpoint.ps, e.endpoint.tp = f, ps, &e.ud
		return &e.endpoint
	}
	e := &rcEndpoint{}
	e.rc.ep = &e.endpoint
	e.endpoint.f, e.endpoint.ps, e.endpoint.tp = f, ps, &e.rc
	return &e.endpoint
}

// rc returns the endpoint's RC transport, nil for a UD endpoint (or a nil
// endpoint: a passive connection before its request).
func (ep *endpoint) rc() *rcTransport {
	if ep == nil {
		return nil
	}
	t, _ := ep.tp.(*rcTransport)
	return t
}

// ud returns the endpoint's UD transport, nil for an RC endpoint.
func (ep *endpoint) ud() *udTransport {
	t, _ := ep.tp.(*udTransport)
	return t
}
