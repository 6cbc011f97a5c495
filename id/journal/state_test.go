package journal_test

import (
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id/journal"
)

func TestCallAllowed(t *testing.T) {
	type c = struct {
		s    journal.State
		call journal.Call
		qp   fabric.QPType
		ok   bool
		next journal.State
	}
	for _, tc := range []c{
		{journal.StateIdle, journal.CallBind, fabric.RC, true, journal.StateAddrBound},
		{journal.StateAddrBound, journal.CallBind, fabric.RC, false, 0},       // bind twice
		{journal.StateIdle, journal.CallConnect, fabric.RC, false, 0},         // connect before route
		{journal.StateAddrResolved, journal.CallConnect, fabric.RC, false, 0}, // still before route
		{journal.StateRouteResolved, journal.CallConnect, fabric.RC, true, journal.StateConnect},
		{journal.StateIdle, journal.CallResolveRoute, fabric.RC, false, 0}, // route before addr
		{journal.StateAddrResolved, journal.CallResolveRoute, fabric.RC, true, journal.StateRouteQuery},
		{journal.StateIdle, journal.CallListen, fabric.RC, true, journal.StateListen}, // auto-bind
		{journal.StateAddrBound, journal.CallListen, fabric.RC, true, journal.StateListen},
		{journal.StateAddrResolved, journal.CallListen, fabric.RC, false, 0}, // cannot auto-bind
		{journal.StateListen, journal.CallListen, fabric.RC, false, 0},
		{journal.StateConnectRequest, journal.CallAccept, fabric.RC, true, journal.StateAccept},
		{journal.StateConnectRequest, journal.CallAccept, fabric.UD, true, journal.StateEstablished}, // no passive event
		{journal.StateListen, journal.CallAccept, fabric.RC, false, 0},
		{journal.StateConnectRequest, journal.CallReject, fabric.RC, true, journal.StateFailed},
		{journal.StateConnectResponse, journal.CallEstablish, fabric.RC, true, journal.StateEstablished},
		{journal.StateEstablished, journal.CallEstablish, fabric.RC, false, 0},
		{journal.StateEstablished, journal.CallDisconnect, fabric.RC, true, journal.StateEstablished},
		{journal.StateRouteResolved, journal.CallDisconnect, fabric.RC, false, 0},
		{journal.StateConnectRequest, journal.CallDisconnect, fabric.RC, true, journal.StateConnectRequest}, // a no-op, as the kernel's (diffkernel probes)
		{journal.StateConnectRequest, journal.CallDisconnect, fabric.UD, true, journal.StateConnectRequest},
		{journal.StateFailed, journal.CallDisconnect, fabric.RC, true, journal.StateFailed},
		{journal.StateListen, journal.CallDisconnect, fabric.RC, false, 0},  // siw refuses it (rxe takes it on a bound listener)
		{journal.StateConnect, journal.CallDisconnect, fabric.RC, false, 0}, // siw waits for the connect's end (rxe takes it)
		{journal.StateIdle, journal.CallDisconnect, fabric.RC, false, 0},    // no CM id yet: both refuse it
		{journal.StateAddrResolved, journal.CallDisconnect, fabric.RC, false, 0},
		{journal.StateAddrBound, journal.CallJoin, fabric.UD, true, journal.StateAddrBound},
		{journal.StateAddrResolved, journal.CallJoin, fabric.UD, true, journal.StateAddrResolved},
		{journal.StateRouteResolved, journal.CallJoin, fabric.UD, false, 0}, // rdma_join_multicast: ADDR_BOUND or ADDR_RESOLVED
		{journal.StateIdle, journal.CallJoin, fabric.UD, false, 0},          // not bound to a device
		{journal.StateCanceled, journal.CallConnect, fabric.RC, false, 0},
		{journal.StateCanceled, journal.CallDestroy, fabric.RC, true, journal.StateDestroyed},
		{journal.StateDestroyed, journal.CallDestroy, fabric.RC, false, 0},
		{journal.StateFailed, journal.CallConnect, fabric.RC, false, 0}, // a rejected id is spent
	} {
		next, ok := journal.CallAllowed(tc.s, tc.call, tc.qp)
		if ok != tc.ok || (ok && next != tc.next) {
			t.Errorf("CallAllowed(%s, %s, %s) = %s, %v; want %s, %v", tc.s, tc.call, tc.qp, next, ok, tc.next, tc.ok)
		}
	}
}

