package soft

import (
	"fmt"
	"syscall"

	"github.com/cmrt/cmrt/id"
)

// createUDQP creates the datagram data path of a UD endpoint.
func (ep *endpoint) createUDQP(*id.QPInitAttr) (id.QP, error) {
	return nil, fmt.Errorf("soft: UD data path: %w", syscall.ENOSYS)
}
