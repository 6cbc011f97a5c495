package soft

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/sidr"
	"github.com/cmrt/cmrt/poll"
)

// The UD data path.
//
// A UD QP is a UDP socket of its own, bound to the id's address with a port
// the kernel picks, and its QP number is that port: a peer addresses the QP
// by the IP address in the address handle's DGID and the QP number as the
// UDP port (the AH's DLID carries the same port). Multicast sends (a DGID
// that is a group address; the QP number is then 0xFFFFFF) go to the group
// at the port in DLID, the fabric's multicast port. Every datagram starts
// with a 16-byte data header (internal/sidr) naming the destination QP, the
// source QP and the Q_Key; the receiver drops datagrams for another QP
// number or with another Q_Key, as an IB port does.
//
// One send is one datagram, so message boundaries hold. A message may carry
// at most the device's MTU minus the IP header (20 bytes for IPv4, 40 for
// IPv6), the UDP header (8) and the data header (16): 1456 bytes on a
// 1500-byte Ethernet link, 65491 on IPv4 loopback (capped by IPv4's 65507
// bytes of UDP payload). Larger sends fail at post time with EMSGSIZE, and
// the socket never fragments.
//
// A receive takes the oldest posted receive request: its first 40 bytes get
// the GRH as a RoCEv2 device writes it (see fillGRH), the message follows;
// the completion has GRH set, Src and SrcQP naming the sender (an address
// handle for a reply is Src's address in DGID with SrcQP as the QP number),
// and ByteLen counting the 40 GRH bytes. A datagram arriving when no receive
// is posted is dropped, as UD drops it: it is no error. A message too long
// for the posted buffer completes it with a local length error.
//
// A send is handed to the kernel at once and completes (if signaled) at
// once; when the socket buffer is full it waits, in order, for the loop to
// flush it. Sends that the kernel refuses (no route, ...) complete with a
// general error: the QP stays usable.

// udQP is a UD queue pair.
type udQP struct {
	f      *Fabric
	ep     *endpoint
	l      *loop
	fd     int
	fam    int
	num    uint32
	local  netip.AddrPort
	maxMsg int
	qkey   uint32
	sigAll bool
	cap    fabric.QPCap
	scq    *cq
	rcq    *cq
	pd     *pd // the id's protection domain

	mu         sync.Mutex
	recvs      []fabric.RecvWR
	sendq      []udPending
	out        bool
	closed     bool
	dropped    atomic.Uint64
	noSelfLoop atomic.Bool

	// loop goroutine only
	gen      uint32
	buf, oob []byte
}

// udPending is a send the socket did not take yet.
type udPending struct {
	wr  fabric.WC
	b   []byte
	to  netip.AddrPort
	sig bool
}

// createQP implements transport: the datagram data path of a UD endpoint.
func (t *udTransport) createQP(attr *fabric.QPInitAttr) (fabric.QP, error) {
	ep := t.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed || t.qp.Load() != nil {
		return nil, einval("create_qp: endpoint destroyed or has a QP")
	}
	if !ep.local.IsValid() {
		return nil, einval("create_qp: id not bound to a device")
	}
	local := ep.local.Addr().Unmap()
	fam := family(local)
	fd, err := newSocket(fam, unix.SOCK_DGRAM)
	if err != nil {
		return nil, err
	}
	if err := unix.Bind(fd, udSockaddr(fam, netip.AddrPortFrom(local, 0))); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("soft: bind QP socket to %s: %w", local, err)
	}
	port := localAddr(fd).Port()
	udRecvInfo(fd, fam)
	udNoForeignGroups(fd, fam)
	udDontFragment(fd, fam)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	if ep.opt.tosSet {
		setTOS(fd, ep.opt.tos)
	}
	mtu := ep.mtu
	if ep.dev != nil {
		if mtu == 0 {
			mtu = ep.dev.mtu
		}
		udMulticastIF(fd, fam, local, ep.dev.ifindex)
	}
	if mtu <= 0 {
		mtu = 1500
	}
	scq, err := ep.f.qpCQ(attr.SendCQ)
	if err != nil {
		_ = unix.Close(fd)
		return nil, err
	}
	rcq, err := ep.f.qpCQ(attr.RecvCQ)
	if err != nil {
		scq.releaseQP()
		_ = unix.Close(fd)
		return nil, err
	}
	l, err := ep.f.eng.acquire()
	if err != nil {
		scq.releaseQP()
		rcq.releaseQP()
		_ = unix.Close(fd)
		return nil, err
	}
	q := &udQP{f: ep.f, ep: ep, l: l, fd: fd, fam: fam, num: uint32(port), local: netip.AddrPortFrom(local, port),
		maxMsg: udMaxMessage(mtu, local.Is4() && fam == unix.AF_INET), qkey: fabric.UDPQKey,
		sigAll: attr.SigAll, cap: attr.Cap, scq: scq, rcq: rcq, pd: ep.pdLocked()}
	t.qp.Store(q)
	ep.copyLoop = l
	l.post(q.start)
	return q, nil
}

