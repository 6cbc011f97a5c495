package id

import (
	"context"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/id/journal"
)

// run performs a call that produces no event: it checks the state, runs fn
// with the id locked, moves the state when fn succeeds and journals the call.
func (i *ID) run(c journal.Call, fn func() error) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	next, err := i.checkCall(c)
	if err == nil {
		if err = fn(); err == nil {
			i.state = next
		}
	}
	i.record(c, err)
	return wrap(c.String(), err)
}

// runAsync performs a call whose outcome is an event: like run, and then, on
// a synchronous id, acknowledges the previous event and waits for the
// outcome (ucma_complete).
func (i *ID) runAsync(ctx context.Context, c journal.Call, fn func() error) error {
	i.mu.Lock()
	next, err := i.checkCall(c)
	if err == nil {
		if err = fn(); err == nil {
			i.state = next
		} else if c == journal.CallResolveAddr && i.state == StateIdle {
			i.boundByFailedResolve()
		}
	}
	i.record(c, err)
	sync := i.sync
	var old *Event
	if err == nil && sync {
		old = i.takeEvent()
	}
	i.mu.Unlock()
	if err != nil {
		return wrap(c.String(), err)
	}
	if !sync {
		return nil
	}
	ackTaken(old)
	return i.complete(ctx, c)
}

// boundByFailedResolve records the bind a failed ResolveAddr made: the
// kernel's rdma_resolve_addr binds an idle id before it resolves
// (cma_bind_addr), so a resolution that then fails (no route) leaves it
// bound, in ADDR_BOUND. i.mu is held.
func (i *ID) boundByFailedResolve() {
	if r, err := i.ep.Query(); err != nil || !r.Src.IsValid() {
		return
	}
	i.state = StateAddrBound
	i.record(journal.CallBind, nil)
}

// Bind binds the id to a local address and port, as rdma_bind_addr. Port 0
// picks a free port. Errors: EINVAL (invalid address, already bound),
// EADDRINUSE, EADDRNOTAVAIL (the address is not local), ENODEV.
func (i *ID) Bind(addr netip.AddrPort) error {
	if !addr.IsValid() {
		return errorf("bind_addr", syscall.EINVAL, "no address")
	}
	return i.run(journal.CallBind, func() error { return i.ep.Bind(addr) })
}

// ResolveAddr resolves dst (and src, if valid) to a device and local
// address, as rdma_resolve_addr: ADDR_RESOLVED or ADDR_ERROR follows. An
// unbound id is bound to the source address the routing table picks.
func (i *ID) ResolveAddr(src, dst netip.AddrPort, timeout time.Duration) error {
	return i.ResolveAddrContext(context.Background(), src, dst, timeout)
}

// ResolveAddrContext is ResolveAddr with a context bounding the wait of a
// synchronous id.
func (i *ID) ResolveAddrContext(ctx context.Context, src, dst netip.AddrPort, timeout time.Duration) error {
	if !dst.IsValid() {
		return errorf("resolve_addr", syscall.EINVAL, "no destination address")
	}
	if src.IsValid() && src.Addr().Unmap().Is4() != dst.Addr().Unmap().Is4() {
		return errorf("resolve_addr", syscall.EINVAL, "source %s and destination %s differ in family", src, dst)
	}
	return i.runAsync(ctx, journal.CallResolveAddr, func() error { return i.ep.ResolveAddr(src, dst, timeout) })
}

// ResolveRoute resolves the route to the resolved destination, as
// rdma_resolve_route: ROUTE_RESOLVED or ROUTE_ERROR follows.
func (i *ID) ResolveRoute(timeout time.Duration) error {
	return i.ResolveRouteContext(context.Background(), timeout)
}

// ResolveRouteContext is ResolveRoute with a context bounding the wait of a
// synchronous id.
func (i *ID) ResolveRouteContext(ctx context.Context, timeout time.Duration) error {
	return i.runAsync(ctx, journal.CallResolveRoute, func() error { return i.ep.ResolveRoute(timeout) })
}

// MaxBacklog is the backlog a listener gets when asked for 0, a negative
// number or more than this (net.rdma_ucm.max_backlog).
const MaxBacklog = 1024

// Listen starts listening for connection requests, as rdma_listen. An
// unbound id binds to the IPv4 wildcard address first. CONNECT_REQUEST
// events then report new ids on the id's channel.
func (i *ID) Listen(backlog int) error {
	if backlog <= 0 || backlog > MaxBacklog {
		backlog = MaxBacklog
	}
	return i.run(journal.CallListen, func() error { return i.ep.Listen(backlog) })
}

