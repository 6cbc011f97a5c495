package diffkernel

import (
	"syscall"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/callseq"
)

// Equivalence is a known, intended difference of flavour between the
// software fabric (iWARP semantics) and the kernel on a device of another
// transport: the comparison rewrites the kernel's items into what the
// software fabric reports instead, and counts how often each applied.
// These are not divergences: the README's "Semantics" section states each.
type Equivalence struct {
	// Name is the entry's name in reports.
	Name string
	// Flavour is the kernel side's flavour it applies to.
	Flavour Flavour
	// Kernel and Soft say what each reports.
	Kernel, Soft string
	// Why is the reason.
	Why string
}

// The equivalence table.
var (
	eqRejectReason = Equivalence{Name: "ib-reject-reason", Flavour: IB,
		Kernel: "REJECTED 28 (IB_CM_REJ_CONSUMER_DEFINED)", Soft: "REJECTED -104 (-ECONNRESET)",
		Why: "a peer's rdma_reject: IB carries the REJ reason, cma_iw_handler maps an iWARP MPA reject to -ECONNRESET; the software fabric is iWARP"}
	eqNoListener = Equivalence{Name: "ib-no-listener", Flavour: IB,
		Kernel: "REJECTED 8 (IB_CM_REJ_INVALID_SERVICE_ID)", Soft: "REJECTED -111 (-ECONNREFUSED)",
		Why: "nobody listens on the port: the IB CM answers the REQ with REJ reason 8, an iWARP connect is refused by the peer's TCP"}
	eqConnectResponse = Equivalence{Name: "ib-connect-response", Flavour: IB,
		Kernel: "CONNECT_RESPONSE, then establish", Soft: "ESTABLISHED",
		Why: "ids here have no QP: the kernel reports CONNECT_RESPONSE and librdmacm's rdma_establish (the driver calls it at once) sends the RTU; the software fabric moves its ids' QPs itself and reports ESTABLISHED"}
	eqTimewait = Equivalence{Name: "ib-timewait-exit", Flavour: IB,
		Kernel: "TIMEWAIT_EXIT after DISCONNECTED", Soft: "nothing",
		Why: "the IB CM's time-wait; iWARP has none, and the software fabric, like the kernel's iWARP CM, never reports it"}
	eqAbandoned = Equivalence{Name: "ib-abandoned-request", Flavour: IB,
		Kernel: "accept or reject EINVAL, once the peer gave the request up", Soft: "accept or reject ECONNRESET",
		Why: "IB: the peer's REJ (its id was destroyed) took the CM id out of REQ_RCVD, so ib_send_cm_rep/rej fail EINVAL; " +
			"iWARP: the connection is gone and siw_accept/siw_reject answer ECONNRESET for an endpoint no longer holding an MPA request"}
	eqNotify = Equivalence{Name: "ib-notify", Flavour: IB,
		Kernel: "notify EINVAL (CONNECT, CONNECT_RESPONSE) or EISCONN (ESTABLISHED)", Soft: "notify 0",
		Why: "IB's rdma_notify hands COMM_EST to the IB CM, which takes it only while a REP waits for its RTU; " +
			"iWARP's returns 0 whenever the id has a CM id, doing nothing"}
	eqDestroyRace = Equivalence{Name: "listener-destroy-race",
		Kernel: "REJECTED -ECONNREFUSED (IB: 8), or -ECONNRESET (IB: 28)", Soft: "the other",
		Why: "a connect whose request is under way when its listener is destroyed: the request reached the listener " +
			"first (the destroy rejects it: -ECONNRESET, IB 28) or found nobody listening (-ECONNREFUSED, IB 8), " +
			"as the two sides' timings fall; either transport"}
	eqDisconnectDREP = Equivalence{Name: "ib-disconnect-drep", Flavour: IB,
		Kernel: "the disconnecting side's DISCONNECTED when the peer disconnects too (DREP) or the DREQ times out",
		Soft:   "the disconnecting side's DISCONNECTED at once",
		Why:    "IB's DREQ/DREP handshake: cma_ib_handler reports DISCONNECTED on DREP; an iWARP close is reported when it is made"}
)

// Equivalences lists the table, for reports and documentation.
var Equivalences = []*Equivalence{&eqRejectReason, &eqNoListener, &eqConnectResponse, &eqTimewait, &eqAbandoned,
	&eqNotify, &eqDisconnectDREP, &eqDestroyRace}

