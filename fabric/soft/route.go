package soft

import (
	"fmt"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// routeInfo is what resolution learns of the way to a destination.
type routeInfo struct {
	src     netip.Addr // the source address the kernel would use
	gateway netip.Addr // next hop, invalid when on link
	dev     *device
	mtu     int
}

// route asks the kernel's routing table how dst is reached from src (any
// source when src is invalid): the source address, the device and the MTU.
func (f *Fabric) route(dst, src netip.Addr) (routeInfo, error) {
	var ri routeInfo
	fd, err := newSocket(family(dst), unix.SOCK_DGRAM)
	if err != nil {
		return ri, err
	}
	defer unix.Close(fd)
	if src.IsValid() && !src.IsUnspecified() {
		if err := unix.Bind(fd, sockaddr(netip.AddrPortFrom(src, 0))); err != nil {
			return ri, fmt.Errorf("soft: source %s: %w", src, os.NewSyscallError("bind", err))
		}
	}
	if err := unix.Connect(fd, sockaddr(netip.AddrPortFrom(dst, 9))); err != nil {
		return ri, fmt.Errorf("soft: no route to %s: %w", dst, os.NewSyscallError("connect", err))
	}
	ri.src = localAddr(fd).Addr()
	dev, err := f.devs.byLocalAddr(ri.src)
	if err != nil {
		return ri, err
	}
	ri.dev, ri.mtu = dev, dev.mtu
	return ri, nil
}
