package soft

import (
	"github.com/cmrt/cmrt/id"
)

// CreateQP implements id.QPCreator: RC endpoints get an iWARP queue pair on
// their TCP connection, UD endpoints a datagram queue pair on their UDP
// socket.
func (ep *endpoint) CreateQP(attr *id.QPInitAttr) (id.QP, error) {
	if ep.qp == id.UD {
		return ep.createUDQP(attr)
	}
	return ep.createRCQP(attr)
}