func TestAfterEventAndModel(t *testing.T) {
	rc, ud := fabric.RC, fabric.UD
	for _, tc := range []struct {
		s     journal.State
		t     fabric.EventType
		qp    fabric.QPType
		legal bool
		next  journal.State
	}{
		{journal.StateAddrQuery, fabric.EventAddrResolved, rc, true, journal.StateAddrResolved},
		{journal.StateAddrQuery, fabric.EventAddrError, rc, true, journal.StateAddrBound},
		{journal.StateRouteQuery, fabric.EventRouteResolved, rc, true, journal.StateRouteResolved},
		{journal.StateAddrResolved, fabric.EventRouteResolved, rc, true, journal.StateRouteResolved}, // IB_PATH
		{journal.StateRouteQuery, fabric.EventRouteError, rc, true, journal.StateAddrResolved},
		{journal.StateListen, fabric.EventConnectRequest, rc, true, journal.StateListen},
		{journal.StateConnect, fabric.EventEstablished, rc, true, journal.StateEstablished},
		{journal.StateConnect, fabric.EventConnectResponse, rc, true, journal.StateConnectResponse},
		{journal.StateConnect, fabric.EventRejected, rc, true, journal.StateFailed},
		{journal.StateConnect, fabric.EventUnreachable, rc, true, journal.StateFailed},
		{journal.StateConnect, fabric.EventConnectError, rc, true, journal.StateFailed},
		{journal.StateConnectResponse, fabric.EventRejected, rc, true, journal.StateFailed},
		{journal.StateConnectResponse, fabric.EventDisconnected, rc, true, journal.StateDisconnected}, // a local Disconnect
		{journal.StateConnectRequest, fabric.EventRejected, rc, true, journal.StateFailed},            // IB: the active side gave up
		{journal.StateAccept, fabric.EventEstablished, rc, true, journal.StateEstablished},
		{journal.StateAccept, fabric.EventDisconnected, rc, true, journal.StateDisconnected}, // IB: DREQ before RTU
		{journal.StateAccept, fabric.EventUnreachable, rc, true, journal.StateFailed},        // IB: REP timed out
		{journal.StateEstablished, fabric.EventDisconnected, rc, true, journal.StateDisconnected},
		{journal.StateDisconnected, fabric.EventTimewaitExit, rc, true, journal.StateDisconnected},
		{journal.StateEstablished, fabric.EventDeviceRemoval, rc, true, journal.StateDeviceRemoval},
		{journal.StateIdle, fabric.EventDeviceRemoval, rc, true, journal.StateDeviceRemoval},
		{journal.StateDeviceRemoval, fabric.EventUser, rc, true, journal.StateDeviceRemoval},
		{journal.StateAddrBound, fabric.EventMulticastJoin, ud, true, journal.StateAddrBound},
		{journal.StateEstablished, fabric.EventMulticastError, ud, true, journal.StateEstablished},
		{journal.StateEstablished, fabric.EventAddrChange, rc, true, journal.StateEstablished},
		{journal.StateCanceled, fabric.EventEstablished, rc, true, journal.StateCanceled}, // a late answer
		// UD: SIDR outcomes only, no connection events.
		{journal.StateConnect, fabric.EventEstablished, ud, true, journal.StateEstablished},
		{journal.StateConnect, fabric.EventUnreachable, ud, true, journal.StateFailed},
		{journal.StateConnect, fabric.EventAddrError, ud, true, journal.StateFailed}, // Q_Key mismatch
		// Illegal: the model flags them and the fold leaves the state.
		{journal.StateConnect, fabric.EventAddrError, rc, false, journal.StateConnect},
		{journal.StateConnect, fabric.EventRejected, ud, false, journal.StateConnect},
		{journal.StateConnect, fabric.EventConnectResponse, ud, false, journal.StateConnect},
		{journal.StateEstablished, fabric.EventDisconnected, ud, false, journal.StateEstablished},
		{journal.StateAccept, fabric.EventEstablished, ud, false, journal.StateAccept},
		{journal.StateConnectRequest, fabric.EventEstablished, rc, false, journal.StateConnectRequest},
		{journal.StateConnectRequest, fabric.EventDisconnected, rc, false, journal.StateConnectRequest},
		{journal.StateConnectResponse, fabric.EventEstablished, rc, false, journal.StateConnectResponse},
		{journal.StateEstablished, fabric.EventRejected, rc, false, journal.StateEstablished},
		{journal.StateFailed, fabric.EventRejected, rc, false, journal.StateFailed},
		{journal.StateFailed, fabric.EventTimewaitExit, rc, false, journal.StateFailed},
		{journal.StateIdle, fabric.EventEstablished, rc, false, journal.StateIdle},
		{journal.StateIdle, fabric.EventMulticastJoin, ud, false, journal.StateIdle},
		{journal.StateAddrQuery, fabric.EventRouteResolved, rc, false, journal.StateAddrQuery},
		{journal.StateDisconnected, fabric.EventEstablished, rc, false, journal.StateDisconnected},
		{journal.StateDisconnected, fabric.EventDisconnected, rc, false, journal.StateDisconnected},
		{journal.StateListen, fabric.EventDisconnected, rc, false, journal.StateListen},
		{journal.StateDeviceRemoval, fabric.EventDeviceRemoval, rc, false, journal.StateDeviceRemoval},
		{journal.StateDeviceRemoval, fabric.EventDisconnected, rc, false, journal.StateDeviceRemoval},
		{journal.StateDestroyed, fabric.EventUser, rc, false, journal.StateDestroyed},
		{journal.StateAddrQuery, fabric.EventAddrInfoResolved, rc, false, journal.StateAddrQuery},
	} {
		if got := journal.EventAllowed(tc.s, tc.t, tc.qp); got != tc.legal {
			t.Errorf("EventAllowed(%s, %s, %s) = %v, want %v", tc.s, tc.t, tc.qp, got, tc.legal)
		}
		if got := journal.AfterEvent(tc.s, tc.t, tc.qp); got != tc.next {
			t.Errorf("AfterEvent(%s, %s, %s) = %s, want %s", tc.s, tc.t, tc.qp, got, tc.next)
		}
	}
}