// normalize rewrites a kernel slot's items of flavour fl into what the
// software fabric reports, and says which equivalences applied. soft are
// the software fabric's items for the slot, for the rules that depend on
// what it did.
func normalize(fl Flavour, is, soft Items) (Items, []*Equivalence) {
	if fl != IB {
		return is, nil
	}
	var used []*Equivalence
	out := make(Items, 0, len(is))
	for k := 0; k < len(is); k++ {
		it := is[k]
		switch {
		case it.Kind == journal.KindEvent && it.Event == id.EventTimewaitExit:
			used = append(used, &eqTimewait)
			continue
		case it.Kind == journal.KindEvent && it.Event == id.EventRejected && it.Status == 28:
			it.Status = -int32(syscall.ECONNRESET)
			used = append(used, &eqRejectReason)
		case it.Kind == journal.KindEvent && it.Event == id.EventRejected && it.Status == 8:
			it.Status = -int32(syscall.ECONNREFUSED)
			used = append(used, &eqNoListener)
		case it.Kind == journal.KindEvent && it.Event == id.EventConnectResponse && it.Status == 0 &&
			k+1 < len(is) && is[k+1].Kind == journal.KindCall && is[k+1].Auto && is[k+1].Status == 0:
			it.Event, it.State = id.EventEstablished, is[k+1].State
			k++ // the driver's establish
			used = append(used, &eqConnectResponse)
		case it.Kind == journal.KindCall && (it.Call == journal.CallAccept || it.Call == journal.CallReject) &&
			it.Status == int32(syscall.EINVAL) && hasCall(soft, it.Call, syscall.ECONNRESET):
			it.Status = int32(syscall.ECONNRESET)
			used = append(used, &eqAbandoned)
		case it.Kind == journal.KindCall && it.Call == journal.CallNotify &&
			(it.Status == int32(syscall.EINVAL) || it.Status == int32(syscall.EISCONN)) && hasCall(soft, journal.CallNotify, 0):
			it.Status = 0
			used = append(used, &eqNotify)
		}
		out = append(out, it)
	}
	return out, used
}

// Known is a documented divergence: cmrt differs from the kernel on
// purpose, or the kernel fabric cannot do what the software fabric does.
// README's "Where cmrt differs, and why" lists each with the sequence that
// shows it. A sequence that runs into one is counted as documented and
// compared no further.
type Known struct {
	// Name is the entry's name in reports and in the README.
	Name string
	// Why is the reason, in a sentence.
	Why string
	// Match recognizes the divergence.
	Match func(m *Match) bool
}

// Match is what a documented divergence is recognized from: the
// divergence, with the sequence and both sides' epochs up to it.
type Match struct {
	Flavour Flavour
	Div     *Divergence
	Seq     callseq.Seq
	// Soft and Kernel are the epochs so far, the divergent one last.
	Soft, Kernel []Epoch
}

// call returns the status of the last call c in items, and whether there
// is one.
func call(is Items, c journal.Call) (int32, bool) {
	st, ok := int32(0), false
	for _, it := range is {
		if it.Kind == journal.KindCall && it.Call == c {
			st, ok = it.Status, true
		}
	}
	return st, ok
}

// hasCall reports whether items hold call c with errno e (0: success).
func hasCall(is Items, c journal.Call, e syscall.Errno) bool {
	for _, it := range is {
		if it.Kind == journal.KindCall && it.Call == c && it.Status == int32(e) {
			return true
		}
	}
	return false
}

// event returns the first event t in items, and whether there is one.
func event(is Items, t id.EventType) (Item, bool) {
	for _, it := range is {
		if it.Kind == journal.KindEvent && it.Event == t {
			return it, true
		}
	}
	return Item{}, false
}

// anyEvent reports whether some slot of e has an event t.
func anyEvent(e Epoch, t id.EventType) bool {
	for _, is := range e.Slots {
		if _, ok := event(is, t); ok {
			return true
		}
	}
	return false
}

// opFails reports whether the divergence's operation failed with e on the
// kernel and not so on the software fabric.
func opFails(d *Divergence, e syscall.Errno) bool {
	k, okK := call(d.KernelEpoch.Slots[d.Op.Slot], d.Op.Call)
	s, okS := call(d.SoftEpoch.Slots[d.Op.Slot], d.Op.Call)
	return okK && okS && k == int32(e) && s != int32(e)
}

