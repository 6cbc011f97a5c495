package id

import (
	"encoding/binary"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
)

// ibPathFlagsUsed are the flags of the struct ibv_path_data record the
// kernel uses (IBV_PATH_FLAG_GMP | PRIMARY | BIDIRECTIONAL, the last being
// OUTBOUND | INBOUND_REVERSE).
const ibPathFlagsUsed = 1<<0 | 1<<1 | 1<<3 | 1<<5

// checkOption validates an option's length exactly as the kernel does:
// an unknown option is ENOSYS, a wrong length EINVAL.
func checkOption(level OptionLevel, name OptionName, val []byte) error {
	switch level {
	case OptionLevelID:
		switch name {
		case OptionTOS, OptionAckTimeout:
			if len(val) != 1 {
				return errorf("set_option", syscall.EINVAL, "option %d takes 1 byte, got %d", name, len(val))
			}
			return nil
		case OptionReuseAddr, OptionAFOnly:
			if len(val) != 4 {
				return errorf("set_option", syscall.EINVAL, "option %d takes 4 bytes, got %d", name, len(val))
			}
			return nil
		}
	case OptionLevelIB:
		if name == OptionIBPath {
			if len(val) == 0 || len(val)%fabric.IBPathDataSize != 0 {
				return errorf("set_option", syscall.EINVAL, "IB path takes a multiple of %d bytes, got %d", fabric.IBPathDataSize, len(val))
			}
			return nil
		}
	}
	return errorf("set_option", syscall.ENOSYS, "unknown option level %d name %d", level, name)
}

// checkOptionState applies the kernel's per-option rules on the value and
// the id's state (the kernel's own checks: journaled as the call's errno).
func checkOptionState(s State, t QPType, level OptionLevel, name OptionName, val []byte) error {
	if level == OptionLevelIB {
		if name != OptionIBPath {
			return nil
		}
		// ucma_set_ib_path takes the first record flagged exactly GMP,
		// PRIMARY and BIDIRECTIONAL (none is EINVAL); rdma_set_ib_path
		// then moves the id from ADDR_RESOLVED to ROUTE_RESOLVED
		// (ROUTE_RESOLVED is reported), and elsewhere is EINVAL.
		flagged := false
		for off := 0; off+4 <= len(val) && !flagged; off += fabric.IBPathDataSize {
			flagged = binary.NativeEndian.Uint32(val[off:]) == ibPathFlagsUsed
		}
		if !flagged {
			return errorf("set_option", syscall.EINVAL, "no IB path record flagged GMP, PRIMARY and BIDIRECTIONAL")
		}
		if s != StateAddrResolved {
			return errorf("set_option", syscall.EINVAL, "IB path in state %s", s)
		}
		return nil
	}
	if level != OptionLevelID {
		return nil
	}
	switch name {
	case OptionReuseAddr:
		reuse := binary.NativeEndian.Uint32(val) != 0
		if s != StateIdle && !(reuse && s != StateListen) {
			return errorf("set_option", syscall.EINVAL, "REUSEADDR in state %s", s)
		}
	case OptionAFOnly:
		if s != StateIdle && s != StateAddrBound {
			return errorf("set_option", syscall.EINVAL, "AFONLY in state %s", s)
		}
	case OptionAckTimeout:
		if t != RC {
			return errorf("set_option", syscall.EINVAL, "ACK_TIMEOUT on a %s id", t)
		}
	}
	return nil
}

func intOption(v bool) []byte {
	var b [4]byte
	if v {
		binary.NativeEndian.PutUint32(b[:], 1)
	}
	return b[:]
}
