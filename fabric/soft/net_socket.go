package soft

import (
	"net/netip"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// sockaddr converts an address to the form the socket calls take.
func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr().Unmap()
	if a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	sa := &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16()}
	if z := a.Zone(); z != "" {
		if n, err := strconv.Atoi(z); err == nil {
			sa.ZoneId = uint32(n)
		} else if ifi, err := interfaceByName(z); err == nil {
			sa.ZoneId = uint32(ifi)
		}
	}
	return sa
}

// addrPortOf converts a socket address back.
func addrPortOf(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		a := netip.AddrFrom16(sa.Addr)
		if sa.ZoneId != 0 {
			a = a.WithZone(strconv.Itoa(int(sa.ZoneId)))
		}
		return netip.AddrPortFrom(a.Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

func family(a netip.Addr) int {
	if a.Unmap().Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// newSocket opens a non-blocking, close-on-exec socket.
func newSocket(fam, typ int) (int, error) {
	fd, err := unix.Socket(fam, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("socket", err)
	}
	return fd, nil
}

// localAddr returns the socket's bound address.
func localAddr(fd int) netip.AddrPort {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return netip.AddrPort{}
	}
	return addrPortOf(sa)
}

// peerAddr returns the socket's peer address.
func peerAddr(fd int) netip.AddrPort {
	sa, err := unix.Getpeername(fd)
	if err != nil {
		return netip.AddrPort{}
	}
	return addrPortOf(sa)
}

// soError returns the pending error of a socket (SO_ERROR) as an errno.
func soError(fd int) syscall.Errno {
	v, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ERROR)
	if err != nil {
		if e, ok := err.(syscall.Errno); ok {
			return e
		}
		return syscall.EIO
	}
	return syscall.Errno(v)
}

func errnoOf(err error) syscall.Errno {
	for err != nil {
		if e, ok := err.(syscall.Errno); ok {
			return e
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			break
		}
		err = u.Unwrap()
	}
	return syscall.EIO
}
