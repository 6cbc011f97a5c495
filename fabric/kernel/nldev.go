package kernel

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// The RDMA netlink device interface (uapi rdma_netlink.h): only what the
// device listing needs, the kernel device index and the netdev behind a
// port, which sysfs does not show for every driver (siw has no gid_attrs
// netdev and no parent file).
const (
	rdmaNLNLDev         = 5 // RDMA_NL_NLDEV
	nldevCmdGet         = 1 // RDMA_NLDEV_CMD_GET
	nldevCmdPortGet     = 5 // RDMA_NLDEV_CMD_PORT_GET
	nldevAttrDevIndex   = 1 // u32
	nldevAttrDevName    = 2 // string
	nldevAttrPortIndex  = 3 // u32
	nldevAttrNodeGUID   = 6 // u64, host order
	nldevAttrNdevIndex  = 50
	nldevAttrNdevName   = 51 // string
	nlaTypeMask         = 0x3fff
	nlmsgHdrLen         = 16
	nlaHdrLen           = 4
	nlRecvBufferSize    = 32 << 10
	nldevReadDeadlineMs = 2000
)

func nldevType(op uint16) uint16 { return rdmaNLNLDev<<10 | op }

// nlDevice is what RDMA netlink reports of one device.
type nlDevice struct {
	index uint32
	name  string
	guid  uint64
	ndev  string // netdev of port 1, if any
}

// nldevList dumps the RDMA devices with their kernel index and the netdev
// of port 1. It fails (EPROTONOSUPPORT, EACCES, ...) on kernels or sandboxes
// without RDMA netlink; callers fall back to sysfs alone.
func nldevList() ([]nlDevice, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		return nil, fmt.Errorf("kernel: rdma netlink socket: %w", err)
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(nldevReadDeadlineMs * 1e6)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("kernel: rdma netlink bind: %w", err)
	}
	var devs []nlDevice
	err = nlRequest(fd, 1, nldevType(nldevCmdGet), unix.NLM_F_DUMP, nil, func(attrs map[uint16][]byte) {
		d := nlDevice{index: nlU32(attrs[nldevAttrDevIndex]), name: nlString(attrs[nldevAttrDevName])}
		if b := attrs[nldevAttrNodeGUID]; len(b) >= 8 {
			d.guid = binary.NativeEndian.Uint64(b)
		}
		if d.name != "" {
			devs = append(devs, d)
		}
	})
	if err != nil {
		return nil, err
	}
	for k := range devs {
		var req []byte
		req = nlPutU32(req, nldevAttrDevIndex, devs[k].index)
		req = nlPutU32(req, nldevAttrPortIndex, 1)
		_ = nlRequest(fd, uint32(k+2), nldevType(nldevCmdPortGet), 0, req, func(attrs map[uint16][]byte) {
			devs[k].ndev = nlString(attrs[nldevAttrNdevName])
		})
	}
	return devs, nil
}

// nlRequest sends one request and calls fn with the attributes of every
// reply message until the reply (or dump) ends.
func nlRequest(fd int, seq uint32, typ, flags uint16, payload []byte, fn func(map[uint16][]byte)) error {
	msg := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(payload))
	msg = append(msg, payload...)
	ne := binary.NativeEndian
	ne.PutUint32(msg[0:], uint32(len(msg)))
	ne.PutUint16(msg[4:], typ)
	ne.PutUint16(msg[6:], unix.NLM_F_REQUEST|flags)
	ne.PutUint32(msg[8:], seq)
	if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("kernel: rdma netlink send: %w", err)
	}
	buf := make([]byte, nlRecvBufferSize)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return fmt.Errorf("kernel: rdma netlink receive: %w", err)
		}
		b := buf[:n]
		for len(b) >= nlmsgHdrLen {
			l := int(ne.Uint32(b[0:]))
			if l < nlmsgHdrLen || l > len(b) {
				return fmt.Errorf("kernel: rdma netlink: bad message length %d: %w", l, syscall.EBADMSG)
			}
			t := ne.Uint16(b[4:])
			mseq := ne.Uint32(b[8:])
			body := b[nlmsgHdrLen:l]
			b = b[nlAlign(l):]
			if mseq != seq {
				continue
			}
			switch t {
			case unix.NLMSG_DONE:
				return nil
			case unix.NLMSG_ERROR:
				if len(body) >= 4 {
					if e := int32(ne.Uint32(body)); e != 0 {
						return fmt.Errorf("kernel: rdma netlink: %w", syscall.Errno(-e))
					}
				}
				return nil
			}
			fn(nlAttrs(body))
			if flags&unix.NLM_F_DUMP == 0 {
				return nil
			}
		}
	}
}

func nlAlign(n int) int { return (n + 3) &^ 3 }

// nlAttrs parses a flat attribute list.
func nlAttrs(b []byte) map[uint16][]byte {
	m := make(map[uint16][]byte)
	ne := binary.NativeEndian
	for len(b) >= nlaHdrLen {
		l := int(ne.Uint16(b[0:]))
		if l < nlaHdrLen || l > len(b) {
			break
		}
		m[ne.Uint16(b[2:])&nlaTypeMask] = b[nlaHdrLen:l]
		if nlAlign(l) >= len(b) {
			break
		}
		b = b[nlAlign(l):]
	}
	return m
}

func nlPutU32(b []byte, typ uint16, v uint32) []byte {
	var a [8]byte
	binary.NativeEndian.PutUint16(a[0:], 8)
	binary.NativeEndian.PutUint16(a[2:], typ)
	binary.NativeEndian.PutUint32(a[4:], v)
	return append(b, a[:]...)
}

func nlU32(b []byte) uint32 {
	if len(b) < 4 {
		return 0
	}
	return binary.NativeEndian.Uint32(b)
}

func nlString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// nldevEnabled reports whether the listing of the sysfs tree at root may be
// completed from RDMA netlink: only for the real tree, so that a fake tree
// in tests does not get the host's devices mixed in.
func nldevEnabled(root string) bool { return root == defaultSysfsRoot }
