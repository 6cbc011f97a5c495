package soft

import (
	"github.com/cmrt/cmrt/fabric"
)

// CreateQP implements fabric.QPCreator: RC endpoints get an iWARP queue pair on
// their TCP connection, UD endpoints a datagram queue pair on their UDP
// socket. The id must be bound to a device (an address that is not a
// wildcard, by Bind, ResolveAddr or a connection request), as librdmacm's
// rdma_create_qp needs id->verbs: EINVAL otherwise.
func (ep *endpoint) CreateQP(attr *fabric.QPInitAttr) (fabric.QP, error) {
	ep.mu.Lock()
	bound := ep.onDeviceLocked()
	ep.mu.Unlock()
	if !bound {
		return nil, einval("create_qp: id not bound to a device")
	}
	if ep.qp == fabric.UD {
		return ep.createUDQP(attr)
	}
	return ep.createRCQP(attr)
}
