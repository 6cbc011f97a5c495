package kernel

import (
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/ucma"
)

// QPAttr is struct ib_uverbs_qp_attr: the attributes INIT_QP_ATTR computes
// for a QP transition (AttrMask says which are set).
type QPAttr = ucma.QPAttr

// QPState is a QP state (enum ib_qp_state), the target of InitQPAttr.
type QPState uint32

// QP states.
const (
	QPStateReset QPState = ucma.QPStateReset
	QPStateInit  QPState = ucma.QPStateInit
	QPStateRTR   QPState = ucma.QPStateRTR
	QPStateRTS   QPState = ucma.QPStateRTS
	QPStateSQD   QPState = ucma.QPStateSQD
	QPStateSQE   QPState = ucma.QPStateSQE
	QPStateErr   QPState = ucma.QPStateErr
)

// Endpoint is what the kernel fabric's endpoints offer beyond fabric.Endpoint.
// Get it with id.ID.Endpoint().(kernel.Endpoint).
type Endpoint interface {
	fabric.Endpoint
	// Handle returns the kernel's id for the endpoint (the ucma handle).
	Handle() uint32
	// InitQPAttr asks the CM for the attributes of moving a QP the
	// application drives itself (created through verbs, outside cmrt) to
	// state, as rdma_init_qp_attr: INIT (pkey index, port, access flags),
	// RTR (path, remote QPN, PSN, responder resources) or RTS (timeouts,
	// initiator depth). The kernel answers EINVAL in states where the
	// transition makes no sense.
	InitQPAttr(state QPState) (QPAttr, error)
}

// endpoint is one kernel rdma_cm id, named by handle on its source's fd.
type endpoint struct {
	f  *Fabric
	ps fabric.PortSpace
	qp fabric.QPType

	mu        sync.Mutex
	src       *source
	handle    uint32
	uid       uint64 // 0 for a connection request's id until accepted
	destroyed bool
	reqIRD    uint8 // what the connection request asked for
	reqORD    uint8
	joins     map[netip.Addr]uint32 // group -> multicast handle
	vqp       *vqp                  // the id's QP (verbs_qp.go), or nil
	connErr   bool                  // CONNECT_RESPONSE failed locally: later REJECTED/DISCONNECTED are dropped
	attached  map[netip.Addr]mcAttach
	listening bool      // Listen succeeded
	dev       devRef    // the device the kernel attached the id to, once known
	former    []*source // the sources a listener left, held open (source.Migrate)
}

// mcAttach is a multicast group the id's UD QP is attached to.
type mcAttach struct {
	gid  [16]byte
	mlid uint16
}

var _ Endpoint = (*endpoint)(nil)

func einval(format string, args ...any) error {
	return fmt.Errorf("kernel: "+format+": %w", append(args, syscall.EINVAL)...)
}

// do runs one or more commands for the endpoint on its current fd, with
// ep.mu held so a migration cannot change the fd underneath.
func (ep *endpoint) do(op string, fn func(s *source, fd int, b *ucma.Buffers) error) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed {
		return einval("%s: id destroyed", op)
	}
	s := ep.src
	if err := s.exec(func(fd int, b *ucma.Buffers) error { return fn(s, fd, b) }); err != nil {
		return fmt.Errorf("kernel: %s: %w", op, err)
	}
	return nil
}

// afCall runs the AF_IB-capable command, or the *_IP one on kernels
// without it.
func (ep *endpoint) afCall(fd int, b *ucma.Buffers, af, ip ucma.Command) ([]byte, error) {
	if ep.f.afib() {
		resp, err := b.Exec(fd, af)
		if err == nil || !ep.f.fallback(err) {
			return resp, err
		}
	}
	if ip == nil {
		return nil, fmt.Errorf("not supported by this kernel: %w", syscall.EOPNOTSUPP)
	}
	return b.Exec(fd, ip)
}

// Handle implements Endpoint.
func (ep *endpoint) Handle() uint32 {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.handle
}

// sockaddr converts an IP endpoint; IPv4-mapped addresses become AF_INET.
func sockaddr(ap netip.AddrPort) (ucma.Addr, error) {
	if !ap.IsValid() {
		return ucma.Addr{}, nil
	}
	a := ap.Addr()
	if a.Is4In6() {
		a = a.Unmap()
	}
	return ucma.IPAddr(netip.AddrPortFrom(a, ap.Port()))
}

