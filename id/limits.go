package id

import (
	"syscall"

	"github.com/cmrt/cmrt/id/journal"
)

// maxPrivateData returns how many bytes of private data call c (CallConnect,
// CallAccept or CallReject) may carry on an id of QP type t.
func maxPrivateData(c journal.Call, t QPType) int {
	switch c {
	case journal.CallConnect:
		if t == UD {
			return MaxPrivateDataSIDRREQ
		}
		return MaxPrivateDataREQ
	case journal.CallAccept:
		if t == UD {
			return MaxPrivateDataSIDRREP
		}
		return MaxPrivateDataREP
	default:
		if t == UD {
			return MaxPrivateDataSIDRREP
		}
		return MaxPrivateDataREJ
	}
}

func checkPrivateData(name string, c journal.Call, t QPType, pd []byte) error {
	if max := maxPrivateData(c, t); len(pd) > max {
		return errorf(name, syscall.EINVAL, "%d bytes of private data, limit %d", len(pd), max)
	}
	return nil
}
