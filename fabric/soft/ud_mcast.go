package soft

import (
	"fmt"
	"net/netip"
	"os"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/sidr"
	"github.com/cmrt/cmrt/poll"
)

// Multicast.
//
// A group is an IP multicast group, IPv4 or IPv6, reached on the UDP port
// WithMulticastPort sets (DefaultMulticastPort, 4792): MULTICAST_JOIN
// reports QP number 0xFFFFFF, Q_Key RDMA_UDP_QKEY and an address handle with
// the group in DGID and that port in DLID, and a UD send to it is one IP
// multicast datagram leaving through the id's device.
//
// A full-member join opens a socket of its own, bound to the group address
// and port with SO_REUSEADDR (so any number of ids, in any number of
// processes, can join one group and each gets every datagram), joins the
// group on the id's interface (IP_ADD_MEMBERSHIP / IPV6_JOIN_GROUP) and
// hands what arrives to the id's QP (dropped when the id has no QP or no
// receive posted). A send-only join opens nothing. Leave drops the
// membership and closes the socket before it returns, so nothing sent to
// the group reaches the id after it. Sends loop back to every local
// member, the sending QP included unless it turns that off
// (udQP.SetMulticastLoopback).
//
// Before reporting MULTICAST_JOIN the join checks that the group is routable
// out of the id's interface; when it is not (an IPv6 group on the loopback
// interface, say) or the membership fails, the id gets MULTICAST_ERROR with
// the errno (e.g. -ENETUNREACH). Joining needs an id bound to a device
// (EINVAL otherwise, as the kernel), with a group of its address family.

// mcJoin is one group joined by an endpoint. Fields below fd belong to the
// loop goroutine.
type mcJoin struct {
	uid      uint64
	group    netip.Addr
	sendOnly bool
	ep       *endpoint
	ud       *udTransport // ep's
	l        *loop        // nil when no socket was opened
	fd       int
	fam      int
	local    netip.Addr
	ifindex  int

	gen    uint32
	closed bool
}

// groupSockaddr is where group traffic goes; link- and interface-local
// IPv6 groups need the interface.
func groupSockaddr(group netip.Addr, port uint16, ifindex int) unix.Sockaddr {
	if group.Is4() {
		return &unix.SockaddrInet4{Port: int(port), Addr: group.As4()}
	}
	sa := &unix.SockaddrInet6{Port: int(port), Addr: group.As16()}
	if group.IsLinkLocalMulticast() || group.IsInterfaceLocalMulticast() {
		sa.ZoneId = uint32(ifindex)
	}
	return sa
}

// checkGroupRoute reports whether group traffic can leave from local
// through interface ifindex.
func checkGroupRoute(group, local netip.Addr, port uint16, ifindex int) error {
	fam := family(group)
	fd, err := newSocket(fam, unix.SOCK_DGRAM)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := bindTo(fd, netip.AddrPortFrom(local, 0)); err != nil {
		return os.NewSyscallError("bind", err)
	}
	udMulticastIF(fd, fam, local, ifindex)
	if err := unix.Connect(fd, groupSockaddr(group, port, ifindex)); err != nil {
		return os.NewSyscallError("connect", err)
	}
	return nil
}

// openGroupSocket opens a socket receiving the group's traffic on the
// interface.
func openGroupSocket(group, local netip.Addr, port uint16, ifindex int) (int, error) {
	fam := family(group)
	fd, err := newSocket(fam, unix.SOCK_DGRAM)
	if err != nil {
		return -1, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if fam == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 1)
	}
	udNoForeignGroups(fd, fam)
	udRecvInfo(fd, fam)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	if err := unix.Bind(fd, groupSockaddr(group, port, ifindex)); err != nil {
		_ = unix.Close(fd)
		return -1, os.NewSyscallError("bind", err)
	}
	if fam == unix.AF_INET {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: group.As4(), Address: local.As4(), Ifindex: int32(ifindex)})
	} else {
		err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
			&unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifindex)})
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, os.NewSyscallError("setsockopt membership", err)
	}
	return fd, nil
}

