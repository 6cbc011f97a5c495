package diffkernel

import (
	"fmt"
	"maps"
	"slices"
	"syscall"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/callseq"
)

// Divergence is the first place where the two sides of a sequence differ
// once the equivalences are applied.
type Divergence struct {
	// Epoch is the index of the operation after which it showed.
	Epoch int
	// Op is that operation.
	Op callseq.Op
	// Slot is the id it concerns (-1: none in particular).
	Slot int
	// What says what differs: "items", "state", "skip", "model" (a
	// journal breaks the model), "driver" (a call hung).
	What string
	// Soft and Kernel are the slot's items on each side (the kernel's
	// rewritten by the equivalences).
	Soft, Kernel Items
	// SoftState and KernelState are the slot's states after the epoch.
	SoftState, KernelState id.State
	// Detail says more, in words.
	Detail string
	// SoftEpoch and KernelEpoch are the whole epoch on each side, as
	// recorded.
	SoftEpoch, KernelEpoch Epoch
	// ProbeState is, for a probe the kernel took (What "probe"), the state
	// the id was in.
	ProbeState id.State
	// Known is the documented divergence it is, if any.
	Known *Known
}

// Key identifies a divergence independently of slot numbers and epochs:
// shrinking keeps a reduction when its first divergence has the same key.
func (d *Divergence) Key() string {
	if d.Known != nil {
		return "documented " + d.Known.Name
	}
	return fmt.Sprintf("%s|%s|%s|%s|%s|%s", d.What, d.Soft, d.Kernel, d.SoftState, d.KernelState, d.Detail)
}

// String formats the divergence for a report.
func (d *Divergence) String() string {
	s := fmt.Sprintf("after op %d (%s): %s differ on s%d: soft %s -> %s, kernel %s -> %s",
		d.Epoch, d.Op, d.What, d.Slot, d.Soft, d.SoftState, d.Kernel, d.KernelState)
	if d.Detail != "" {
		s += ": " + d.Detail
	}
	if d.Known != nil {
		s += " [documented: " + d.Known.Name + "]"
	}
	return s
}

// comparer holds what the comparison of one sequence carries from an epoch
// to the next.
type comparer struct {
	fl Flavour
	// soft and kern are the slots' states so far and QP types.
	soft, kern map[int]id.State
	qp         map[int]id.QPType
	// deferred marks slots whose kernel DISCONNECTED is due later (IB's
	// DREP): the software fabric reported it at the disconnect.
	deferred map[int]bool
	// used counts the equivalences applied.
	used map[string]int
	// reordered counts slots whose items came in another order the model
	// allows as well.
	reordered int
}

func newComparer(fl Flavour) *comparer {
	return &comparer{fl: fl, soft: map[int]id.State{}, kern: map[int]id.State{}, qp: map[int]id.QPType{},
		deferred: map[int]bool{}, used: map[string]int{}}
}

func (c *comparer) clone() *comparer {
	return &comparer{fl: c.fl, soft: maps.Clone(c.soft), kern: maps.Clone(c.kern), qp: maps.Clone(c.qp),
		deferred: maps.Clone(c.deferred), used: maps.Clone(c.used), reordered: c.reordered}
}

// compare compares one epoch of the two sides and returns the comparer
// after it, with the first divergence (nil if none).
func (c *comparer) compare(k int, op callseq.Op, soft, kern Epoch) (*comparer, *Divergence) {
	n, d := c.compare1(k, op, soft, kern)
	if d != nil {
		d.SoftEpoch, d.KernelEpoch = soft, kern
	}
	return n, d
}