// timeoutMs converts a resolution timeout; 0 or less means librdmacm's
// customary 2000 ms.
func timeoutMs(d time.Duration) uint32 {
	if d <= 0 {
		return 2000
	}
	ms := d.Milliseconds()
	if ms < 1 {
		ms = 1
	}
	if ms > 1<<31-1 {
		ms = 1<<31 - 1
	}
	return uint32(ms)
}

// Bind implements fabric.Endpoint (BIND, or BIND_IP).
func (ep *endpoint) Bind(addr netip.AddrPort) error {
	a, err := sockaddr(addr)
	if err != nil {
		return fmt.Errorf("kernel: bind %s: %w", addr, err)
	}
	return ep.do("bind", func(_ *source, fd int, b *ucma.Buffers) error {
		_, err := ep.afCall(fd, b, &ucma.Bind{ID: ep.handle, Addr: a}, &ucma.BindIP{ID: ep.handle, Addr: a})
		return err
	})
}

// ResolveAddr implements fabric.Endpoint (RESOLVE_ADDR, or RESOLVE_IP).
func (ep *endpoint) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	s, err := sockaddr(src)
	if err != nil {
		return fmt.Errorf("kernel: resolve_addr %s: %w", src, err)
	}
	d, err := sockaddr(dst)
	if err != nil || !d.IsValid() {
		return einval("resolve_addr: destination %s", dst)
	}
	ms := timeoutMs(timeout)
	return ep.do("resolve_addr", func(_ *source, fd int, b *ucma.Buffers) error {
		_, err := ep.afCall(fd, b,
			&ucma.ResolveAddr{ID: ep.handle, TimeoutMs: ms, Src: s, Dst: d},
			&ucma.ResolveIP{ID: ep.handle, TimeoutMs: ms, Src: s, Dst: d})
		return err
	})
}

// ResolveRoute implements fabric.Endpoint.
func (ep *endpoint) ResolveRoute(timeout time.Duration) error {
	ms := timeoutMs(timeout)
	return ep.do("resolve_route", func(_ *source, fd int, b *ucma.Buffers) error {
		_, err := b.Exec(fd, &ucma.ResolveRoute{ID: ep.handle, TimeoutMs: ms})
		return err
	})
}

// Listen implements fabric.Endpoint. The kernel binds an unbound id to the
// IPv4 wildcard and clamps the backlog to net.rdma_ucm.max_backlog.
func (ep *endpoint) Listen(backlog int) error {
	if backlog < 0 {
		backlog = 0
	}
	return ep.do("listen", func(_ *source, fd int, b *ucma.Buffers) error {
		_, err := b.Exec(fd, &ucma.Listen{ID: ep.handle, Backlog: uint32(backlog)})
		if err == nil {
			ep.listening = true
		}
		return err
	})
}

// devRef names the device and port an id is attached to.
type devRef struct {
	guid  uint64 // node GUID; 0: not attached yet
	index uint32
	port  uint8
}

// queryDevice returns the node GUID, device index and port of the device
// the id is bound to (a GUID of 0: none yet). The kernel attaches an id to
// a device once (bind to a device's address, address resolution, a
// connection request) and keeps it there until the id is destroyed, so
// only the first answer naming a device costs a command: QUERY (ADDR), or
// QUERY_ROUTE on kernels without it. ep.mu and the source are held.
func (ep *endpoint) queryDevice(fd int, b *ucma.Buffers) (guid uint64, index uint32, port uint8, err error) {
	if d := ep.dev; d.guid != 0 {
		return d.guid, d.index, d.port, nil
	}
	guid, index, port, err = ep.queryKernel(fd, b)
	if err == nil && guid != 0 {
		ep.dev = devRef{guid: guid, index: index, port: port}
	}
	return guid, index, port, err
}

