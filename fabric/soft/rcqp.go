package soft

import (
	"fmt"
	"syscall"

	"github.com/cmrt/cmrt/id"
)

// createRCQP creates the iWARP data path of an RC endpoint.
func (ep *endpoint) createRCQP(*id.QPInitAttr) (id.QP, error) {
	return nil, fmt.Errorf("soft: RC data path: %w", syscall.ENOSYS)
}