// defaultConnParam is what rdma_connect uses without a parameter.
var defaultConnParam = ConnParam{
	ResponderResources: MaxResponderResources,
	InitiatorDepth:     MaxInitiatorDepth,
	RetryCount:         7,
	RNRRetryCount:      7,
}

// Connect starts connecting to the resolved destination, as rdma_connect.
// RC ids get ESTABLISHED (or CONNECT_RESPONSE when the application drives
// its own QP), REJECTED, UNREACHABLE or CONNECT_ERROR; UD ids get
// ESTABLISHED with UD parameters, or UNREACHABLE. A nil p uses the
// defaults. Private data over the limit is EINVAL.
//
// The software fabric never reports CONNECT_RESPONSE: it moves the id's QP
// through its states itself, and an RC id with no QP is ESTABLISHED too
// (Establish is never needed there, and is EINVAL). Its failures are
// REJECTED with -ECONNRESET (the peer rejected) or -ECONNREFUSED (nothing
// listens), UNREACHABLE with -ETIMEDOUT, and CONNECT_ERROR for anything
// else (for example -EPROTO when the peer breaks the MPA exchange), as the
// kernel maps iWARP's; unlike the kernel, it reports -EHOSTUNREACH and
// -ENETUNREACH as UNREACHABLE too. The kernel
// fabric reports CONNECT_RESPONSE for an id with no QP, and the statuses
// of the device's CM (InfiniBand reject reasons on IB and RoCE).
//
// On the software fabric, a connection from the id's explicitly bound port
// to the same destination that still exists (TIME_WAIT) is EADDRNOTAVAIL;
// a port the fabric chose is changed for another instead.
func (i *ID) Connect(p *ConnParam) error {
	return i.ConnectContext(context.Background(), p)
}

// ConnectContext is Connect with a context bounding the wait of a
// synchronous id.
func (i *ID) ConnectContext(ctx context.Context, p *ConnParam) error {
	param := getParam()
	defer putParam(param)
	*param = defaultConnParam
	if p != nil {
		*param = *p
	}
	if err := checkPrivateData("connect", journal.CallConnect, i.qpType, param.PrivateData); err != nil {
		return err
	}
	return i.runAsync(ctx, journal.CallConnect, func() error { return i.ep.Connect(param) })
}

// paramPool holds the copies of ConnParam that Connect and Accept hand to
// the fabric: passed through its interface, a copy on the stack would be
// moved to the heap, one allocation per call. The fabric does not keep
// the pointer past the call (it copies what it needs).
var paramPool = sync.Pool{New: func() any { return new(ConnParam) }}

func getParam() *ConnParam { return paramPool.Get().(*ConnParam) }

// putParam clears p, which must not keep the caller's private data alive,
// and returns it to the pool.
func putParam(p *ConnParam) {
	*p = ConnParam{}
	paramPool.Put(p)
}

// Accept accepts the connection request that created this id, as
// rdma_accept. A nil p answers with what the request asked for. On RC ids
// ESTABLISHED follows (a synchronous id waits for it); on UD ids the reply
// is sent and Accept returns, with no event.
func (i *ID) Accept(p *ConnParam) error {
	return i.AcceptContext(context.Background(), p)
}

// AcceptContext is Accept with a context bounding the wait of a synchronous
// RC id.
func (i *ID) AcceptContext(ctx context.Context, p *ConnParam) error {
	param := getParam()
	defer putParam(param)
	if p != nil {
		*param = *p
	}
	if err := checkPrivateData("accept", journal.CallAccept, i.qpType, param.PrivateData); err != nil {
		return err
	}
	fn := func() error {
		if p == nil {
			param.ResponderResources, param.InitiatorDepth = i.reqIRD, i.reqORD
		}
		return i.ep.Accept(i.uid, param)
	}
	if i.qpType == UD {
		// A UD accept sends the reply and returns; it acknowledges the
		// current event of a synchronous id.
		err := i.run(journal.CallAccept, fn)
		if err == nil {
			i.mu.Lock()
			old := i.takeEvent()
			i.mu.Unlock()
			ackTaken(old)
		}
		return err
	}
	return i.runAsync(ctx, journal.CallAccept, fn)
}

// Reject rejects the connection request that created this id, as
// rdma_reject, sending privateData to the peer.
//
// On RC the peer gets REJECTED (status -ECONNRESET on the software fabric,
// the IB reject reason 28, IB_CM_REJ_CONSUMER_DEFINED, on the kernel
// fabric). On UD the peer gets UNREACHABLE with status 2 (IB_SIDR_REJECT),
// as the kernel reports it; status 1 (IB_SIDR_UNSUPPORTED) means no UD
// listener on the port. A synchronous peer's Connect then fails with errno
// 2, the positive status taken as the errno as librdmacm does: ENOENT,
// whose text is "no such file or directory".
func (i *ID) Reject(privateData []byte) error {
	if err := checkPrivateData("reject", journal.CallReject, i.qpType, privateData); err != nil {
		return err
	}
	return i.run(journal.CallReject, func() error { return i.ep.Reject(privateData) })
}