// queryKernel runs QUERY (ADDR) or QUERY_ROUTE for queryDevice.
func (ep *endpoint) queryKernel(fd int, b *ucma.Buffers) (guid uint64, index uint32, port uint8, err error) {
	if ep.f.afib() {
		resp, err := b.Exec(fd, &ucma.Query{ID: ep.handle, Option: ucma.QueryAddr})
		if err == nil {
			var q ucma.QueryAddrResp
			_ = q.Decode(resp)
			return q.NodeGUID, q.IBDevIndex, q.PortNum, nil
		}
		if !ep.f.fallback(err) {
			return 0, 0, 0, err
		}
	}
	resp, err := b.Exec(fd, &ucma.QueryRoute{ID: ep.handle})
	if err != nil {
		return 0, 0, 0, err
	}
	var q ucma.QueryRouteResp
	_ = q.Decode(resp)
	return q.NodeGUID, q.IBDevIndex, q.PortNum, nil
}

// depth resolves one read depth: 0xFF (or, on accept, the value the
// request asked for) becomes min(value, cap); other values above the cap
// are EINVAL on PS_TCP ids, as ucma_valid_param says.
func depth(v, cap, requested uint8, accept bool, ps fabric.PortSpace) (uint8, error) {
	switch {
	case v == 0xFF && accept:
		return min(requested, cap), nil
	case v == 0xFF:
		return cap, nil
	case accept && v == requested:
		return min(v, cap), nil
	case v > cap && ps == fabric.PSTCP:
		return 0, einval("read depth %d above the device cap %d", v, cap)
	}
	return v, nil
}

// connParam builds the kernel's conn_param (valid=1) from p, with the
// read depths resolved against the device caps.
func (ep *endpoint) connParam(fd int, b *ucma.Buffers, p *fabric.ConnParam, accept bool) (ucma.ConnParam, error) {
	var cp ucma.ConnParam
	guid, index, _, err := ep.queryDevice(fd, b)
	if err != nil {
		return cp, err
	}
	ird, ord := ep.f.rdCaps(guid, index)
	if cp.ResponderResources, err = depth(p.ResponderResources, ird, ep.reqIRD, accept, ep.ps); err != nil {
		return cp, err
	}
	if cp.InitiatorDepth, err = depth(p.InitiatorDepth, ord, ep.reqORD, accept, ep.ps); err != nil {
		return cp, err
	}
	if err := cp.SetPrivateData(p.PrivateData); err != nil {
		return cp, err
	}
	cp.QPNum, cp.SRQ = p.QPNum, p.SRQ
	cp.FlowControl, cp.RetryCount, cp.RNRRetryCount = p.FlowControl, p.RetryCount, p.RNRRetryCount
	cp.Valid = 1
	return cp, nil
}

// Connect implements fabric.Endpoint: CONNECT with valid=1 and the
// application's QP number (there is no QP in this fabric). RC ids get
// CONNECT_RESPONSE and must call Establish; UD ids get ESTABLISHED with
// the peer's UD parameters.
func (ep *endpoint) Connect(p *fabric.ConnParam) error {
	return ep.do("connect", func(_ *source, fd int, b *ucma.Buffers) error {
		cp, err := ep.connParam(fd, b, p, false)
		if err != nil {
			return err
		}
		if q := ep.vqp; q != nil {
			cp.QPNum, cp.SRQ = q.num, 0
		}
		c := ucma.Connect{ID: ep.handle, Param: cp}
		_, err = b.Exec(fd, &c)
		return err
	})
}

// Accept implements fabric.Endpoint: ACCEPT with valid=1, which also sets the
// kernel id's uid so its events are delivered from now on.
func (ep *endpoint) Accept(uid uint64, p *fabric.ConnParam) error {
	if uid == 0 {
		return einval("accept: uid 0")
	}
	return ep.do("accept", func(s *source, fd int, b *ucma.Buffers) error {
		cp, err := ep.connParam(fd, b, p, true)
		if err != nil {
			return err
		}
		q := ep.vqp
		if q != nil {
			cp.QPNum, cp.SRQ = q.num, 0
			if !q.ud {
				// As rdma_accept: RTR and RTS before the reply goes out.
				if err := q.connect(fd, b, cp.ResponderResources, cp.InitiatorDepth); err != nil {
					q.fail()
					return err
				}
			}
		}
		a := ucma.Accept{UID: uid, ID: ep.handle, Param: cp}
		if _, err := b.Exec(fd, &a); err != nil {
			if q != nil && !q.ud {
				q.fail()
			}
			return err
		}
		if q != nil && !q.ud && !q.vd.iwarp {
			q.toRTS()
		}
		// s.mu is held: no GET_EVENT can run before the uid is known.
		if ep.uid != 0 && s.byUID[ep.uid] == ep {
			delete(s.byUID, ep.uid)
		}
		ep.uid = uid
		s.byUID[uid] = ep
		return nil
	})
}

