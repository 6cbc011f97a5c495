package diffkernel

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
)

// Item is what one journal record says, without what may differ between
// fabrics for no reason (handles, channel numbers, times): a call and its
// errno, an event and its status, or an abandoned call.
type Item struct {
	Kind   journal.RecordKind
	Call   journal.Call
	Event  id.EventType
	Status int32
	// Auto marks a call the driver made by itself (Establish after a
	// kernel's CONNECT_RESPONSE).
	Auto bool
	// State is the id's state after the record. It is not compared item
	// by item (the end states are); it is the fold's.
	State id.State
	// QP is the id's QP type (not compared).
	QP id.QPType
	// Parent is the listener's slot of a CONNECT_REQUEST, -1 when none or
	// unknown (not compared, not in traces).
	Parent int
}

func itemOf(r rec) Item {
	return Item{Kind: r.Kind, Call: r.Call, Event: r.Event, Status: r.Status, Auto: r.Auto, State: r.State, QP: r.QPType, Parent: r.ParentSlot}
}

// same reports whether two items say the same, states aside.
func (a Item) same(b Item) bool {
	return a.Kind == b.Kind && a.Status == b.Status && a.Auto == b.Auto &&
		(a.Kind != journal.KindCall || a.Call == b.Call) && (a.Kind != journal.KindEvent || a.Event == b.Event)
}

// String formats an item: "connect ok", "bind EADDRINUSE",
// "REJECTED -104", "establish(auto) ok", "cancel".
func (a Item) String() string {
	switch a.Kind {
	case journal.KindCall:
		s := a.Call.String()
		if a.Auto {
			s += "(auto)"
		}
		if a.Status == 0 {
			return s + " ok"
		}
		return s + " " + errnoName(a.Status)
	case journal.KindEvent:
		name := strings.TrimPrefix(a.Event.String(), "RDMA_CM_EVENT_")
		if a.Event == id.EventUser {
			name = "USER"
		}
		if a.Status == 0 {
			return name
		}
		return fmt.Sprintf("%s %d", name, a.Status)
	}
	return "cancel"
}

// errnoName names a call's errno as the C constant (EINVAL), or its
// number.
func errnoName(e int32) string {
	if n, ok := errnoNames[syscall.Errno(e)]; ok {
		return n
	}
	return "errno" + strconv.Itoa(int(e))
}

var errnoNames = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOENT: "ENOENT", syscall.EIO: "EIO", syscall.ENXIO: "ENXIO",
	syscall.EAGAIN: "EAGAIN", syscall.ENOMEM: "ENOMEM", syscall.EACCES: "EACCES", syscall.EBUSY: "EBUSY",
	syscall.ENODEV: "ENODEV", syscall.EINVAL: "EINVAL", syscall.ENOSPC: "ENOSPC", syscall.ENOSYS: "ENOSYS",
	syscall.ENODATA: "ENODATA", syscall.EPROTO: "EPROTO", syscall.EOPNOTSUPP: "EOPNOTSUPP",
	syscall.EADDRINUSE: "EADDRINUSE", syscall.EADDRNOTAVAIL: "EADDRNOTAVAIL", syscall.ENETUNREACH: "ENETUNREACH",
	syscall.ECONNRESET: "ECONNRESET", syscall.EISCONN: "EISCONN", syscall.ETIMEDOUT: "ETIMEDOUT",
	syscall.ECONNREFUSED: "ECONNREFUSED", syscall.EHOSTUNREACH: "EHOSTUNREACH", syscall.EALREADY: "EALREADY",
	syscall.EINPROGRESS: "EINPROGRESS", syscall.EAFNOSUPPORT: "EAFNOSUPPORT",
}

// Items is a slot's items in an epoch.
type Items []Item

// String formats items as "[connect ok, CONNECT_REQUEST]".
func (is Items) String() string {
	parts := make([]string, len(is))
	for k, it := range is {
		parts[k] = it.String()
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// Epoch is what one operation of a sequence brought about on one side:
// the items of each slot, in journal order.
type Epoch struct {
	// Slots maps a slot to its items.
	Slots map[int]Items
	// Unmapped counts records of ids that have no slot yet.
	Unmapped int
	// Skip says why the operation was not made, if it was not.
	Skip skip
	// Probe is the outcome of a probe (callseq.Op.Probe) on this side.
	Probe string
}

func epochOf(recs []rec, slots []int, sk skip) Epoch {
	e := Epoch{Slots: make(map[int]Items), Skip: sk}
	for k, r := range recs {
		if slots[k] < 0 {
			e.Unmapped++
			continue
		}
		e.Slots[slots[k]] = append(e.Slots[slots[k]], itemOf(r))
	}
	// Records of one id reach the observer in order; those of different
	// ids may not, which does not matter per slot.
	return e
}

// slotsOf returns the slots with items in either epoch, sorted.
func slotsOf(a, b Epoch) []int {
	var out []int
	for k := range a.Slots {
		out = append(out, k)
	}
	for k := range b.Slots {
		if _, ok := a.Slots[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Ints(out)
	return out
}

// String formats the epoch as "s1 [connect ok] s2 [CONNECT_REQUEST]".
func (e Epoch) String() string {
	var parts []string
	keys := make([]int, 0, len(e.Slots))
	for k := range e.Slots {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("s%d %s", k, e.Slots[k]))
	}
	if e.Skip != "" {
		parts = append(parts, "("+string(e.Skip)+")")
	}
	if e.Unmapped > 0 {
		parts = append(parts, fmt.Sprintf("(+%d unmapped)", e.Unmapped))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, " ")
}
