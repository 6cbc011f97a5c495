package callseq

import (
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// ProgressCalls returns the calls that move an id in state st along a
// connection's life-cycle (some twice, to weigh them).
func ProgressCalls(st id.State) []journal.Call {
	switch st {
	case id.StateIdle:
		return []journal.Call{journal.CallResolveAddr, journal.CallResolveAddr, journal.CallBind, journal.CallListen}
	case id.StateAddrBound:
		return []journal.Call{journal.CallResolveAddr, journal.CallListen, journal.CallJoin}
	case id.StateAddrResolved:
		return []journal.Call{journal.CallResolveRoute, journal.CallResolveRoute, journal.CallJoin}
	case id.StateRouteResolved:
		return []journal.Call{journal.CallConnect}
	case id.StateListen:
		return []journal.Call{journal.CallGetRequest}
	case id.StateConnectRequest:
		return []journal.Call{journal.CallAccept, journal.CallAccept, journal.CallReject}
	case id.StateConnectResponse:
		return []journal.Call{journal.CallEstablish, journal.CallDisconnect}
	case id.StateEstablished, id.StateAccept:
		return []journal.Call{journal.CallDisconnect}
	}
	return nil
}

// Outcomes returns the events that answer call c on an id of QP type qp
// when c waits for one (nil when it does not).
func Outcomes(c journal.Call, qp id.QPType) []id.EventType {
	switch c {
	case journal.CallResolveAddr:
		return []id.EventType{id.EventAddrResolved, id.EventAddrError}
	case journal.CallResolveRoute:
		return []id.EventType{id.EventRouteResolved, id.EventRouteError}
	case journal.CallConnect:
		if qp == id.UD {
			return []id.EventType{id.EventEstablished, id.EventUnreachable, id.EventAddrError}
		}
		return []id.EventType{id.EventEstablished, id.EventRejected, id.EventUnreachable, id.EventConnectError, id.EventConnectResponse}
	case journal.CallAccept:
		return []id.EventType{id.EventEstablished, id.EventRejected, id.EventUnreachable, id.EventDisconnected}
	case journal.CallDisconnect:
		return []id.EventType{id.EventDisconnected}
	case journal.CallJoin:
		return []id.EventType{id.EventMulticastJoin, id.EventMulticastError}
	}
	return nil
}

// Blocks reports whether call c on a synchronous id of QP type qp in state
// st waits for an event (librdmacm's ucma_complete, or rdma_get_request).
func Blocks(c journal.Call, st id.State, qp id.QPType) bool {
	switch c {
	case journal.CallResolveAddr, journal.CallResolveRoute, journal.CallConnect, journal.CallJoin, journal.CallGetRequest:
		return true
	case journal.CallAccept:
		return qp == id.RC
	case journal.CallDisconnect:
		// Only where the id's DISCONNECTED answers it: an RC id whose
		// connection is up or coming up (a UD id has none).
		return qp == id.RC && (st == id.StateConnectResponse || st == id.StateAccept || st == id.StateEstablished)
	}
	return false
}

// MaxPrivateData returns how many bytes of private data call c
// (CallConnect, CallAccept or CallReject) may carry on an id of QP type qp,
// as package id checks them (its own helper is unexported).
func MaxPrivateData(c journal.Call, qp id.QPType) int {
	switch c {
	case journal.CallConnect:
		if qp == id.UD {
			return id.MaxPrivateDataSIDRREQ
		}
		return id.MaxPrivateDataREQ
	case journal.CallAccept:
		if qp == id.UD {
			return id.MaxPrivateDataSIDRREP
		}
		return id.MaxPrivateDataREP
	default:
		if qp == id.UD {
			return id.MaxPrivateDataSIDRREP
		}
		return id.MaxPrivateDataREJ
	}
}