// Establish completes a connection after CONNECT_RESPONSE, as
// rdma_establish, when the application drives its own QP.
func (i *ID) Establish() error {
	return i.run(journal.CallEstablish, func() error { return i.ep.Establish() })
}

// Disconnect disconnects the connection, as rdma_disconnect: both sides get
// DISCONNECTED (once per connection, whichever side disconnects first). On a
// synchronous id it waits for the id's DISCONNECTED, unless it was already
// returned by an earlier call. On an id whose request is not yet answered,
// or whose connection attempt ended (FAILED), and on a UD id that connected
// or was born from a request, it does nothing and succeeds, as the
// kernel's: there is no connection to end, nothing is reported (a
// synchronous id does not wait), and a request can still be accepted or
// rejected. On the software fabric (iWARP) the local
// DISCONNECTED comes at once; on InfiniBand and RoCE the kernel reports it
// when the peer answers (it disconnects too) or the request times out, so
// two synchronous peers must disconnect concurrently. TIMEWAIT_EXIT follows
// on InfiniBand and RoCE only: the software fabric, as iWARP in the
// kernel, never reports it.
func (i *ID) Disconnect() error {
	return i.DisconnectContext(context.Background())
}

// DisconnectContext is Disconnect with a context bounding the wait of a
// synchronous id.
func (i *ID) DisconnectContext(ctx context.Context) error {
	i.mu.Lock()
	due := disconnectReported(i.state, i.qpType)
	i.mu.Unlock()
	if !due {
		return i.run(journal.CallDisconnect, func() error { return i.ep.Disconnect() })
	}
	return i.runAsync(ctx, journal.CallDisconnect, func() error { return i.ep.Disconnect() })
}

// Notify reports an asynchronous QP event to the CM, as rdma_notify; the
// CM uses AsyncCommEst to complete a connection whose RTU was lost.
func (i *ID) Notify(e AsyncEvent) error {
	return i.run(journal.CallNotify, func() error { return i.ep.Notify(e) })
}

// SetOption sets an option, as rdma_set_option. val holds the option's bytes
// in host order; a wrong length is EINVAL and an unknown option ENOSYS.
// OptionIBPath takes struct ibv_path_data records and, as the kernel's,
// uses the first flagged exactly GMP, PRIMARY and BIDIRECTIONAL (none is
// EINVAL), in ADDR_RESOLVED only (elsewhere EINVAL): it then reports
// ROUTE_RESOLVED in place of ResolveRoute.
func (i *ID) SetOption(level OptionLevel, name OptionName, val []byte) error {
	if err := checkOption(level, name, val); err != nil {
		return err
	}
	return i.run(journal.CallSetOption, func() error {
		if err := checkOptionState(i.state, i.qpType, level, name, val); err != nil {
			return err
		}
		return i.ep.SetOption(level, name, val)
	})
}

// SetTOS sets the type of service (RDMA_OPTION_ID_TOS).
func (i *ID) SetTOS(tos uint8) error {
	return i.SetOption(OptionLevelID, OptionTOS, []byte{tos})
}

// SetReuseAddr allows binding a port other ids use (RDMA_OPTION_ID_REUSEADDR).
func (i *ID) SetReuseAddr(on bool) error {
	return i.SetOption(OptionLevelID, OptionReuseAddr, intOption(on))
}

// SetAFOnly restricts an IPv6 wildcard id to IPv6 (RDMA_OPTION_ID_AFONLY).
func (i *ID) SetAFOnly(on bool) error {
	return i.SetOption(OptionLevelID, OptionAFOnly, intOption(on))
}

// SetAckTimeout sets the ACK timeout exponent: the transport waits
// 4.096µs·2^n for an acknowledgement (RDMA_OPTION_ID_ACK_TIMEOUT). RC only.
func (i *ID) SetAckTimeout(n uint8) error {
	return i.SetOption(OptionLevelID, OptionAckTimeout, []byte{n})
}

// disconnectReported reports whether a disconnect in state s of an id of
// QP type t is answered by the id's DISCONNECTED: only an RC id whose
// connection is up or coming up. Elsewhere (a request not yet answered, an
// attempt that ended, an id already disconnected, any UD id: a SIDR
// exchange leaves no connection) rdma_disconnect reports nothing.
func disconnectReported(s journal.State, t QPType) bool {
	return t == RC && (s == journal.StateConnectResponse || s == journal.StateAccept || s == journal.StateEstablished)
}