// udMaxMessage is the largest UD message a path of this MTU carries.
func udMaxMessage(mtu int, v4 bool) int {
	if v4 {
		return min(mtu-20-8, udMaxDatagram) - sidr.DataHeaderLen
	}
	return min(mtu-40-8, 0xFFFF-8) - sidr.DataHeaderLen
}

// udMulticastIF makes group sends leave through the device's interface.
func udMulticastIF(fd, fam int, local netip.Addr, ifindex int) {
	if fam == unix.AF_INET6 {
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_IF, ifindex)
		return
	}
	_ = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_IF,
		&unix.IPMreqn{Address: local.As4(), Ifindex: int32(ifindex)})
}

func (q *udQP) start() {
	q.mu.Lock()
	closed := q.closed
	q.mu.Unlock()
	if closed {
		return
	}
	gen, err := q.l.register(q.fd, poll.In, q)
	if err != nil {
		q.f.log.Error().Err(err).Int("fd", q.fd).Msg("register UD QP")
		return
	}
	q.gen = gen
}

// Num implements fabric.QP: the UDP port the QP receives on.
func (q *udQP) Num() uint32 { return q.num }

// MaxMessageSize returns the largest message a send may carry.
func (q *udQP) MaxMessageSize() int { return q.maxMsg }

// Dropped returns how many datagrams for the QP found no posted receive.
func (q *udQP) Dropped() uint64 { return q.dropped.Load() }

// SetMulticastLoopback says whether the QP receives its own group sends (on
// by default). Off, it is IBV_QP_CREATE_BLOCK_SELF_MCAST_LB (mckey -l): the
// QP drops group datagrams that it sent itself, while every other member,
// in this process or another, still gets them. (IP_MULTICAST_LOOP could not
// do this: on the loopback interface the device itself loops every
// datagram back, and elsewhere it would hide the sends from all local
// members.)
func (q *udQP) SetMulticastLoopback(on bool) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return einval("QP destroyed")
	}
	q.noSelfLoop.Store(!on)
	return nil
}

// RegMR implements fabric.QP: the region is registered in the id's protection
// domain, where it outlives the QP.
func (q *udQP) RegMR(buf []byte, access fabric.Access) (fabric.MR, error) {
	return q.pd.RegMR(buf, access)
}

// DeregMR implements fabric.QP (see pd.DeregMR).
func (q *udQP) DeregMR(m fabric.MR) error { return q.pd.DeregMR(m) }

// SendCQ implements fabric.QP.
func (q *udQP) SendCQ() fabric.CQ { return q.scq }

// RecvCQ implements fabric.QP.
func (q *udQP) RecvCQ() fabric.CQ { return q.rcq }

// ownMR returns the live region of the QP's protection domain that m is
// and that holds b.
func (q *udQP) ownMR(m fabric.MR, b []byte) (*mr, bool) {
	r, err := q.pd.region(m)
	if err != nil || !r.valid.Load() || !r.contains(b) {
		return nil, false
	}
	return r, true
}

