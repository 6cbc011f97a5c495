package netlink

import (
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// initialBufSize is the receive buffer size a socket starts with. The kernel
// sizes dump datagrams by the reader's buffer, capped at 32 KiB; larger
// single datagrams are detected with MSG_PEEK|MSG_TRUNC and the buffer grows.
const initialBufSize = 32 << 10

// bufPool recycles receive buffers of closed sockets, so that the
// package-level functions, which open a socket per call, do not allocate a
// fresh 32 KiB each time.
var bufPool = sync.Pool{New: func() any { b := make([]byte, initialBufSize); return &b }}

// socket is a bound NETLINK_ROUTE socket with a reusable receive buffer.
type socket struct {
	fd  int
	pid uint32 // port id assigned by the kernel at bind time
	buf []byte
}

// openSocket creates a NETLINK_ROUTE socket bound to the legacy multicast
// group mask groups (0 for a request socket).
func openSocket(groups uint32, nonblock bool) (*socket, error) {
	typ := unix.SOCK_RAW | unix.SOCK_CLOEXEC
	if nonblock {
		typ |= unix.SOCK_NONBLOCK
	}
	fd, err := unix.Socket(unix.AF_NETLINK, typ, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, os.NewSyscallError("socket", err)
	}
	// Best effort: extended ACK messages and capped error replies.
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_EXT_ACK, 1)
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: groups}); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("bind", err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("getsockname", err)
	}
	nsa, ok := sa.(*unix.SockaddrNetlink)
	if !ok {
		unix.Close(fd)
		return nil, os.NewSyscallError("getsockname", unix.EAFNOSUPPORT)
	}
	return &socket{fd: fd, pid: nsa.Pid, buf: *bufPool.Get().(*[]byte)}, nil
}

// close releases the descriptor and recycles the buffer.
func (s *socket) close() error {
	if len(s.buf) == initialBufSize {
		b := s.buf
		bufPool.Put(&b)
	}
	s.buf = nil
	if err := unix.Close(s.fd); err != nil {
		return os.NewSyscallError("close", err)
	}
	return nil
}

// send writes one request to the kernel (the socket's default destination).
func (s *socket) send(b []byte) error {
	for {
		_, err := unix.Write(s.fd, b)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return os.NewSyscallError("sendto", err)
		}
		return nil
	}
}

// recv receives one datagram into s.buf and returns its length and the
// sender's port id (0 for the kernel). It peeks first (MSG_PEEK|MSG_TRUNC) so
// that a datagram larger than the buffer grows the buffer instead of being
// truncated, then discards the datagram with a zero-length read. flags may
// contain MSG_DONTWAIT. Errors are raw errnos (EAGAIN, ENOBUFS, ...).
func (s *socket) recv(flags int) (int, uint32, error) {
	for {
		n, from, err := sysRecvfrom(s.fd, s.buf, flags|unix.MSG_PEEK|unix.MSG_TRUNC)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, 0, err
		}
		if n > len(s.buf) {
			s.buf = make([]byte, (n+4095)&^4095)
			continue
		}
		for {
			_, _, err = sysRecvfrom(s.fd, nil, unix.MSG_DONTWAIT|unix.MSG_TRUNC)
			if err != unix.EINTR {
				break
			}
		}
		if err != nil {
			return 0, 0, err
		}
		return n, from, nil
	}
}

// recvSmall receives one datagram that cannot be larger than s.buf (the
// answer to a single-object request: a route, a neighbour) in one
// recvfrom(2), without recv's peek: two calls fewer per route lookup, two
// of which the software fabric makes per connection. A datagram larger
// than the buffer after all has been cut short and is lost: EMSGSIZE.
func (s *socket) recvSmall() (int, uint32, error) {
	for {
		n, from, err := sysRecvfrom(s.fd, s.buf, unix.MSG_TRUNC)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return 0, 0, err
		case n > len(s.buf):
			return 0, 0, unix.EMSGSIZE
		}
		return n, from, nil
	}
}

// sysRecvfrom is recvfrom, swapped by tests that count the calls.
var sysRecvfrom = recvfrom

var zeroByte byte

// recvfrom is recvfrom(2) without the allocation unix.Recvfrom makes for the
// source address. It returns the sender's netlink port id.
func recvfrom(fd int, p []byte, flags int) (int, uint32, error) {
	var rsa unix.RawSockaddrNetlink
	rsaLen := uint32(unix.SizeofSockaddrNetlink)
	bp := unsafe.Pointer(&zeroByte)
	if len(p) > 0 {
		bp = unsafe.Pointer(&p[0])
	}
	r, _, e := unix.Syscall6(unix.SYS_RECVFROM, uintptr(fd), uintptr(bp), uintptr(len(p)), uintptr(flags),
		uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&rsaLen)))
	if e != 0 {
		return 0, 0, e
	}
	return int(r), rsa.Pid, nil
}

// ifreq is struct ifreq: the interface name followed by a 24-byte union
// (ifr_ifindex, ifr_mtu, ...).
type ifreq struct {
	name [unix.IFNAMSIZ]byte
	data [24]byte
}

// ifNameMTU fills ifr with the name and MTU of interface index using the
// SIOCGIFNAME and SIOCGIFMTU ioctls, which every socket (this netlink one
// included) answers for its own network namespace. They are far cheaper
// than an RTM_GETLINK reply, which carries every link attribute. The name is
// returned as a slice of ifr.name.
func (s *socket) ifNameMTU(index int, ifr *ifreq) (name []byte, mtu int, err error) {
	*ifr = ifreq{}
	ne.PutUint32(ifr.data[:], uint32(index))
	if err := ioctlIfreq(s.fd, unix.SIOCGIFNAME, ifr); err != nil {
		return nil, 0, err
	}
	if err := ioctlIfreq(s.fd, unix.SIOCGIFMTU, ifr); err != nil {
		return nil, 0, err
	}
	return attrString(ifr.name[:]), int(int32(ne.Uint32(ifr.data[:]))), nil
}

func ioctlIfreq(fd int, req uint, ifr *ifreq) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(ifr)))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}
