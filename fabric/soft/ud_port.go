package soft

import (
	"encoding/binary"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/internal/sidr"
	"github.com/cmrt/cmrt/poll"
)

// udPort is the UDP socket of a UD rdma_cm port: the socket a UD binding
// holds, bound to its address and port without SO_REUSEADDR, so that no
// other socket (another user's, another process's, another fabric's) can
// bind the port and take its datagrams. Ids of one fabric that share the
// port with OptionReuseAddr (the port table applies the kernel's rules,
// cma_check_port) share the socket; the port hands each datagram to the id
// it is for: a REQ to the id listening (a listener never shares its
// port), a REP to the id whose request it answers, from the address and
// port that request went to.
//
// The socket asks for ICMP errors (IP_RECVERR): a "port unreachable" for a
// REQ ends that request at once (see udSock.refused) instead of after all
// its retransmissions.
type udPort struct {
	fd   int
	fam  int
	addr netip.AddrPort // what fd is bound to
	refs int            // bindings holding it; guarded by the port table's mu

	// The loop goroutine's: the loop the ids' udSocks run on while any is
	// attached (they all run on the same loop: a loop with references is
	// never replaced), and the socket's registration with it.
	l        *loop
	gen      uint32
	socks    []*udSock
	buf, oob []byte
}

func newUDPort(fd int, addr netip.AddrPort) *udPort {
	return &udPort{fd: fd, fam: udSocketFamily(fd), addr: addr, refs: 1}
}

// attach adds an id's udSock, registering the socket with the loop for the
// first. Loop only.
func (p *udPort) attach(s *udSock) {
	if len(p.socks) == 0 {
		udRecvInfo(p.fd, p.fam)
		udNoForeignGroups(p.fd, p.fam)
		udRecvErrors(p.fd, p.fam)
		gen, err := s.l.register(p.fd, poll.In, p)
		if err != nil {
			s.f.log.Error().Err(err).Int("fd", p.fd).Msg("register UD socket")
			return
		}
		p.l, p.gen = s.l, gen
	} else if p.l != s.l {
		s.f.log.Error().Int("fd", p.fd).Msg("UD socket shared across loops")
		return
	}
	p.socks = append(p.socks, s)
}

// detach removes a udSock; the last one unregisters the socket, which the
// port table closes when the last binding holding it goes. Loop only.
func (p *udPort) detach(s *udSock) {
	for k, cur := range p.socks {
		if cur == s {
			p.socks = append(p.socks[:k], p.socks[k+1:]...)
			break
		}
	}
	if len(p.socks) == 0 && p.l != nil {
		p.l.unregister(p.fd)
		p.l = nil
		p.buf, p.oob = nil, nil
	}
}

// onEvents implements pollable.
func (p *udPort) onEvents(ev uint32) {
	if ev&poll.Err != 0 {
		p.readErrors()
	}
	if p.buf == nil {
		p.buf = make([]byte, udMaxDatagram+1)
		p.oob = make([]byte, udOOBLen)
	}
	var d udDatagram
	for k := 0; k < 64 && len(p.socks) > 0; k++ {
		err := udRecv(p.fd, p.buf, p.oob, &d)
		switch err {
		case nil:
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return
		case unix.ECONNREFUSED, unix.EHOSTUNREACH, unix.ENETUNREACH:
			// An ICMP error (sk_err); its details are in the error queue.
			p.readErrors()
			continue
		default:
			p.socks[0].f.log.Debug().Err(err).Int("fd", p.fd).Msg("UD socket receive")
			continue
		}
		p.received(&d)
	}
}

// received hands a datagram to the id it is for.
func (p *udPort) received(d *udDatagram) {
	f := p.socks[0].f
	var m sidr.Message
	err := sidr.Parse(d.b, &m)
	if err != nil || d.trunc {
		f.log.Debug().Err(err).Stringer("from", d.from).Int("len", len(d.b)).Msg("malformed SIDR datagram dropped")
		return
	}
	if m.Type == sidr.TypeREQ {
		for _, s := range p.socks {
			if s.listening && m.PortSpace == uint16(s.ps) {
				s.onREQ(&m, d)
				return
			}
		}
		p.reply(&m, d, sidr.StatusUnsupported)
		return
	}
	for _, s := range p.socks {
		if c := s.conn; c != nil && !c.done && c.tid == m.TID {
			if !sameEndpoint(d.from, c.to) {
				f.log.Debug().Stringer("from", d.from).Stringer("want", c.to).Msg("SIDR REP from another address dropped")
				return
			}
			s.onREP(&m, d)
			return
		}
	}
	f.log.Debug().Stringer("from", d.from).Msg("unexpected SIDR REP dropped")
}

// reply sends a REP answering m with a status and nothing else.
func (p *udPort) reply(m *sidr.Message, d *udDatagram, status sidr.Status) {
	b, _ := sidr.Append(nil, &sidr.Message{Type: sidr.TypeREP, PortSpace: m.PortSpace, TID: m.TID, Status: status})
	_ = udSendFrom(p.fd, p.fam, b, d.from, d.dst)
}

// readErrors drains the socket's error queue: an ICMP port unreachable for
// a destination an id's request is waiting on ends that request.
func (p *udPort) readErrors() {
	var buf [sidr.HeaderLen]byte
	var oob [256]byte
	for k := 0; k < 64; k++ {
		_, oobn, _, from, err := unix.Recvmsg(p.fd, buf[:], oob[:], unix.MSG_ERRQUEUE|unix.MSG_DONTWAIT)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return
		}
		if errno, ok := icmpErrno(oob[:oobn]); ok && errno == unix.ECONNREFUSED {
			to := addrPortOf(from)
			for _, s := range p.socks {
				if c := s.conn; c != nil && !c.done && sameEndpoint(to, c.to) {
					s.refused(c)
				}
			}
		}
	}
}

// icmpErrno returns the errno of an ICMP error read from an error queue.
func icmpErrno(oob []byte) (syscall.Errno, bool) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return 0, false
	}
	for _, m := range msgs {
		if !(m.Header.Level == unix.IPPROTO_IP && m.Header.Type == unix.IP_RECVERR) &&
			!(m.Header.Level == unix.IPPROTO_IPV6 && m.Header.Type == unix.IPV6_RECVERR) {
			continue
		}
		if len(m.Data) < 8 {
			continue
		}
		// struct sock_extended_err: ee_errno (u32), ee_origin (u8), ...
		origin := m.Data[4]
		if origin != unix.SO_EE_ORIGIN_ICMP && origin != unix.SO_EE_ORIGIN_ICMP6 {
			continue
		}
		return syscall.Errno(binary.NativeEndian.Uint32(m.Data)), true
	}
	return 0, false
}

// udRecvErrors asks the kernel to queue ICMP errors for the socket
// (IP_RECVERR), which an unconnected UDP socket otherwise never sees.
func udRecvErrors(fd, fam int) {
	_ = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_RECVERR, 1)
	if fam == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_RECVERR, 1)
	}
}

// sameEndpoint reports whether a and b are the same address and port,
// IPv4-mapped addresses and zones aside.
func sameEndpoint(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap().WithZone("") == b.Addr().Unmap().WithZone("")
}
