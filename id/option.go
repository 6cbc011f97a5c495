package id

import (
	"encoding/binary"
	"syscall"
)

// OptionLevel is the level of an option, as in rdma_set_option(3).
type OptionLevel int32

// Option levels.
const (
	// OptionLevelID holds the generic id options.
	OptionLevelID OptionLevel = 0
	// OptionLevelIB holds InfiniBand options.
	OptionLevelIB OptionLevel = 1
)

// OptionName names an option within its level.
type OptionName int32

// Options of OptionLevelID.
const (
	// OptionTOS sets the type of service (u8).
	OptionTOS OptionName = 0
	// OptionReuseAddr allows reusing a bound port (int, 0 or 1).
	OptionReuseAddr OptionName = 1
	// OptionAFOnly restricts an IPv6 id to IPv6 (int, 0 or 1).
	OptionAFOnly OptionName = 2
	// OptionAckTimeout sets the QP ACK timeout exponent (u8: 4.096µs·2^n).
	OptionAckTimeout OptionName = 3
)

// Options of OptionLevelIB.
const (
	// OptionIBPath sets the path records of an id (an array of 72-byte
	// struct ibv_path_data).
	OptionIBPath OptionName = 1
)

// ibPathDataSize is sizeof(struct ibv_path_data).
const ibPathDataSize = 72

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
			if len(val) == 0 || len(val)%ibPathDataSize != 0 {
				return errorf("set_option", syscall.EINVAL, "IB path takes a multiple of %d bytes, got %d", ibPathDataSize, len(val))
			}
			return nil
		}
	}
	return errorf("set_option", syscall.ENOSYS, "unknown option level %d name %d", level, name)
}

// checkOptionState applies the kernel's per-option state rules.
func checkOptionState(s State, t QPType, level OptionLevel, name OptionName, val []byte) error {
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
