package journal

import (
	"fmt"

	"github.com/cmrt/cmrt/fabric"
)

// State is the state of an id in the rdma_cm state diagram. An id's state is
// the fold of the calls made on it and the events reported for it: see Apply.
type State uint8

// The states of an id.
const (
	// StateIdle: created, nothing done yet.
	StateIdle State = iota
	// StateAddrBound: bound to a local address (bind, or a failed resolve).
	StateAddrBound
	// StateAddrQuery: address resolution in progress.
	StateAddrQuery
	// StateAddrResolved: ADDR_RESOLVED reported.
	StateAddrResolved
	// StateRouteQuery: route resolution in progress.
	StateRouteQuery
	// StateRouteResolved: ROUTE_RESOLVED reported.
	StateRouteResolved
	// StateListen: listening for connection requests.
	StateListen
	// StateConnect: active connection in progress.
	StateConnect
	// StateConnectResponse: CONNECT_RESPONSE reported; Establish completes it.
	StateConnectResponse
	// StateConnectRequest: a passive id born from a CONNECT_REQUEST.
	StateConnectRequest
	// StateAccept: accepted, ESTABLISHED not yet reported.
	StateAccept
	// StateEstablished: connected.
	StateEstablished
	// StateDisconnected: DISCONNECTED reported.
	StateDisconnected
	// StateFailed: the connection attempt ended (rejected by either side,
	// unreachable or in error); only Destroy is useful.
	StateFailed
	// StateDeviceRemoval: DEVICE_REMOVAL reported; the id must be destroyed.
	StateDeviceRemoval
	// StateCanceled: a synchronous call was abandoned; only Destroy remains.
	StateCanceled
	// StateDestroyed: destroyed.
	StateDestroyed
	numStates
)

var stateNames = [...]string{
	"IDLE", "ADDR_BOUND", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY",
	"ROUTE_RESOLVED", "LISTEN", "CONNECT", "CONNECT_RESPONSE",
	"CONNECT_REQUEST", "ACCEPT", "ESTABLISHED", "DISCONNECTED", "FAILED",
	"DEVICE_REMOVAL", "CANCELED", "DESTROYED",
}