// TestModelInvariants checks properties of the whole model, state by state.
func TestModelInvariants(t *testing.T) {
	outcomes := map[fabric.EventType]bool{fabric.EventEstablished: true, fabric.EventRejected: true, fabric.EventUnreachable: true,
		fabric.EventConnectError: true, fabric.EventConnectResponse: true, fabric.EventAddrError: true}
	for s := journal.State(0); s <= journal.StateDestroyed; s++ {
		for _, qp := range []fabric.QPType{fabric.RC, fabric.UD} {
			for e := fabric.EventType(0); e < fabric.NumEventTypes; e++ {
				legal, next := journal.EventAllowed(s, e, qp), journal.AfterEvent(s, e, qp)
				if !legal && next != s {
					t.Errorf("illegal %s in %s (%s) moves to %s", e, s, qp, next)
				}
				if s == journal.StateDestroyed && legal {
					t.Errorf("%s allowed after destroy", e)
				}
				// A connect ends in one outcome: none is legal after another.
				if legal && outcomes[e] && s == journal.StateConnect && next != journal.StateConnect {
					for o := range outcomes {
						if journal.EventAllowed(next, o, qp) && !(next == journal.StateConnectResponse && o == fabric.EventRejected) &&
							!(next == journal.StateConnectResponse && o == fabric.EventUnreachable) {
							t.Errorf("%s after %s (%s): a connect has one outcome", o, e, qp)
						}
					}
				}
				// DISCONNECTED only after ESTABLISHED or a request, once.
				if e == fabric.EventDisconnected && legal && s != journal.StateEstablished && s != journal.StateAccept &&
					s != journal.StateConnectResponse && s != journal.StateCanceled {
					t.Errorf("DISCONNECTED allowed in %s (%s)", s, qp)
				}
			}
		}
	}
}

func TestStateAndCallNames(t *testing.T) {
	if journal.StateRouteResolved.String() != "ROUTE_RESOLVED" || journal.CallResolveAddr.String() != "resolve_addr" {
		t.Fatalf("names: %s %s", journal.StateRouteResolved, journal.CallResolveAddr)
	}
	if journal.State(200).String() != "State(200)" {
		t.Fatalf("unknown state name %s", journal.State(200))
	}
}
