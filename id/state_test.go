package id_test

import (
	"testing"

	"github.com/cmrt/cmrt/id"
)

func TestCallAllowed(t *testing.T) {
	type c = struct {
		s    id.State
		call id.Call
		qp   id.QPType
		ok   bool
		next id.State
	}
	for _, tc := range []c{
		{id.StateIdle, id.CallBind, id.RC, true, id.StateAddrBound},
		{id.StateAddrBound, id.CallBind, id.RC, false, 0},       // bind twice
		{id.StateIdle, id.CallConnect, id.RC, false, 0},         // connect before route
		{id.StateAddrResolved, id.CallConnect, id.RC, false, 0}, // still before route
		{id.StateRouteResolved, id.CallConnect, id.RC, true, id.StateConnect},
		{id.StateIdle, id.CallResolveRoute, id.RC, false, 0}, // route before addr
		{id.StateAddrResolved, id.CallResolveRoute, id.RC, true, id.StateRouteQuery},
		{id.StateIdle, id.CallListen, id.RC, true, id.StateListen}, // auto-bind
		{id.StateAddrBound, id.CallListen, id.RC, true, id.StateListen},
		{id.StateAddrResolved, id.CallListen, id.RC, false, 0}, // cannot auto-bind
		{id.StateListen, id.CallListen, id.RC, false, 0},
		{id.StateConnectRequest, id.CallAccept, id.RC, true, id.StateAccept},
		{id.StateConnectRequest, id.CallAccept, id.UD, true, id.StateEstablished}, // no passive event
		{id.StateListen, id.CallAccept, id.RC, false, 0},
		{id.StateConnectRequest, id.CallReject, id.RC, true, id.StateFailed},
		{id.StateConnectResponse, id.CallEstablish, id.RC, true, id.StateEstablished},
		{id.StateEstablished, id.CallEstablish, id.RC, false, 0},
		{id.StateEstablished, id.CallDisconnect, id.RC, true, id.StateEstablished},
		{id.StateRouteResolved, id.CallDisconnect, id.RC, false, 0},
		{id.StateAddrBound, id.CallJoin, id.UD, true, id.StateAddrBound},
		{id.StateIdle, id.CallJoin, id.UD, false, 0}, // not bound to a device
		{id.StateCanceled, id.CallConnect, id.RC, false, 0},
		{id.StateCanceled, id.CallDestroy, id.RC, true, id.StateDestroyed},
		{id.StateDestroyed, id.CallDestroy, id.RC, false, 0},
		{id.StateFailed, id.CallConnect, id.RC, false, 0}, // a rejected id is spent
	} {
		next, ok := id.CallAllowed(tc.s, tc.call, tc.qp)
		if ok != tc.ok || (ok && next != tc.next) {
			t.Errorf("CallAllowed(%s, %s, %s) = %s, %v; want %s, %v", tc.s, tc.call, tc.qp, next, ok, tc.next, tc.ok)
		}
	}
}

func TestAfterEventAndModel(t *testing.T) {
	for _, tc := range []struct {
		s     id.State
		t     id.EventType
		legal bool
		next  id.State
	}{
		{id.StateAddrQuery, id.EventAddrResolved, true, id.StateAddrResolved},
		{id.StateAddrQuery, id.EventAddrError, true, id.StateAddrBound},
		{id.StateRouteQuery, id.EventRouteResolved, true, id.StateRouteResolved},
		{id.StateRouteQuery, id.EventRouteError, true, id.StateAddrResolved},
		{id.StateConnect, id.EventEstablished, true, id.StateEstablished},
		{id.StateConnect, id.EventConnectResponse, true, id.StateConnectResponse},
		{id.StateConnect, id.EventRejected, true, id.StateFailed},
		{id.StateConnect, id.EventUnreachable, true, id.StateFailed},
		{id.StateAccept, id.EventEstablished, true, id.StateEstablished},
		{id.StateEstablished, id.EventDisconnected, true, id.StateDisconnected},
		{id.StateEstablished, id.EventDeviceRemoval, true, id.StateDeviceRemoval},
		{id.StateConnect, id.EventAddrError, true, id.StateFailed}, // UD Q_Key mismatch
		// Illegal: the model flags them and the fold leaves the state.
		{id.StateIdle, id.EventEstablished, false, id.StateIdle},
		{id.StateAddrQuery, id.EventRouteResolved, false, id.StateAddrQuery},
		{id.StateDisconnected, id.EventEstablished, false, id.StateDisconnected},
		{id.StateListen, id.EventDisconnected, false, id.StateListen},
	} {
		if got := id.EventAllowed(tc.s, tc.t); got != tc.legal {
			t.Errorf("EventAllowed(%s, %s) = %v, want %v", tc.s, tc.t, got, tc.legal)
		}
		if got := id.AfterEvent(tc.s, tc.t); got != tc.next {
			t.Errorf("AfterEvent(%s, %s) = %s, want %s", tc.s, tc.t, got, tc.next)
		}
	}
}

func TestStateAndCallNames(t *testing.T) {
	if id.StateRouteResolved.String() != "ROUTE_RESOLVED" || id.CallResolveAddr.String() != "resolve_addr" {
		t.Fatalf("names: %s %s", id.StateRouteResolved, id.CallResolveAddr)
	}
	if id.State(200).String() != "State(200)" {
		t.Fatalf("unknown state name %s", id.State(200))
	}
}