// PostSend implements fabric.QP: one Send is one datagram to wr.AH and
// wr.RemoteQPN.
func (q *udQP) PostSend(wr *fabric.SendWR) error {
	if wr == nil || wr.Opcode != fabric.WRSend {
		return einval("post_send: UD QPs send only Sends")
	}
	if wr.AH == nil {
		return einval("post_send: UD send without an address handle")
	}
	if len(wr.Buf) > q.maxMsg {
		return fmt.Errorf("soft: post_send: %d bytes over the UD message limit %d: %w", len(wr.Buf), q.maxMsg, syscall.EMSGSIZE)
	}
	if wr.Flags&fabric.SendInline == 0 && len(wr.Buf) > 0 {
		if _, ok := q.ownMR(wr.MR, wr.Buf); !ok {
			return einval("post_send: buffer outside a region registered on the QP")
		}
	}
	to := wr.AH.Addr()
	if !to.IsValid() || to.IsUnspecified() {
		return einval("post_send: address handle without an address")
	}
	var port uint16
	if to.IsMulticast() {
		port = wr.AH.DLID
		if port == 0 {
			port = q.f.opts.ud.groupPort()
		}
	} else {
		if wr.RemoteQPN == 0 || wr.RemoteQPN > 0xFFFF {
			return einval("post_send: QP number %#x names no soft UD QP", wr.RemoteQPN)
		}
		port = uint16(wr.RemoteQPN)
	}
	if q.fam == unix.AF_INET && !to.Is4() {
		return fmt.Errorf("soft: post_send: IPv6 peer %s from an IPv4 QP: %w", to, syscall.EAFNOSUPPORT)
	}
	if q.fam == unix.AF_INET6 && to.Is4() && !q.local.Addr().IsUnspecified() {
		return fmt.Errorf("soft: post_send: IPv4 peer %s from an IPv6 QP: %w", to, syscall.EAFNOSUPPORT)
	}
	if z := q.local.Addr().Zone(); z != "" && to.Is6() && to.IsLinkLocalUnicast() && to.Zone() == "" {
		to = to.WithZone(z)
	}
	qkey := wr.RemoteQKey
	if qkey&0x80000000 != 0 {
		qkey = q.qkey
	}
	b := make([]byte, sidr.DataHeaderLen+len(wr.Buf))
	h := sidr.DataHeader{DstQPN: wr.RemoteQPN, SrcQPN: q.num, QKey: qkey}
	if wr.Flags&fabric.SendSolicited != 0 {
		h.Flags = sidr.FlagSolicited
	}
	sidr.PutDataHeader(b, &h)
	copy(b[sidr.DataHeaderLen:], wr.Buf)
	p := udPending{wr: fabric.WC{WRID: wr.WRID, Opcode: fabric.WCSend, ByteLen: uint32(len(wr.Buf)), QPNum: q.num},
		b: b, to: netip.AddrPortFrom(to, port), sig: q.sigAll || wr.Flags&fabric.SendSignaled != 0}

	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return einval("post_send: QP destroyed")
	}
	if len(q.sendq) > 0 {
		if q.cap.MaxSendWR > 0 && len(q.sendq) >= q.cap.MaxSendWR {
			return fmt.Errorf("soft: post_send: send queue full: %w", syscall.ENOMEM)
		}
		q.sendq = append(q.sendq, p)
		return nil
	}
	if !q.sendLocked(&p) {
		q.sendq = append(q.sendq, p)
		if !q.out {
			q.out = true
			q.l.post(q.armOut)
		}
	}
	return nil
}

// sendLocked hands one datagram to the kernel and completes it. It reports
// false when the socket buffer is full. q.mu is held.
func (q *udQP) sendLocked(p *udPending) bool {
	err := udSendFrom(q.fd, q.fam, p.b, p.to, netip.Addr{})
	switch err {
	case unix.EAGAIN, unix.ENOBUFS:
		return false
	case nil:
		if p.sig {
			q.scq.push(p.wr)
		}
	default:
		q.f.log.Debug().Err(err).Stringer("to", p.to).Msg("UD send")
		wc := p.wr
		wc.Status = fabric.WCGeneralErr
		q.scq.push(wc)
	}
	return true
}

// armOut starts or stops waiting for room in the socket buffer. Loop only.
func (q *udQP) armOut() {
	q.mu.Lock()
	closed, out := q.closed, q.out
	q.mu.Unlock()
	if closed {
		return
	}
	ev := uint32(poll.In)
	if out {
		ev |= poll.Out
	}
	_ = q.l.modify(q.fd, q.gen, ev)
}

// flush sends what waited for room. Loop only.
func (q *udQP) flush() {
	q.mu.Lock()
	n := 0
	for n < len(q.sendq) && !q.closed && q.sendLocked(&q.sendq[n]) {
		n++
	}
	q.sendq = q.sendq[n:]
	if len(q.sendq) == 0 {
		q.sendq, q.out = nil, false
	}
	q.mu.Unlock()
	q.armOut()
}

