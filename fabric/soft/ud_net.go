package soft

import (
	"encoding/binary"
	"net/netip"

	"golang.org/x/sys/unix"
)

// Datagram sockets of the UD service: the helpers below open them, tell
// the kernel to report where each datagram was addressed (so replies leave
// from the address a request came to, and a receive's GRH names both ends),
// and send and receive through them.

// udMaxDatagram bounds what a UD socket reads at once: the largest UDP
// payload IPv4 can carry.
const udMaxDatagram = 65507

// udSockaddr converts ap for a socket of family fam: IPv4 addresses become
// IPv4-mapped on an AF_INET6 socket.
func udSockaddr(fam int, ap netip.AddrPort) unix.Sockaddr {
	a := ap.Addr().Unmap()
	if fam == unix.AF_INET6 && a.Is4() {
		return &unix.SockaddrInet6{Port: int(ap.Port()), Addr: netip.AddrFrom16(a.As16()).As16()}
	}
	return sockaddr(netip.AddrPortFrom(a, ap.Port()))
}

// udRecvInfo asks the kernel for the destination address, TTL and TOS of
// each datagram (IP_PKTINFO and friends). Errors are ignored: the fields
// then stay zero.
func udRecvInfo(fd, fam int) {
	if fam == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVPKTINFO, 1)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVHOPLIMIT, 1)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1)
	}
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_PKTINFO, 1)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTTL, 1)
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
}

// udNoForeignGroups keeps group traffic the socket did not join itself
// away from it (IP_MULTICAST_ALL off).
func udNoForeignGroups(fd, fam int) {
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_ALL, 0)
	if fam == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_ALL, 0)
	}
}

// udDontFragment makes the kernel refuse, rather than fragment, datagrams
// over the path MTU.
func udDontFragment(fd, fam int) {
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	if fam == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
	}
}

// udDatagram is one received datagram.
type udDatagram struct {
	b     []byte
	from  netip.AddrPort
	dst   netip.Addr // where it was addressed (invalid when unknown)
	ttl   uint8      // TTL or hop limit (0 when unknown)
	tos   uint8      // TOS or traffic class
	trunc bool
}

// udRecv reads one datagram into buf. It returns EAGAIN when none is
// queued.
func udRecv(fd int, buf, oob []byte, d *udDatagram) error {
	n, oobn, flags, from, err := unix.Recvmsg(fd, buf, oob, unix.MSG_DONTWAIT)
	if err != nil {
		return err
	}
	*d = udDatagram{b: buf[:n], from: addrPortOf(from), trunc: flags&unix.MSG_TRUNC != 0}
	countReceived(fd, n)
	countReceivedMessage(fd, true)
	if oobn == 0 {
		return nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_PKTINFO && len(m.Data) >= 12:
			d.dst = netip.AddrFrom4([4]byte(m.Data[8:12]))
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_PKTINFO && len(m.Data) >= 16:
			d.dst = netip.AddrFrom16([16]byte(m.Data[:16])).Unmap()
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TTL && len(m.Data) >= 4:
			d.ttl = uint8(binary.NativeEndian.Uint32(m.Data))
		case m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_TOS && len(m.Data) >= 1:
			d.tos = m.Data[0]
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_HOPLIMIT && len(m.Data) >= 4:
			d.ttl = uint8(binary.NativeEndian.Uint32(m.Data))
		case m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_TCLASS && len(m.Data) >= 4:
			d.tos = uint8(binary.NativeEndian.Uint32(m.Data))
		}
	}
	return nil
}

// udOOBLen is enough ancillary space for the messages udRecvInfo asks for.
var udOOBLen = unix.CmsgSpace(20)*2 + unix.CmsgSpace(4)*4

// udSendFrom sends b to the address to from a socket of family fam; a
// valid, specific src is the source address (IP_PKTINFO), as a reply must
// leave from the address its request came to.
func udSendFrom(fd, fam int, b []byte, to netip.AddrPort, src netip.Addr) error {
	var oob []byte
	if src.IsValid() && !src.IsUnspecified() && !src.IsMulticast() {
		if s := src.Unmap(); s.Is4() {
			oob = unix.PktInfo4(&unix.Inet4Pktinfo{Spec_dst: s.As4()})
		} else {
			oob = unix.PktInfo6(&unix.Inet6Pktinfo{Addr: s.As16()})
		}
	}
	for {
		err := unix.Sendmsg(fd, b, oob, udSockaddr(fam, to), unix.MSG_DONTWAIT)
		if err != unix.EINTR {
			countDatagram(fd, len(b), err)
			return err
		}
	}
}

// udSocketFamily returns the family of a bound socket.
func udSocketFamily(fd int) int {
	if sa, err := unix.Getsockname(fd); err == nil {
		if _, ok := sa.(*unix.SockaddrInet6); ok {
			return unix.AF_INET6
		}
	}
	return unix.AF_INET
}