func (c *comparer) compare1(k int, op callseq.Op, soft, kern Epoch) (*comparer, *Divergence) {
	n := c.clone()
	if soft.Skip != kern.Skip {
		return n, &Divergence{Epoch: k, Op: op, Slot: op.Slot, What: "skip",
			Detail: fmt.Sprintf("soft %q, kernel %q", soft.Skip, kern.Skip)}
	}
	for _, s := range slotsOf(soft, kern) {
		a := soft.Slots[s]
		b, used := normalize(c.fl, kern.Slots[s], a)
		for _, it := range append(slices.Clone(a), b...) {
			n.qp[s] = it.QP
		}
		for _, e := range used {
			n.used[e.Name]++
		}
		startA, startB := n.soft[s], n.kern[s]
		if len(a) > 0 {
			n.soft[s] = a[len(a)-1].State
		}
		if len(b) > 0 {
			n.kern[s] = b[len(b)-1].State
		}
		// IB: the kernel's DISCONNECTED of a slot that disconnected comes
		// with the peer's DREP; the software fabric's came at once.
		if c.fl == IB {
			if n.deferred[s] {
				if i := indexEvent(b, id.EventDisconnected); i >= 0 {
					b = slices.Delete(slices.Clone(b), i, i+1)
					delete(n.deferred, s)
				}
			} else if i := indexEvent(a, id.EventDisconnected); i >= 0 && indexEvent(b, id.EventDisconnected) < 0 &&
				hasCall(b, journal.CallDisconnect, 0) && journal.EventAllowed(n.kern[s], id.EventDisconnected, n.qp[s]) {
				a = slices.Delete(slices.Clone(a), i, i+1)
				n.deferred[s] = true
				n.used[eqDisconnectDREP.Name]++
			}
		}
		if !sameItems(a, b) {
			if c.destroyRace(op, s, a, b) {
				n.used[eqDestroyRace.Name]++
				continue
			}
			if !slices.EqualFunc(sortedItems(a), sortedItems(b), Item.same) ||
				!legal(startA, a, n.qp[s]) || !legal(startB, b, n.qp[s]) {
				return n, &Divergence{Epoch: k, Op: op, Slot: s, What: "items", Soft: a, Kernel: b,
					SoftState: n.soft[s], KernelState: n.kern[s]}
			}
			n.reordered++
		}
	}
	for _, s := range slotsOf(soft, kern) {
		sa, sb := n.soft[s], n.kern[s]
		if sa == sb || (n.deferred[s] && sa == id.StateDisconnected && journal.AfterEvent(sb, id.EventDisconnected, n.qp[s]) == sa) {
			continue
		}
		b, _ := normalize(c.fl, kern.Slots[s], soft.Slots[s])
		return n, &Divergence{Epoch: k, Op: op, Slot: s, What: "state", Soft: soft.Slots[s], Kernel: b,
			SoftState: sa, KernelState: sb}
	}
	return n, nil
}

// destroyRace reports whether slot s's items differ only as the race of a
// connect with the destroy of its listener (op) allows: one REJECTED each,
// one side's request rejected by the destroy (-ECONNRESET), the other's
// finding nobody listening (-ECONNREFUSED). b is normalized.
func (c *comparer) destroyRace(op callseq.Op, s int, a, b Items) bool {
	if op.Call != journal.CallDestroy || s == op.Slot ||
		c.soft[op.Slot] != id.StateListen || c.kern[op.Slot] != id.StateListen || len(a) != 1 || len(b) != 1 {
		return false
	}
	reset, refused := -int32(syscall.ECONNRESET), -int32(syscall.ECONNREFUSED)
	for _, it := range []Item{a[0], b[0]} {
		if it.Kind != journal.KindEvent || it.Event != id.EventRejected || (it.Status != reset && it.Status != refused) {
			return false
		}
	}
	return a[0].Status != b[0].Status && a[0].State == b[0].State
}

func indexEvent(is Items, t id.EventType) int {
	for k, it := range is {
		if it.Kind == journal.KindEvent && it.Event == t {
			return k
		}
	}
	return -1
}

func sameItems(a, b Items) bool { return slices.EqualFunc(a, b, Item.same) }

func sortedItems(is Items) Items {
	out := slices.Clone(is)
	slices.SortStableFunc(out, func(x, y Item) int {
		kx, ky := x.String(), y.String()
		switch {
		case kx < ky:
			return -1
		case kx > ky:
			return 1
		}
		return 0
	})
	return out
}

// legal reports whether items, in this order, are what the model allows
// from state st: every event allowed where it comes, every successful
// call allowed.
func legal(st id.State, is Items, qp id.QPType) bool {
	for _, it := range is {
		r := journal.Record{Kind: it.Kind, Call: it.Call, Event: it.Event, Status: it.Status, QPType: qp}
		switch it.Kind {
		case journal.KindEvent:
			if it.Event == id.EventConnectRequest {
				break // the new id's first record, or a listener's
			}
			if !journal.EventAllowed(st, it.Event, qp) {
				return false
			}
		case journal.KindCall:
			if it.Status == 0 && it.Call != journal.CallCreate && it.Call != journal.CallGetRequest {
				if _, ok := journal.CallAllowed(st, it.Call, qp); !ok {
					return false
				}
			}
		}
		st = journal.Apply(st, &r)
		if it.Kind == journal.KindEvent && it.Event == id.EventConnectRequest {
			st = it.State
		}
	}
	return true
}
