package evq

import (
	"encoding/binary"
	"net/netip"
	"reflect"
	"unsafe"

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

// Move is the queue's pop (ring.Queue.Init's move): *r copied whole into *d,
// then the pointers r holds (the new endpoint, the multicast group's)
// cleared, each only if it is set, so that the slot keeps nothing
// reachable; nothing else of r is written (most events hold no pointer:
// their slot is only read). A push overwrites the whole slot.
// TestMoveEveryField sets each field in turn.
func Move(d, r *fabric.RawEvent) {
	*d = *r
	if r.Child != nil {
		r.Child = nil
	}
	if r.Group != (netip.Addr{}) {
		r.Group = netip.Addr{}
	}
}

// Brief reports whether a raw event carries nothing but its uid, type,
// status and argument: every other field zero, no private data (bytes
// past PrivateDataLen do not count).
func Brief(r *fabric.RawEvent) bool {
	// Every field but UID, Type, Status, Arg and PrivateData.
	return r.PrivateDataLen == 0 && r.Child == nil && r.QPNum == 0 && r.QKey == 0 &&
		ahZero(&r.AH) && r.ResponderResources == 0 && r.InitiatorDepth == 0 &&
		r.FlowControl == 0 && r.RetryCount == 0 && r.RNRRetryCount == 0 && r.SRQ == 0 &&
		r.Group == (netip.Addr{})
}

// ahSize is the size of fabric.AHAttr: four words (ahZero reads them; the
// array below does not compile if that changes).
const ahSize = unsafe.Sizeof(fabric.AHAttr{})

var _ = [1]struct{}{}[ahSize-32]

// ahMask holds fabric.AHAttr's field bits, word by word as ahZero reads
// them: an AH with every field all ones, its padding left zero, read as
// four little-endian words.
var ahMask = func() (m [4]uint64) {
	var a fabric.AHAttr
	ones(reflect.ValueOf(&a).Elem())
	b := (*[ahSize]byte)(unsafe.Pointer(&a))
	for k := range m {
		m[k] = binary.LittleEndian.Uint64(b[8*k:])
	}
	return m
}()

// ones sets every bit of every field of v (a struct of unsigned integers
// and byte arrays, as fabric.AHAttr; it panics, at init, on anything else).
func ones(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for k := 0; k < v.NumField(); k++ {
			ones(v.Field(k))
		}
	case reflect.Array:
		for k := 0; k < v.Len(); k++ {
			ones(v.Index(k))
		}
	default:
		v.SetUint(^uint64(0)) // panics on a kind that is not unsigned
	}
}

// ahZero reports whether *a is fabric.AHAttr{}: its four words, padding
// masked off (ahMask), or-ed together. The comparison with a zero AHAttr
// that it replaces compared its eleven fields one by one, 48 instructions
// of the 97 of a pool's mailbox item on the reactor's loop (BENCHMARKS.md,
// "What is slow and why", finding 27); TestAHZeroEveryBit sets each bit of
// each field in turn.
func ahZero(a *fabric.AHAttr) bool {
	b := (*[ahSize]byte)(unsafe.Pointer(a))
	return binary.LittleEndian.Uint64(b[0:])&ahMask[0]|binary.LittleEndian.Uint64(b[8:])&ahMask[1]|
		binary.LittleEndian.Uint64(b[16:])&ahMask[2]|binary.LittleEndian.Uint64(b[24:])&ahMask[3] == 0
}