// Reject implements fabric.Endpoint: REJECT with reason 0, which the kernel
// sends as 28 (consumer defined); a UD request gets a SIDR REP with
// status 2 (IB_SIDR_REJECT), which the peer sees as UNREACHABLE status 2.
func (ep *endpoint) Reject(pd []byte) error {
	return ep.do("reject", func(_ *source, fd int, b *ucma.Buffers) error {
		r := ucma.Reject{ID: ep.handle}
		if err := r.SetPrivateData(pd); err != nil {
			return err
		}
		_, err := b.Exec(fd, &r)
		return err
	})
}

// Establish implements fabric.Endpoint: after CONNECT_RESPONSE, ACCEPT with
// valid=0 (and the uid unchanged) makes the kernel send the RTU, as
// librdmacm's rdma_establish does through ucma_process_conn_resp.
func (ep *endpoint) Establish() error {
	return ep.do("establish", func(_ *source, fd int, b *ucma.Buffers) error {
		_, err := b.Exec(fd, &ucma.Accept{ID: ep.handle})
		return err
	})
}

// Disconnect implements fabric.Endpoint.
func (ep *endpoint) Disconnect() error {
	return ep.do("disconnect", func(_ *source, fd int, b *ucma.Buffers) error {
		if q := ep.vqp; q != nil {
			q.shutdown() // as rdma_disconnect: ERR on IB, SQD on iWARP
		}
		_, err := b.Exec(fd, &ucma.Disconnect{ID: ep.handle})
		return err
	})
}

// SetOption implements fabric.Endpoint: the bytes go to the kernel as they
// are, staged in pinned memory.
func (ep *endpoint) SetOption(level fabric.OptionLevel, name fabric.OptionName, val []byte) error {
	return ep.do("set_option", func(_ *source, fd int, b *ucma.Buffers) error {
		return b.SetOption(fd, ep.handle, level, name, val)
	})
}

// Join implements fabric.Endpoint: JOIN_MCAST (JOIN_IP_MCAST on kernels
// without it, which cannot join send-only) with uid echoed in the join's
// MULTICAST_JOIN or MULTICAST_ERROR.
func (ep *endpoint) Join(uid uint64, group netip.Addr, sendOnly bool) error {
	a, err := sockaddr(netip.AddrPortFrom(group, 0))
	if err != nil {
		return fmt.Errorf("kernel: join %s: %w", group, err)
	}
	var flags uint16
	if sendOnly {
		flags = ucma.JoinSendOnlyFullMember
	}
	var ip ucma.Command
	if !sendOnly {
		ip = &ucma.JoinIPMcast{UID: uid, ID: ep.handle, Addr: a}
	}
	return ep.do("join_multicast", func(_ *source, fd int, b *ucma.Buffers) error {
		if _, dup := ep.joins[group]; dup {
			return fmt.Errorf("already joined %s: %w", group, syscall.EADDRINUSE)
		}
		resp, err := ep.afCall(fd, b, &ucma.JoinMcast{UID: uid, ID: ep.handle, Addr: a, Flags: flags}, ip)
		if err != nil {
			return err
		}
		mc, _ := ucma.DecodeUint32Resp(resp)
		if ep.joins == nil {
			ep.joins = make(map[netip.Addr]uint32)
		}
		ep.joins[group] = mc
		// Before s.mu is released: the join's event may be next.
		ep.f.addJoin(mc, mcJoin{group: group, ep: ep, sendOnly: sendOnly})
		return nil
	})
}

// Leave implements fabric.Endpoint: LEAVE_MCAST; the kernel drops the join's
// queued events.
func (ep *endpoint) Leave(group netip.Addr) error {
	return ep.do("leave_multicast", func(_ *source, fd int, b *ucma.Buffers) error {
		mc, ok := ep.joins[group]
		if !ok {
			return fmt.Errorf("%s not joined: %w", group, syscall.EADDRNOTAVAIL)
		}
		delete(ep.joins, group)
		ep.f.dropJoin(mc)
		ep.detachLocked(group)
		_, err := b.Exec(fd, &ucma.LeaveMcast{ID: mc})
		return err
	})
}

