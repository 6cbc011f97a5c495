package callseq

import (
	"github.com/cmrt/cmrt/id/journal"
)

// WithoutSlot returns seq without the id created in slot k: its create
// and every operation on it are dropped, and the ids in later slots move
// down one. Slots of ids born from requests have no create: for them only
// the operations are dropped.
func WithoutSlot(seq Seq, k int) Seq {
	created := false
	for _, op := range seq {
		if op.Call == journal.CallCreate && op.Slot == k {
			created = true
		}
	}
	out := make(Seq, 0, len(seq))
	for _, op := range seq {
		if op.Slot == k {
			continue
		}
		if created && op.Slot > k {
			op.Slot--
		}
		out = append(out, op)
	}
	return out
}

// without returns seq without the operations in [i, j); a create among
// them takes its slot with it (WithoutSlot).
func without(seq Seq, i, j int) Seq {
	var slots []int
	out := make(Seq, 0, len(seq))
	for k, op := range seq {
		if k >= i && k < j {
			if op.Call == journal.CallCreate {
				slots = append(slots, op.Slot)
			}
			continue
		}
		out = append(out, op)
	}
	for n := len(slots) - 1; n >= 0; n-- {
		out = WithoutSlot(out, slots[n])
	}
	return out
}

// Shrink returns a sequence no longer than seq for which fails still
// holds: it drops whole ids, then runs of operations halving in length,
// then single operations, keeping each removal that still fails, and
// calls fails at most budget times. fails(seq) is assumed true.
func Shrink(seq Seq, fails func(Seq) bool, budget int) Seq {
	try := func(s Seq) bool {
		if budget <= 0 || len(s) == len(seq) || len(s) == 0 {
			return false
		}
		budget--
		return fails(s)
	}
	// Whole ids, the last first.
	for k := maxSlot(seq); k >= 0 && budget > 0; k-- {
		if s := WithoutSlot(seq, k); try(s) {
			seq = s
		}
	}
	// Runs of operations, then single ones.
	for n := len(seq) / 2; n >= 1 && budget > 0; n /= 2 {
		for i := 0; i+n <= len(seq) && budget > 0; {
			if s := without(seq, i, i+n); try(s) {
				seq = s
				continue
			}
			i += n
		}
	}
	return seq
}

func maxSlot(seq Seq) int {
	m := -1
	for _, op := range seq {
		m = max(m, op.Slot)
	}
	return m
}
