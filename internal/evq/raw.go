package evq

import (
	"net/netip"

	"github.com/cmrt/cmrt/fabric"
)

// This file is the one list of fabric.RawEvent's fields that the hot path
// copies or inspects field by field: the queue's pop (Move), a reactor's
// mailbox items (Copy) and id.Brief (Brief) all go through params, so a
// field added to RawEvent is added here once. TestParamsEveryField (and
// id's TestBriefEveryField, reactor's TestCopyRawEveryField) set every
// field in turn through reflection and fail until it is.

// Copy copies *r into *d but for the bytes of r's private data past its
// length (d keeps its own there): an event without private data copies
// its first two cache lines instead of all six (376 bytes).
func Copy(d, r *fabric.RawEvent) {
	d.UID, d.Type, d.Status, d.Arg, d.PrivateDataLen = r.UID, r.Type, r.Status, r.Arg, r.PrivateDataLen
	params(d, r, true)
	n := min(max(r.PrivateDataLen, 0), len(r.PrivateData))
	copy(d.PrivateData[:n], r.PrivateData[:n])
}

// Brief reports whether a raw event carries nothing but its uid, type,
// status and argument: every other field zero, no private data (bytes
// past PrivateDataLen do not count).
func Brief(r *fabric.RawEvent) bool {
	if r.PrivateDataLen != 0 {
		return false
	}
	return params(r, r, false)
}

// Move is the queue's pop: Copy, then the pointers r holds cleared (its
// other bytes are left as they are: a push overwrites the whole slot), so
// that the slot neither keeps them reachable nor is written past the
// lines the copy read.
func Move(d, r *fabric.RawEvent) {
	Copy(d, r)
	r.Child, r.Group = nil, netip.Addr{}
}

// params reports whether every field of *r but UID, Type, Status, Arg,
// PrivateDataLen and PrivateData (what an event carries besides those: the
// new endpoint, UD, connection and multicast parameters) is zero, and with
// copy set copies them into *d (without, d is not written: Brief passes r).
func params(d, r *fabric.RawEvent, copy bool) bool {
	z := setEndpoint(&d.Child, r.Child, copy)
	z = set32(&d.QPNum, r.QPNum, copy) && z
	z = set32(&d.QKey, r.QKey, copy) && z
	z = setAH(&d.AH, &r.AH, copy) && z
	z = set8(&d.ResponderResources, r.ResponderResources, copy) && z
	z = set8(&d.InitiatorDepth, r.InitiatorDepth, copy) && z
	z = set8(&d.FlowControl, r.FlowControl, copy) && z
	z = set8(&d.RetryCount, r.RetryCount, copy) && z
	z = set8(&d.RNRRetryCount, r.RNRRetryCount, copy) && z
	z = set8(&d.SRQ, r.SRQ, copy) && z
	z = setAddr(&d.Group, r.Group, copy) && z
	return z
}

// The setters of params, one per field type (not one generic function:
// its comparisons went through the runtime's, 4x slower): each stores v
// in *d if copy is set, and reports whether v is zero.

func set8(d *uint8, v uint8, copy bool) bool {
	if copy {
		*d = v
	}
	return v == 0
}

func set32(d *uint32, v uint32, copy bool) bool {
	if copy {
		*d = v
	}
	return v == 0
}

func setAH(d, v *fabric.AHAttr, copy bool) bool {
	if copy {
		*d = *v
	}
	return *v == fabric.AHAttr{}
}

func setEndpoint(d *fabric.Endpoint, v fabric.Endpoint, copy bool) bool {
	if copy {
		*d = v
	}
	return v == nil
}

func setAddr(d *netip.Addr, v netip.Addr, copy bool) bool {
	if copy {
		*d = v
	}
	return v == netip.Addr{}
}