// join implements transport: MULTICAST_JOIN or MULTICAST_ERROR follows,
// for uid.
func (t *udTransport) join(uid uint64, group netip.Addr, sendOnly bool) error {
	ep := t.ep
	group = group.Unmap()
	if !group.IsMulticast() {
		return einval("join: %s is not a multicast address", group)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed || ep.dev == nil || !ep.local.IsValid() || ep.local.Addr().IsUnspecified() {
		return einval("join: id not bound to a device")
	}
	local := ep.local.Addr().Unmap()
	if local.Is4() != group.Is4() {
		return einval("join: group %s and address %s differ in family", group, local)
	}
	if _, dup := t.joins[group]; dup {
		return fmt.Errorf("soft: join: %s already joined: %w", group, syscall.EADDRINUSE)
	}
	port := ep.f.opts.ud.groupPort()
	ifindex := ep.dev.ifindex
	j := &mcJoin{uid: uid, group: group, sendOnly: sendOnly, ep: ep, ud: t, fd: -1, fam: family(group), local: local, ifindex: ifindex}
	err := checkGroupRoute(group, local, port, ifindex)
	if err == nil && !sendOnly {
		var l *loop
		if l, err = ep.f.eng.acquire(); err == nil {
			if j.fd, err = openGroupSocket(group, local, port, ifindex); err != nil {
				ep.f.eng.release(l)
			} else {
				j.l = l
				l.post(j.start)
			}
		}
	}
	if t.joins == nil {
		t.joins = make(map[netip.Addr]*mcJoin)
	}
	t.joins[group] = j
	r := fabric.RawEvent{UID: uid, Type: fabric.EventMulticastJoin, Group: group}
	if err != nil {
		r.Type, r.Status = fabric.EventMulticastError, -int32(errnoOf(err))
		ep.f.log.Debug().Err(err).Stringer("group", group).Msg("multicast join failed")
	} else {
		r.QPNum, r.QKey = sidr.MulticastQPN, fabric.UDPQKey
		r.AH = udAH(group, port, 1, 0)
	}
	_ = ep.src.q.Push(&r)
	return nil
}

// leave implements transport: the group's traffic stops before it
// returns.
func (t *udTransport) leave(group netip.Addr) error {
	ep := t.ep
	group = group.Unmap()
	ep.mu.Lock()
	j := t.joins[group]
	delete(t.joins, group)
	ep.mu.Unlock()
	if j == nil {
		return fmt.Errorf("soft: leave: %s not joined: %w", group, syscall.EADDRNOTAVAIL)
	}
	j.leave()
	return nil
}

func (j *mcJoin) start() {
	if j.closed {
		return
	}
	gen, err := j.l.register(j.fd, poll.In, j)
	if err != nil {
		j.ep.f.log.Error().Err(err).Int("fd", j.fd).Msg("register multicast socket")
		return
	}
	j.gen = gen
}

// onEvents implements pollable: group datagrams go to the id's QP.
func (j *mcJoin) onEvents(uint32) {
	if j.closed {
		return
	}
	if q := j.ud.qp.Load(); q != nil {
		q.readAll(j.fd, true)
		return
	}
	// No QP: drain and drop.
	var buf [2048]byte
	for k := 0; k < 64; k++ {
		if _, _, err := unix.Recvfrom(j.fd, buf[:], unix.MSG_DONTWAIT|unix.MSG_TRUNC); err == unix.EAGAIN || (err != nil && err != unix.EINTR) {
			return
		}
	}
}

// leave drops the membership and closes the socket. Not on the loop
// goroutine.
func (j *mcJoin) leave() {
	if j.l == nil {
		return
	}
	j.l.call(func() {
		if j.closed {
			return
		}
		j.closed = true
		if j.fam == unix.AF_INET {
			_ = unix.SetsockoptIPMreqn(j.fd, unix.IPPROTO_IP, unix.IP_DROP_MEMBERSHIP,
				&unix.IPMreqn{Multiaddr: j.group.As4(), Address: j.local.As4(), Ifindex: int32(j.ifindex)})
		} else {
			_ = unix.SetsockoptIPv6Mreq(j.fd, unix.IPPROTO_IPV6, unix.IPV6_LEAVE_GROUP,
				&unix.IPv6Mreq{Multiaddr: j.group.As16(), Interface: uint32(j.ifindex)})
		}
		j.l.unregister(j.fd)
		_ = unix.Close(j.fd)
		j.fd = -1
		j.l.eng.release(j.l)
	})
}
