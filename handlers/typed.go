// Typed registration: one method per event type.

package handlers

import "github.com/cmrt/cmrt/id"

// OnAddrResolved registers f for RDMA_CM_EVENT_ADDR_RESOLVED events.
func (m *Mux) OnAddrResolved(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventAddrResolved, f)
}

// OnAddrError registers f for RDMA_CM_EVENT_ADDR_ERROR events.
func (m *Mux) OnAddrError(f func(*id.Event) error) *Mux { return m.HandleFunc(id.EventAddrError, f) }

// OnRouteResolved registers f for RDMA_CM_EVENT_ROUTE_RESOLVED events.
func (m *Mux) OnRouteResolved(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventRouteResolved, f)
}

// OnRouteError registers f for RDMA_CM_EVENT_ROUTE_ERROR events.
func (m *Mux) OnRouteError(f func(*id.Event) error) *Mux { return m.HandleFunc(id.EventRouteError, f) }

// OnConnectRequest registers f for RDMA_CM_EVENT_CONNECT_REQUEST events.
func (m *Mux) OnConnectRequest(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventConnectRequest, f)
}

// OnConnectResponse registers f for RDMA_CM_EVENT_CONNECT_RESPONSE events.
func (m *Mux) OnConnectResponse(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventConnectResponse, f)
}

// OnConnectError registers f for RDMA_CM_EVENT_CONNECT_ERROR events.
func (m *Mux) OnConnectError(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventConnectError, f)
}

// OnUnreachable registers f for RDMA_CM_EVENT_UNREACHABLE events.
func (m *Mux) OnUnreachable(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventUnreachable, f)
}

// OnRejected registers f for RDMA_CM_EVENT_REJECTED events.
func (m *Mux) OnRejected(f func(*id.Event) error) *Mux { return m.HandleFunc(id.EventRejected, f) }

// OnEstablished registers f for RDMA_CM_EVENT_ESTABLISHED events.
func (m *Mux) OnEstablished(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventEstablished, f)
}

// OnDisconnected registers f for RDMA_CM_EVENT_DISCONNECTED events.
func (m *Mux) OnDisconnected(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventDisconnected, f)
}

// OnDeviceRemoval registers f for RDMA_CM_EVENT_DEVICE_REMOVAL events.
func (m *Mux) OnDeviceRemoval(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventDeviceRemoval, f)
}

// OnMulticastJoin registers f for RDMA_CM_EVENT_MULTICAST_JOIN events.
func (m *Mux) OnMulticastJoin(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventMulticastJoin, f)
}

// OnMulticastError registers f for RDMA_CM_EVENT_MULTICAST_ERROR events.
func (m *Mux) OnMulticastError(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventMulticastError, f)
}

// OnAddrChange registers f for RDMA_CM_EVENT_ADDR_CHANGE events.
func (m *Mux) OnAddrChange(f func(*id.Event) error) *Mux { return m.HandleFunc(id.EventAddrChange, f) }

// OnTimewaitExit registers f for RDMA_CM_EVENT_TIMEWAIT_EXIT events.
func (m *Mux) OnTimewaitExit(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventTimewaitExit, f)
}

// OnAddrInfoResolved registers f for RDMA_CM_EVENT_ADDRINFO_RESOLVED events.
func (m *Mux) OnAddrInfoResolved(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventAddrInfoResolved, f)
}

// OnAddrInfoError registers f for RDMA_CM_EVENT_ADDRINFO_ERROR events.
func (m *Mux) OnAddrInfoError(f func(*id.Event) error) *Mux {
	return m.HandleFunc(id.EventAddrInfoError, f)
}

// OnUser registers f for RDMA_CM_EVENT_USER events.
func (m *Mux) OnUser(f func(*id.Event) error) *Mux { return m.HandleFunc(id.EventUser, f) }