// String returns the state's name, e.g. "ROUTE_RESOLVED".
func (s State) String() string {
	if s < numStates {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Call names the CM calls an id records in its journal.
type Call uint8

// The calls.
const (
	CallCreate Call = iota
	CallBind
	CallResolveAddr
	CallResolveRoute
	CallListen
	CallConnect
	CallAccept
	CallReject
	CallEstablish
	CallDisconnect
	CallSetOption
	CallJoin
	CallLeave
	CallMigrate
	CallNotify
	CallGetRequest
	CallDestroy
	numCalls
)

var callNames = [...]string{
	"create", "bind", "resolve_addr", "resolve_route", "listen", "connect",
	"accept", "reject", "establish", "disconnect", "set_option", "join",
	"leave", "migrate", "notify", "get_request", "destroy",
}

// String returns the call's name as librdmacm spells it without "rdma_".
func (c Call) String() string {
	if c < numCalls {
		return callNames[c]
	}
	return fmt.Sprintf("Call(%d)", uint8(c))
}

// CallAllowed reports whether call c is legal in state s for an id of QP
// type t, and the state the id enters when it succeeds. Illegal calls fail
// with EINVAL, as the kernel's state checks do. (internal/diffkernel's
// probes make the calls it refuses on the kernel directly; where the
// kernel of one transport only takes one, the README's "Where cmrt
// differs, and why" says so.)
func CallAllowed(s State, c Call, t fabric.QPType) (State, bool) {
	if s == StateDestroyed {
		return s, false
	}
	if s == StateCanceled {
		if c == CallDestroy {
			return StateDestroyed, true
		}
		return s, false
	}
	switch c {
	case CallDestroy:
		return StateDestroyed, true
	case CallMigrate, CallSetOption, CallLeave:
		return s, true
	case CallBind:
		return StateAddrBound, s == StateIdle
	case CallResolveAddr:
		return StateAddrQuery, s == StateIdle || s == StateAddrBound
	case CallResolveRoute:
		return StateRouteQuery, s == StateAddrResolved
	case CallListen:
		return StateListen, s == StateIdle || s == StateAddrBound
	case CallConnect:
		return StateConnect, s == StateRouteResolved
	case CallAccept:
		if t == fabric.UD {
			return StateEstablished, s == StateConnectRequest
		}
		return StateAccept, s == StateConnectRequest
	case CallReject:
		return StateFailed, s == StateConnectRequest
	case CallEstablish:
		return StateEstablished, s == StateConnectResponse
	case CallDisconnect:
		switch s {
		case StateConnectResponse, StateAccept, StateEstablished, StateDisconnected:
			return s, true
		case StateConnectRequest, StateFailed:
			// A request not yet answered, an attempt that ended: the
			// kernel's rdma_disconnect finds a CM id with no connection
			// to end and returns 0 (checked on siw and rxe); nothing is
			// reported, and a request can still be answered.
			return s, true
		}
		return s, false
	case CallJoin:
		// The kernel's rdma_join_multicast takes ADDR_BOUND or
		// ADDR_RESOLVED only (not ROUTE_RESOLVED).
		return s, s == StateAddrBound || s == StateAddrResolved
	case CallNotify:
		switch s {
		case StateConnect, StateConnectResponse, StateAccept, StateEstablished:
			return s, true
		}
		return s, false
	case CallGetRequest:
		return s, s == StateListen
	case CallCreate:
		return StateIdle, false
	}
	return s, false
}

// EventAllowed reports whether an event of type t may be reported to an id
// of QP type qp in state s: the model of legal event sequences, from the
// rdma_cm(7) state diagram, the kernel's per-state gates (cma.c: address,
// route, IB CM, iWARP CM and SIDR handlers) and librdmacm's flows. Fuzzers
// and Check use it as the oracle.
//
// Per state (RC unless marked; "stays" events leave the state as it is):
//
//	ADDR_QUERY        ADDR_RESOLVED -> ADDR_RESOLVED, ADDR_ERROR -> ADDR_BOUND
//	ADDR_RESOLVED     ROUTE_RESOLVED -> ROUTE_RESOLVED (RDMA_OPTION_IB_PATH)
//	ROUTE_QUERY       ROUTE_RESOLVED -> ROUTE_RESOLVED, ROUTE_ERROR -> ADDR_RESOLVED
//	LISTEN            CONNECT_REQUEST (stays; the record of the new id is in
//	                  CONNECT_REQUEST)
//	CONNECT           ESTABLISHED, CONNECT_RESPONSE, REJECTED, UNREACHABLE,
//	                  CONNECT_ERROR; UD: ESTABLISHED, UNREACHABLE, ADDR_ERROR
//	                  (the peer's Q_Key differs)
//	CONNECT_RESPONSE  REJECTED, UNREACHABLE, DISCONNECTED (a local Disconnect;
//	                  Establish completes it, with no event)
//	CONNECT_REQUEST   REJECTED (the active side gave up: IB REJ)
//	ACCEPT            ESTABLISHED, DISCONNECTED (IB: DREQ before the RTU),
//	                  REJECTED, UNREACHABLE; UD ids never are in ACCEPT: their
//	                  accept reports nothing and moves them to ESTABLISHED
//	ESTABLISHED       DISCONNECTED; UD: nothing
//	DISCONNECTED      TIMEWAIT_EXIT (stays; once)
//	any but IDLE      MULTICAST_JOIN, MULTICAST_ERROR (stays; after a join),
//	                  ADDR_CHANGE (stays)
//	any               DEVICE_REMOVAL -> DEVICE_REMOVAL, USER (stays)
//	DEVICE_REMOVAL    USER only: the id must be destroyed
//	CANCELED          anything (stays): late answers to an abandoned call
//	DESTROYED         nothing
//
// So a connect ends in exactly one of ESTABLISHED, REJECTED, UNREACHABLE and
// CONNECT_ERROR (or CONNECT_RESPONSE, then Establish), DISCONNECTED comes at
// most once and only after ESTABLISHED or a request, and nothing follows
// DESTROY. ADDRINFO_RESOLVED and ADDRINFO_ERROR are never legal: cmrt has no
// rdma_resolve_addrinfo.
func EventAllowed(s State, t fabric.EventType, qp fabric.QPType) bool {
	_, ok := eventNext(s, t, qp)
	return ok
}

// AfterEvent returns the state an id of QP type qp in state s enters when an
// event of type t is reported for it. Events that do not move the state,
// and events the model does not allow (see EventAllowed), leave it.
func AfterEvent(s State, t fabric.EventType, qp fabric.QPType) State {
	if next, ok := eventNext(s, t, qp); ok {
		return next
	}
	return s
}

// eventNext is the model's transition function for events.
func eventNext(s State, t fabric.EventType, qp fabric.QPType) (State, bool) {
	switch s {
	case StateDestroyed:
		return s, false
	case StateCanceled:
		return s, true
	case StateDeviceRemoval:
		return s, t == fabric.EventUser
	}
	ud := qp == fabric.UD
	switch t {
	case fabric.EventAddrResolved:
		return StateAddrResolved, s == StateAddrQuery
	case fabric.EventAddrError:
		if s == StateAddrQuery {
			return StateAddrBound, true
		}
		// cma_sidr_rep_handler: a SIDR REP whose Q_Key cannot be set.
		return StateFailed, ud && s == StateConnect
	case fabric.EventRouteResolved:
		return StateRouteResolved, s == StateRouteQuery || s == StateAddrResolved
	case fabric.EventRouteError:
		return StateAddrResolved, s == StateRouteQuery
	case fabric.EventConnectRequest:
		return s, s == StateListen
	case fabric.EventConnectResponse:
		return StateConnectResponse, !ud && s == StateConnect
	case fabric.EventEstablished:
		return StateEstablished, s == StateConnect || (!ud && s == StateAccept)
	case fabric.EventUnreachable:
		return StateFailed, s == StateConnect || (!ud && (s == StateConnectResponse || s == StateAccept))
	case fabric.EventRejected:
		return StateFailed, !ud && (s == StateConnect || s == StateConnectResponse ||
			s == StateAccept || s == StateConnectRequest)
	case fabric.EventConnectError:
		return StateFailed, !ud && s == StateConnect
	case fabric.EventDisconnected:
		// CONNECT_RESPONSE: the report of the local Disconnect the model
		// allows there (the kernel's ids stay in RDMA_CM_CONNECT).
		return StateDisconnected, !ud && (s == StateAccept || s == StateEstablished || s == StateConnectResponse)
	case fabric.EventTimewaitExit:
		return s, !ud && s == StateDisconnected
	case fabric.EventDeviceRemoval:
		return StateDeviceRemoval, true
	case fabric.EventAddrChange, fabric.EventMulticastJoin, fabric.EventMulticastError:
		return s, s != StateIdle
	case fabric.EventUser:
		return s, true
	}
	return s, false
}

// Apply folds one journal record into a state: a successful call moves the
// id as CallAllowed says, a failed call leaves it, and an event moves it as
// AfterEvent says. The first record of an id (its create, or the
// CONNECT_REQUEST that made it) starts from StateIdle.
func Apply(s State, r *Record) State {
	switch r.Kind {
	case KindCall:
		if r.Status != 0 {
			return s
		}
		if r.Call == CallCreate {
			return StateIdle
		}
		if r.Call == CallGetRequest {
			return s
		}
		if next, ok := CallAllowed(s, r.Call, r.QPType); ok {
			return next
		}
		return s
	case KindEvent:
		if r.Event == fabric.EventConnectRequest && r.Parent != 0 {
			return StateConnectRequest // the record of the new id
		}
		return AfterEvent(s, r.Event, r.QPType)
	case KindCancel:
		if s == StateDestroyed {
			return s
		}
		return StateCanceled
	}
	return s
}