// probeTaken reports whether the divergence is a probe of call c the
// kernel of flavour fl took in one of states.
func probeTaken(m *Match, fl Flavour, c journal.Call, states ...id.State) bool {
	d := m.Div
	if m.Flavour != fl || d.What != "probe" || d.Op.Call != c {
		return false
	}
	for _, st := range states {
		if d.ProbeState == st {
			return true
		}
	}
	return false
}

// Documented lists the documented divergences.
var Documented = []*Known{
	{
		Name: "iwarp-connect-needs-qp",
		Why: "an iWARP CM connects a QP: without one (the kernel fabric has none) iw_cm_connect " +
			"finds no QP for the number given and the kernel answers EINVAL; the software fabric connects ids without a QP",
		Match: func(m *Match) bool {
			return m.Flavour == IWARP && m.Div.Op.Call == journal.CallConnect && opFails(m.Div, syscall.EINVAL)
		},
	},
	{
		Name: "iwarp-accept-needs-qp",
		Why: "an iWARP CM accepts onto a QP: without one iw_cm_accept finds none, the kernel answers EINVAL " +
			"and rejects the request (the peer gets REJECTED -ECONNRESET); the software fabric accepts ids without a QP",
		Match: func(m *Match) bool {
			return m.Flavour == IWARP && m.Div.Op.Call == journal.CallAccept && opFails(m.Div, syscall.EINVAL)
		},
	},
	{
		Name: "ib-backlog-full-drops",
		Why: "a request over a listener's backlog (requests queued and not yet read): the IB CM drops it without " +
			"an answer and keeps the requester retrying (cm_destroy_id does not reject on -ENOMEM); an iWARP CM " +
			"rejects it (iw_cm_reject: the peer gets REJECTED -ECONNRESET), and so does the software fabric",
		Match: func(m *Match) bool {
			d := m.Div
			ev, ok := event(d.SoftEpoch.Slots[d.Op.Slot], id.EventRejected)
			return m.Flavour == IB && d.Op.Call == journal.CallConnect && ok && ev.Status == -int32(syscall.ECONNRESET) &&
				len(d.KernelEpoch.Slots[d.Op.Slot]) == 1 && hasCall(d.KernelEpoch.Slots[d.Op.Slot], journal.CallConnect, 0) &&
				!anyEvent(d.KernelEpoch, id.EventConnectRequest) && !anyEvent(d.SoftEpoch, id.EventConnectRequest)
		},
	},
	{
		Name: "connect-no-route-unreachable",
		Why: "a connect to a destination resolved on the bound device's link that no route leads to: the software " +
			"fabric's TCP connect finds no route and reports UNREACHABLE -ENETUNREACH at once (as README's Connect says, " +
			"it reports the host's routing errors so); the kernel on IB sends its REQ on the link and waits for an answer " +
			"that never comes (siw's connect would fail with ENETUNREACH)",
		Match: func(m *Match) bool {
			d := m.Div
			ev, ok := event(d.SoftEpoch.Slots[d.Op.Slot], id.EventUnreachable)
			return d.Op.Call == journal.CallConnect && ok &&
				(ev.Status == -int32(syscall.ENETUNREACH) || ev.Status == -int32(syscall.EHOSTUNREACH)) &&
				!anyEvent(d.KernelEpoch, id.EventUnreachable)
		},
	},
	{
		Name: "kernel-bind-after-failed-bind",
		Why: "a bind that failed (its port in use) leaves the kernel's id holding the device it looked up " +
			"(bound_dev_if), and rdma_translate_ip then takes any address on that device unchecked: a later bind of an " +
			"address no interface has succeeds on iWARP, and fails ENODEV on RoCE (no GID for it); cmrt refuses it " +
			"with EADDRNOTAVAIL every time, as a first bind",
		Match: func(m *Match) bool {
			k, s, ok := opStatuses(m.Div, journal.CallBind)
			return ok && s == int32(syscall.EADDRNOTAVAIL) && (k == 0 || k == int32(syscall.ENODEV)) && failedBindBefore(m)
		},
	},
	{
		Name: "kernel-resolve-after-failed-bind",
		Why: "the device a failed bind looked up stays the kernel's id's (bound_dev_if, as above), and a later " +
			"resolve_addr without a source address routes through it: a destination no route leads to is taken as on " +
			"that device's link and resolved; cmrt's failed bind leaves the id as it was, with no device, and the " +
			"resolve fails ENETUNREACH, as on a new id",
		Match: func(m *Match) bool {
			k, s, ok := opStatuses(m.Div, journal.CallResolveAddr)
			return ok && k == 0 && s == int32(syscall.ENETUNREACH) && failedBindBefore(m)
		},
	},
	// Calls the model refuses that the kernel of one transport takes
	// (probes): cmrt refuses them on both, with EINVAL, before the fabric.
	{
		Name: "ib-disconnect-listener",
		Why: "IB: rdma_disconnect of a listener bound to an address returns 0, doing nothing (the DREQ and the " +
			"DREP its CM id cannot send are not errors); iWARP refuses it (iw_cm_disconnect: EINVAL in LISTEN), and so does the model",
		Match: func(m *Match) bool { return probeTaken(m, IB, journal.CallDisconnect, id.StateListen) },
	},
	{
		Name: "ib-disconnect-connecting",
		Why: "IB: rdma_disconnect while the REQ is under way returns 0 and does nothing (the connection may still " +
			"be established); iWARP's waits for the connect's end; the model refuses it",
		Match: func(m *Match) bool { return probeTaken(m, IB, journal.CallDisconnect, id.StateConnect) },
	},
	{
		Name: "ib-reject-connecting",
		Why: "IB: rdma_reject on an active id whose REQ is under way sends a REJ (ib_send_cm_rej takes REQ_SENT); " +
			"iWARP refuses it (iw_cm_reject wants a request); the model takes reject on a request's id only",
		Match: func(m *Match) bool { return probeTaken(m, IB, journal.CallReject, id.StateConnect) },
	},
	{
		Name: "ib-establish-ud-request",
		Why: "librdmacm's rdma_establish writes ACCEPT without parameters; the kernel takes that on a UD request's id " +
			"as an accept (a SIDR REP); the model takes establish after CONNECT_RESPONSE only",
		Match: func(m *Match) bool { return probeTaken(m, IB, journal.CallEstablish, id.StateConnectRequest) },
	},
	{
		Name: "iwarp-notify-any-state",
		Why: "iWARP's rdma_notify returns 0 whenever the id has a CM id (listening, a request, a failed attempt), " +
			"doing nothing; IB refuses it there (the IB CM takes COMM_EST only while a REP waits for its RTU), and so does the model",
		Match: func(m *Match) bool {
			return probeTaken(m, IWARP, journal.CallNotify, id.StateListen, id.StateConnectRequest, id.StateFailed, id.StateDisconnected)
		},
	},
	{
		Name: "kernel-listen-port-across-port-spaces",
		Why: "the kernel listens on every device an id's address covers, iWARP ones included, whatever the id's " +
			"port space: a listener of the UDP (or TCP) port space makes siw listen on that TCP port, and a listener " +
			"of the other space on the same port then fails EADDRINUSE, though rdma_cm's port spaces are apart " +
			"(rxe0's runs see it through siw0, in the same VM); cmrt keeps the port spaces apart, as rdma_cm's " +
			"documentation says",
		Match: func(m *Match) bool {
			k, s, ok := opStatuses(m.Div, journal.CallListen)
			if !ok || k != int32(syscall.EADDRINUSE) || s != 0 {
				return false
			}
			slot, seq := m.Div.Op.Slot, m.Seq[:min(len(m.Seq), len(m.Kernel))]
			ps, port := slotPS(seq, slot), boundPort(seq, slot)
			if ps == 0 || port == 0 {
				return false
			}
			for k, o := range seq {
				if o.Call == journal.CallListen && o.Slot != slot && hasCall(m.Kernel[k].Slots[o.Slot], journal.CallListen, 0) &&
					slotPS(seq, o.Slot) != ps && slotPS(seq, o.Slot) != 0 && boundPort(seq, o.Slot) == port {
					return true
				}
			}
			return false
		},
	},
	{
		Name: "ib-unread-connect-response",
		Why: "IB: an active id without a QP sends its RTU when its user, having read CONNECT_RESPONSE, calls " +
			"rdma_establish (the driver does so at once for every id whose events it reads); an id migrated to " +
			"synchronous while its connect is under way has no call waiting to read that event, so no RTU goes and " +
			"the passive side's accept gets no ESTABLISHED (its REP times out later); iWARP's initiator, the kernel's " +
			"and the software fabric's, sends its RTR without the user",
		Match: func(m *Match) bool {
			d := m.Div
			if m.Flavour != IB || d.Op.Call != journal.CallAccept {
				return false
			}
			soft, kern := d.SoftEpoch.Slots[d.Op.Slot], d.KernelEpoch.Slots[d.Op.Slot]
			if indexEvent(soft, id.EventEstablished) < 0 || indexEvent(kern, id.EventEstablished) >= 0 ||
				!hasCall(kern, journal.CallAccept, 0) {
				return false
			}
			// An active id made synchronous in CONNECT, whose answer no
			// call has read since.
			for k, o := range m.Seq[:min(len(m.Seq), len(m.Kernel))] {
				if o.Call != journal.CallMigrate || o.Chan != callseq.ChanSync {
					continue
				}
				is := m.Kernel[k].Slots[o.Slot]
				if len(is) == 0 || !hasCall(is, journal.CallMigrate, 0) || is[len(is)-1].State != id.StateConnect {
					continue
				}
				read := false
				for _, e := range m.Kernel[k+1:] {
					later := e.Slots[o.Slot]
					read = read || indexEvent(later, id.EventConnectResponse) >= 0 || indexEvent(later, id.EventEstablished) >= 0
				}
				if !read {
					return true
				}
			}
			return false
		},
	},
	{
		Name: "ib-sync-disconnect-waits-drep",
		Why: "IB: a synchronous id's Disconnect returns with its DISCONNECTED, which comes with the peer's DREP (when the " +
			"peer disconnects too) or when the DREQ times out, as librdmacm's rdma_disconnect; on iWARP, and on the software " +
			"fabric, it comes at once: the id's next call finds it still busy on the kernel",
		Match: func(m *Match) bool {
			d := m.Div
			if m.Flavour != IB || d.What != "skip" || len(m.Kernel) < 2 || len(m.Soft) == 0 ||
				m.Kernel[len(m.Kernel)-1].Skip != skipBusy || m.Soft[len(m.Soft)-1].Skip != "" {
				return false
			}
			// The id's last items before: a disconnect taken, its
			// DISCONNECTED not yet come.
			for k := len(m.Kernel) - 2; k >= 0; k-- {
				is := m.Kernel[k].Slots[d.Op.Slot]
				if len(is) == 0 {
					continue
				}
				return hasCall(is, journal.CallDisconnect, 0) && indexEvent(is, id.EventDisconnected) < 0
			}
			return false
		},
	},
}

