package id

import "fmt"

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
// with EINVAL, as the kernel's state checks do.
func CallAllowed(s State, c Call, t QPType) (State, bool) {
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
		if t == UD {
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
		}
		return s, false
	case CallJoin:
		return s, s == StateAddrBound || s == StateAddrResolved || s == StateRouteResolved
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
// in state s: the model of legal event sequences (rdma_cm(7) state diagram
// and librdmacm's flows). Fuzzers use it as the oracle.
func EventAllowed(s State, t EventType) bool {
	switch t {
	case EventAddrResolved:
		return s == StateAddrQuery
	case EventAddrError:
		// Also while connecting: the kernel reports a UD peer's Q_Key
		// mismatch as ADDR_ERROR (cma_sidr_rep_handler).
		return s == StateAddrQuery || s == StateConnect
	case EventRouteResolved:
		return s == StateRouteQuery || s == StateAddrResolved // IB_PATH sets a route directly
	case EventRouteError:
		return s == StateRouteQuery
	case EventConnectRequest:
		return s == StateListen
	case EventConnectResponse:
		return s == StateConnect
	case EventEstablished:
		return s == StateConnect || s == StateAccept || s == StateConnectResponse
	case EventRejected, EventUnreachable, EventConnectError:
		return s == StateConnect || s == StateAccept || s == StateConnectResponse
	case EventDisconnected:
		switch s {
		case StateConnectRequest, StateConnectResponse, StateAccept, StateEstablished:
			return true
		}
		return false
	case EventTimewaitExit:
		return s == StateDisconnected || s == StateFailed
	case EventDeviceRemoval, EventAddrChange, EventUser:
		return s != StateDestroyed
	case EventMulticastJoin, EventMulticastError:
		return s != StateDestroyed && s != StateIdle
	}
	return false
}

// AfterEvent returns the state an id in state s enters when an event of
// type t is reported for it. Events that do not move the state leave it.
func AfterEvent(s State, t EventType) State {
	if s == StateDestroyed || s == StateCanceled {
		return s
	}
	switch t {
	case EventAddrResolved:
		if s == StateAddrQuery {
			return StateAddrResolved
		}
	case EventAddrError:
		if s == StateAddrQuery {
			return StateAddrBound
		}
		if s == StateConnect {
			return StateFailed
		}
	case EventRouteResolved:
		if s == StateRouteQuery || s == StateAddrResolved {
			return StateRouteResolved
		}
	case EventRouteError:
		if s == StateRouteQuery {
			return StateAddrResolved
		}
	case EventConnectResponse:
		if s == StateConnect {
			return StateConnectResponse
		}
	case EventEstablished:
		if s == StateConnect || s == StateAccept || s == StateConnectResponse {
			return StateEstablished
		}
	case EventRejected, EventUnreachable, EventConnectError:
		if s == StateConnect || s == StateAccept || s == StateConnectResponse {
			return StateFailed
		}
	case EventDisconnected:
		if EventAllowed(s, t) {
			return StateDisconnected
		}
	case EventDeviceRemoval:
		return StateDeviceRemoval
	}
	return s
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
		if r.Event == EventConnectRequest && r.Parent != 0 {
			return StateConnectRequest // the record of the new id
		}
		return AfterEvent(s, r.Event)
	case KindCancel:
		return StateCanceled
	}
	return s
}