// Notify implements fabric.Endpoint: e is the ibv_event_type the kernel
// expects (IBV_EVENT_COMM_EST is the one it acts on).
func (ep *endpoint) Notify(t fabric.AsyncEvent) error {
	return ep.do("notify", func(_ *source, fd int, b *ucma.Buffers) error {
		_, err := b.Exec(fd, &ucma.Notify{ID: ep.handle, Event: uint32(t)})
		return err
	})
}

// InitQPAttr implements Endpoint.
func (ep *endpoint) InitQPAttr(state QPState) (QPAttr, error) {
	var q QPAttr
	err := ep.do("init_qp_attr", func(_ *source, fd int, b *ucma.Buffers) error {
		resp, err := b.Exec(fd, &ucma.InitQPAttr{ID: ep.handle, QPState: uint32(state)})
		if err != nil {
			return err
		}
		return q.Decode(resp)
	})
	return q, err
}

// Query implements fabric.Endpoint: QUERY (ADDR and PATH), or QUERY_ROUTE on
// kernels without it, mapped to a Route (device by node GUID and index,
// path MTU from the first path record). The kernel does not report a
// gateway.
func (ep *endpoint) Query() (fabric.Route, error) {
	var ri routeInfo
	err := ep.do("query", func(_ *source, fd int, b *ucma.Buffers) error {
		if ep.f.afib() {
			resp, err := b.Exec(fd, &ucma.Query{ID: ep.handle, Option: ucma.QueryAddr})
			if err == nil {
				var q ucma.QueryAddrResp
				_ = q.Decode(resp)
				ri.fromAddr(&q)
				resp, err = b.Exec(fd, &ucma.Query{ID: ep.handle, Option: ucma.QueryPath})
				if err != nil {
					return err
				}
				var paths [1]ucma.PathData
				num, n, _ := ucma.DecodeQueryPath(resp, paths[:])
				ri.numPaths = num
				if n > 0 {
					ri.mtu = paths[0].Record.MTU
				}
				return nil
			}
			if !ep.f.fallback(err) {
				return err
			}
		}
		resp, err := b.Exec(fd, &ucma.QueryRoute{ID: ep.handle})
		if err != nil {
			return err
		}
		var q ucma.QueryRouteResp
		_ = q.Decode(resp)
		ri.fromRoute(&q)
		return nil
	})
	if err != nil {
		return fabric.Route{}, err
	}
	var dev string
	if d, ok := ep.f.device(ri.guid, ri.index); ok {
		dev = d.Name
	}
	return ri.route(dev), nil
}

// Destroy implements fabric.Endpoint: DESTROY_ID, after which the kernel has
// dropped the id's queued events (and rejected the connection requests
// queued on a listener). The kernel's events_reported is not needed: the
// library counts delivered events itself.
func (ep *endpoint) Destroy() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed {
		return nil
	}
	ep.destroyed = true
	s := ep.src
	err := s.exec(func(fd int, b *ucma.Buffers) error {
		_, err := b.Exec(fd, &ucma.DestroyID{ID: ep.handle})
		s.forgetLocked(ep)
		return err
	})
	ep.dropJoinsLocked()
	ep.releaseFormerLocked()
	if err == errClosed {
		return nil // closing the fd destroyed the kernel id
	}
	if err != nil {
		return fmt.Errorf("kernel: destroy_id: %w", err)
	}
	return nil
}

// gone marks an endpoint of a closed source destroyed (the kernel
// destroyed its id when the fd closed), and reports whether it was (an
// endpoint migrated away meanwhile is not).
func (ep *endpoint) gone(s *source) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.src != s || ep.destroyed {
		return false
	}
	ep.destroyed = true
	ep.dropJoinsLocked()
	ep.releaseFormerLocked()
	return true
}

// releaseFormerLocked lets the sources a destroyed listener left close:
// the kernel destroyed the requests still queued for it with it.
func (ep *endpoint) releaseFormerLocked() {
	for _, f := range ep.former {
		f.release()
	}
	ep.former = nil
}

func (ep *endpoint) dropJoinsLocked() {
	for g, mc := range ep.joins {
		ep.f.dropJoin(mc)
		delete(ep.joins, g)
	}
}