// opStatuses returns the kernel's and the software fabric's status of the
// diverging operation, when it is call c and both sides made it.
func opStatuses(d *Divergence, c journal.Call) (kernel, soft int32, ok bool) {
	k, okK := call(d.KernelEpoch.Slots[d.Op.Slot], c)
	s, okS := call(d.SoftEpoch.Slots[d.Op.Slot], c)
	return k, s, d.Op.Call == c && okK && okS
}

// slotPS returns the port space slot was created in, 0 if no create in
// seq made it (the new id of a request).
func slotPS(seq callseq.Seq, slot int) id.PortSpace {
	for _, o := range seq {
		if o.Call == journal.CallCreate && o.Slot == slot {
			return o.PS
		}
	}
	return 0
}

// boundPort returns the port of slot's last bind in seq, 0 if none.
func boundPort(seq callseq.Seq, slot int) int {
	port := 0
	for _, o := range seq {
		if o.Call == journal.CallBind && o.Slot == slot {
			port = o.Port
		}
	}
	return port
}

// failedBindBefore reports whether a bind of the diverging operation's id
// failed on the kernel in an earlier step.
func failedBindBefore(m *Match) bool {
	for _, e := range m.Kernel[:max(len(m.Kernel)-1, 0)] {
		if st, ok := call(e.Slots[m.Div.Op.Slot], journal.CallBind); ok && st != 0 {
			return true
		}
	}
	return false
}

func matchKnown(m *Match) *Known {
	for _, k := range Documented {
		if k.Match(m) {
			return k
		}
	}
	return nil
}
