package evq

import (
	"net/netip"

	"github.com/cmrt/cmrt/fabric"
)

// This file holds the hot path's field-by-field code for fabric.RawEvent:
// a reactor's mailbox items (Copy, through reactor's copyRaw) and
// id.Brief (Brief). Copy and Brief each name every field (a generic list
// serving both ran 4x the instructions of a plain copy);
// TestParamsEveryField sets every field of RawEvent in turn, through
// reflection, and fails for either until a field added to RawEvent is
// added to both.

// Copy copies *r into *d but for the bytes of r's private data past its
// length (d keeps its own there): an event without private data copies
// its first two cache lines instead of all six (376 bytes).
func Copy(d, r *fabric.RawEvent) {
	d.UID, d.Type, d.Status, d.Child = r.UID, r.Type, r.Status, r.Child
	d.QPNum, d.QKey, d.AH = r.QPNum, r.QKey, r.AH
	d.ResponderResources, d.InitiatorDepth, d.FlowControl = r.ResponderResources, r.InitiatorDepth, r.FlowControl
	d.RetryCount, d.RNRRetryCount, d.SRQ = r.RetryCount, r.RNRRetryCount, r.SRQ
	d.Group, d.Arg, d.PrivateDataLen = r.Group, r.Arg, r.PrivateDataLen
	n := min(max(r.PrivateDataLen, 0), len(r.PrivateData))
	copy(d.PrivateData[:n], r.PrivateData[:n])
}

// Brief reports whether a raw event carries nothing but its uid, type,
// status and argument: every other field zero, no private data (bytes
// past PrivateDataLen do not count).
func Brief(r *fabric.RawEvent) bool {
	// Every field but UID, Type, Status, Arg and PrivateData.
	return r.PrivateDataLen == 0 && r.Child == nil && r.QPNum == 0 && r.QKey == 0 &&
		r.AH == (fabric.AHAttr{}) && r.ResponderResources == 0 && r.InitiatorDepth == 0 &&
		r.FlowControl == 0 && r.RetryCount == 0 && r.RNRRetryCount == 0 && r.SRQ == 0 &&
		r.Group == (netip.Addr{})
}
