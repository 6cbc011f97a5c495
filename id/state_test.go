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
		{id.StateAddrResolved, id.CallJoin, id.UD, true, id.StateAddrResolved},
		{id.StateRouteResolved, id.CallJoin, id.UD, false, 0}, // rdma_join_multicast: ADDR_BOUND or ADDR_RESOLVED
		{id.StateIdle, id.CallJoin, id.UD, false, 0},          // not bound to a device
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
	rc, ud := id.RC, id.UD
	for _, tc := range []struct {
		s     id.State
		t     id.EventType
		qp    id.QPType
		legal bool
		next  id.State
	}{
		{id.StateAddrQuery, id.EventAddrResolved, rc, true, id.StateAddrResolved},
		{id.StateAddrQuery, id.EventAddrError, rc, true, id.StateAddrBound},
		{id.StateRouteQuery, id.EventRouteResolved, rc, true, id.StateRouteResolved},
		{id.StateAddrResolved, id.EventRouteResolved, rc, true, id.StateRouteResolved}, // IB_PATH
		{id.StateRouteQuery, id.EventRouteError, rc, true, id.StateAddrResolved},
		{id.StateListen, id.EventConnectRequest, rc, true, id.StateListen},
		{id.StateConnect, id.EventEstablished, rc, true, id.StateEstablished},
		{id.StateConnect, id.EventConnectResponse, rc, true, id.StateConnectResponse},
		{id.StateConnect, id.EventRejected, rc, true, id.StateFailed},
		{id.StateConnect, id.EventUnreachable, rc, true, id.StateFailed},
		{id.StateConnect, id.EventConnectError, rc, true, id.StateFailed},
		{id.StateConnectResponse, id.EventRejected, rc, true, id.StateFailed},
		{id.StateConnectResponse, id.EventDisconnected, rc, true, id.StateDisconnected}, // a local Disconnect
		{id.StateConnectRequest, id.EventRejected, rc, true, id.StateFailed},            // IB: the active side gave up
		{id.StateAccept, id.EventEstablished, rc, true, id.StateEstablished},
		{id.StateAccept, id.EventDisconnected, rc, true, id.StateDisconnected}, // IB: DREQ before RTU
		{id.StateAccept, id.EventUnreachable, rc, true, id.StateFailed},        // IB: REP timed out
		{id.StateEstablished, id.EventDisconnected, rc, true, id.StateDisconnected},
		{id.StateDisconnected, id.EventTimewaitExit, rc, true, id.StateDisconnected},
		{id.StateEstablished, id.EventDeviceRemoval, rc, true, id.StateDeviceRemoval},
		{id.StateIdle, id.EventDeviceRemoval, rc, true, id.StateDeviceRemoval},
		{id.StateDeviceRemoval, id.EventUser, rc, true, id.StateDeviceRemoval},
		{id.StateAddrBound, id.EventMulticastJoin, ud, true, id.StateAddrBound},
		{id.StateEstablished, id.EventMulticastError, ud, true, id.StateEstablished},
		{id.StateEstablished, id.EventAddrChange, rc, true, id.StateEstablished},
		{id.StateCanceled, id.EventEstablished, rc, true, id.StateCanceled}, // a late answer
		// UD: SIDR outcomes only, no connection events.
		{id.StateConnect, id.EventEstablished, ud, true, id.StateEstablished},
		{id.StateConnect, id.EventUnreachable, ud, true, id.StateFailed},
		{id.StateConnect, id.EventAddrError, ud, true, id.StateFailed}, // Q_Key mismatch
		// Illegal: the model flags them and the fold leaves the state.
		{id.StateConnect, id.EventAddrError, rc, false, id.StateConnect},
		{id.StateConnect, id.EventRejected, ud, false, id.StateConnect},
		{id.StateConnect, id.EventConnectResponse, ud, false, id.StateConnect},
		{id.StateEstablished, id.EventDisconnected, ud, false, id.StateEstablished},
		{id.StateAccept, id.EventEstablished, ud, false, id.StateAccept},
		{id.StateConnectRequest, id.EventEstablished, rc, false, id.StateConnectRequest},
		{id.StateConnectRequest, id.EventDisconnected, rc, false, id.StateConnectRequest},
		{id.StateConnectResponse, id.EventEstablished, rc, false, id.StateConnectResponse},
		{id.StateEstablished, id.EventRejected, rc, false, id.StateEstablished},
		{id.StateFailed, id.EventRejected, rc, false, id.StateFailed},
		{id.StateFailed, id.EventTimewaitExit, rc, false, id.StateFailed},
		{id.StateIdle, id.EventEstablished, rc, false, id.StateIdle},
		{id.StateIdle, id.EventMulticastJoin, ud, false, id.StateIdle},
		{id.StateAddrQuery, id.EventRouteResolved, rc, false, id.StateAddrQuery},
		{id.StateDisconnected, id.EventEstablished, rc, false, id.StateDisconnected},
		{id.StateDisconnected, id.EventDisconnected, rc, false, id.StateDisconnected},
		{id.StateListen, id.EventDisconnected, rc, false, id.StateListen},
		{id.StateDeviceRemoval, id.EventDeviceRemoval, rc, false, id.StateDeviceRemoval},
		{id.StateDeviceRemoval, id.EventDisconnected, rc, false, id.StateDeviceRemoval},
		{id.StateDestroyed, id.EventUser, rc, false, id.StateDestroyed},
		{id.StateAddrQuery, id.EventAddrInfoResolved, rc, false, id.StateAddrQuery},
	} {
		if got := id.EventAllowed(tc.s, tc.t, tc.qp); got != tc.legal {
			t.Errorf("EventAllowed(%s, %s, %s) = %v, want %v", tc.s, tc.t, tc.qp, got, tc.legal)
		}
		if got := id.AfterEvent(tc.s, tc.t, tc.qp); got != tc.next {
			t.Errorf("AfterEvent(%s, %s, %s) = %s, want %s", tc.s, tc.t, tc.qp, got, tc.next)
		}
	}
}

// TestModelInvariants checks properties of the whole model, state by state.
func TestModelInvariants(t *testing.T) {
	outcomes := map[id.EventType]bool{id.EventEstablished: true, id.EventRejected: true, id.EventUnreachable: true,
		id.EventConnectError: true, id.EventConnectResponse: true, id.EventAddrError: true}
	for s := id.State(0); s <= id.StateDestroyed; s++ {
		for _, qp := range []id.QPType{id.RC, id.UD} {
			for e := id.EventType(0); e < id.NumEventTypes; e++ {
				legal, next := id.EventAllowed(s, e, qp), id.AfterEvent(s, e, qp)
				if !legal && next != s {
					t.Errorf("illegal %s in %s (%s) moves to %s", e, s, qp, next)
				}
				if s == id.StateDestroyed && legal {
					t.Errorf("%s allowed after destroy", e)
				}
				// A connect ends in one outcome: none is legal after another.
				if legal && outcomes[e] && s == id.StateConnect && next != id.StateConnect {
					for o := range outcomes {
						if id.EventAllowed(next, o, qp) && !(next == id.StateConnectResponse && o == id.EventRejected) &&
							!(next == id.StateConnectResponse && o == id.EventUnreachable) {
							t.Errorf("%s after %s (%s): a connect has one outcome", o, e, qp)
						}
					}
				}
				// DISCONNECTED only after ESTABLISHED or a request, once.
				if e == id.EventDisconnected && legal && s != id.StateEstablished && s != id.StateAccept &&
					s != id.StateConnectResponse && s != id.StateCanceled {
					t.Errorf("DISCONNECTED allowed in %s (%s)", s, qp)
				}
			}
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