// PostRecv implements fabric.QP. The buffer must hold at least the 40-byte GRH
// every UD receive starts with (EINVAL otherwise: no datagram could ever
// complete it).
func (q *udQP) PostRecv(wr *fabric.RecvWR) error {
	if wr == nil {
		return einval("post_recv: no work request")
	}
	if len(wr.Buf) < grhLen {
		return einval("post_recv: %d-byte UD receive buffer, under the %d-byte GRH", len(wr.Buf), grhLen)
	}
	if _, ok := q.ownMR(wr.MR, wr.Buf); !ok {
		return einval("post_recv: buffer outside a region registered on the QP")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return einval("post_recv: QP destroyed")
	}
	if q.cap.MaxRecvWR > 0 && len(q.recvs) >= q.cap.MaxRecvWR {
		return fmt.Errorf("soft: post_recv: receive queue full: %w", syscall.ENOMEM)
	}
	q.recvs = append(q.recvs, *wr)
	return nil
}

// onEvents implements pollable.
func (q *udQP) onEvents(ev uint32) {
	if ev&poll.Out != 0 {
		q.flush()
	}
	if ev&(poll.In|poll.Err|poll.Hup) == 0 {
		return
	}
	q.readAll(q.fd, false)
}

// readAll reads what fd has queued (64 datagrams at most per wakeup) and
// delivers it. Loop only.
func (q *udQP) readAll(fd int, group bool) {
	if q.buf == nil {
		q.buf = make([]byte, 0x10000)
		q.oob = make([]byte, udOOBLen)
	}
	var d udDatagram
	for k := 0; k < 64; k++ {
		err := udRecv(fd, q.buf, q.oob, &d)
		switch err {
		case nil:
			q.deliver(&d, group)
		case unix.EINTR:
		case unix.EAGAIN:
			return
		default:
			q.f.log.Debug().Err(err).Int("fd", fd).Msg("UD receive")
		}
	}
}

// deliver completes the oldest posted receive with a datagram, or drops it.
// Loop only.
func (q *udQP) deliver(d *udDatagram, group bool) {
	var h sidr.DataHeader
	payload, err := sidr.ParseData(d.b, &h)
	if err != nil || d.trunc {
		q.f.log.Debug().Err(err).Stringer("from", d.from).Msg("malformed UD datagram dropped")
		return
	}
	want := q.num
	if group {
		want = sidr.MulticastQPN
	}
	if group && q.noSelfLoop.Load() && h.SrcQPN == q.num && d.from.Port() == q.local.Port() && d.from.Addr() == q.local.Addr() {
		return // our own group send, looped back
	}
	if h.DstQPN != want || h.QKey != q.qkey {
		q.f.log.Debug().Stringer("from", d.from).Uint32("qpn", h.DstQPN).Uint32("qkey", h.QKey).Msg("UD datagram for another QP or Q_Key dropped")
		return
	}
	q.mu.Lock()
	if q.closed || len(q.recvs) == 0 {
		q.mu.Unlock()
		q.dropped.Add(1)
		return
	}
	wr := q.recvs[0]
	q.recvs[0] = fabric.RecvWR{}
	q.recvs = q.recvs[1:]
	if len(q.recvs) == 0 {
		q.recvs = nil
	}
	q.mu.Unlock()

	wc := fabric.WC{WRID: wr.WRID, Opcode: fabric.WCRecv, QPNum: q.num, SrcQP: h.SrcQPN, Src: d.from, GRH: true,
		Solicited: h.Flags&sidr.FlagSolicited != 0}
	m, ok := wr.MR.(*mr)
	switch {
	case !ok || !m.valid.Load():
		wc.Status = fabric.WCLocProtErr
	case grhLen+len(payload) > len(wr.Buf):
		wc.Status = fabric.WCLocLenErr
	default:
		dst := d.dst
		if !dst.IsValid() {
			dst = q.local.Addr()
		}
		fillGRH(wr.Buf, d.from.Addr(), dst, d.ttl, d.tos, 8+len(d.b))
		copy(wr.Buf[grhLen:], payload)
		wc.ByteLen = uint32(grhLen + len(payload))
	}
	q.rcq.push(wc)
}

// Destroy implements fabric.QP: posted work requests are discarded, the socket
// is closed before it returns, and the completion queues are released.
func (q *udQP) Destroy() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.recvs, q.sendq = nil, nil
	q.mu.Unlock()
	q.ep.ud().qp.CompareAndSwap(q, nil)
	done := false
	q.l.call(func() {
		q.l.unregister(q.fd)
		_ = unix.Close(q.fd)
		done = true
	})
	if !done {
		_ = unix.Close(q.fd)
	}
	q.l.eng.release(q.l)
	q.scq.releaseQP()
	q.rcq.releaseQP()
	return nil
}
