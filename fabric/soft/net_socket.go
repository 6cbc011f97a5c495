package soft

import (
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sockaddr converts an address to the form the socket calls take.
func sockaddr(ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr().Unmap()
	if a.Is4() {
		return &unix.SockaddrInet4{Port: int(ap.Port()), Addr: a.As4()}
	}
	return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: a.As16(), ZoneId: scopeID(a.Zone())}
}

// scopeID is the scope of an IPv6 zone: its number, or the index of the
// interface it names (0 when there is none, or none by that name).
func scopeID(zone string) uint32 {
	if zone == "" {
		return 0
	}
	if n, err := strconv.Atoi(zone); err == nil {
		return uint32(n)
	}
	if ifi, err := interfaceByName(zone); err == nil {
		return uint32(ifi)
	}
	return 0
}

// rawSockaddr writes ap into rsa in the kernel's form and returns its
// length: what connect(2) and bind(2) take, built on the caller's stack
// (sockaddr's unix.Sockaddr is allocated, and converted again by the call).
func rawSockaddr(ap netip.AddrPort, rsa *unix.RawSockaddrAny) uint32 {
	a := ap.Addr().Unmap()
	if a.Is4() {
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		sa.Family = unix.AF_INET
		putNetPort(&sa.Port, ap.Port())
		sa.Addr = a.As4()
		return unix.SizeofSockaddrInet4
	}
	sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
	sa.Family = unix.AF_INET6
	putNetPort(&sa.Port, ap.Port())
	sa.Addr = a.As16()
	sa.Scope_id = scopeID(a.Zone())
	return unix.SizeofSockaddrInet6
}

// putNetPort stores port in network byte order.
func putNetPort(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// connectTo is connect(2) of fd to ap, allocating nothing.
func connectTo(fd int, ap netip.AddrPort) error { return addrCall(unix.SYS_CONNECT, fd, ap) }

// bindTo is bind(2) of fd to ap, allocating nothing.
func bindTo(fd int, ap netip.AddrPort) error { return addrCall(unix.SYS_BIND, fd, ap) }

// addrCall makes system call trap (connect or bind) of fd with ap in the
// kernel's form, built on the stack (the x/sys wrappers allocate it).
func addrCall(trap uintptr, fd int, ap netip.AddrPort) error {
	var rsa unix.RawSockaddrAny
	n := rawSockaddr(ap, &rsa)
	if _, _, e := unix.Syscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(n)); e != 0 {
		return e
	}
	return nil
}

// addrPortOf converts a socket address back.
func addrPortOf(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(addr6(sa.Addr, sa.ZoneId), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// addr6 is an AF_INET6 socket address's address: its scope as the zone,
// an IPv4-mapped one unmapped.
func addr6(b [16]byte, scope uint32) netip.Addr {
	a := netip.AddrFrom16(b)
	if scope != 0 {
		a = a.WithZone(strconv.Itoa(int(scope)))
	}
	return a.Unmap()
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

// sockName is rawSockName, swapped by tests that count the calls.
var sockName = rawSockName

// localAddr returns the socket's bound address.
func localAddr(fd int) netip.AddrPort { return sockName(unix.SYS_GETSOCKNAME, fd) }

// peerAddr returns the socket's peer address.
func peerAddr(fd int) netip.AddrPort { return sockName(unix.SYS_GETPEERNAME, fd) }

// sockName makes getsockname(2) or getpeername(2) (trap) itself: the
// x/sys/unix wrappers allocate the address they return and, for every
// AF_INET socket, make a second system call (SO_PROTOCOL, to tell ping
// sockets apart), twice per accepted connection.
func rawSockName(trap uintptr, fd int) netip.AddrPort {
	var rsa unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	if _, _, e := unix.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n))); e != 0 {
		return netip.AddrPort{}
	}
	return rawAddrPort(&rsa)
}

// accept4 is accept4(2) returning the peer's address, made directly for
// the same reasons as sockName.
func accept4(fd, flags int) (int, netip.AddrPort, error) {
	var rsa unix.RawSockaddrAny
	n := uint32(unix.SizeofSockaddrAny)
	nfd, _, e := unix.Syscall6(unix.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(&rsa)), uintptr(unsafe.Pointer(&n)), uintptr(flags), 0, 0)
	if e != 0 {
		return -1, netip.AddrPort{}, e
	}
	return int(nfd), rawAddrPort(&rsa), nil
}

// rawAddrPort converts an AF_INET or AF_INET6 socket address as the kernel
// writes it, as addrPortOf does the x/sys/unix form.
func rawAddrPort(rsa *unix.RawSockaddrAny) netip.AddrPort {
	switch rsa.Addr.Family {
	case unix.AF_INET:
		sa := (*unix.RawSockaddrInet4)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), netPort(sa.Port))
	case unix.AF_INET6:
		sa := (*unix.RawSockaddrInet6)(unsafe.Pointer(rsa))
		return netip.AddrPortFrom(addr6(sa.Addr, sa.Scope_id), netPort(sa.Port))
	}
	return netip.AddrPort{}
}

// netPort reads a port stored in network byte order.
func netPort(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
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
