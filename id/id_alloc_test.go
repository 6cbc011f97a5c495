package id

import (
	"slices"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// TestWaitCompletedNoCondWhenDone: a wait that finds its goal reached at
// once (Destroy of a synchronous id, which acknowledges its events as it
// goes) makes no condition variable: one allocation per synchronous id
// before (finding 25 in BENCHMARKS.md).
func TestWaitCompletedNoCondWhenDone(t *testing.T) {
	ids := make([]ID, 101)
	k := 0
	done := func() bool { return true }
	if n := testing.AllocsPerRun(100, func() {
		ids[k].waitCompleted(done)
		k++
	}); n != 0 {
		t.Errorf("%.0f allocations per wait, want 0", n)
	}
	for k := range ids {
		if ids[k].cond != nil || ids[k].waiters.Load() != 0 {
			t.Fatalf("id %d: cond %v, %d waiters", k, ids[k].cond, ids[k].waiters.Load())
		}
	}
}

// TestApplyOptions: Create's options are applied in order, to a copy that
// is not moved to the heap (one allocation per Create before, finding 25;
// under the race detector the pool drops items, so only the values are
// checked there), and leave nothing behind for the next Create.
func TestApplyOptions(t *testing.T) {
	var f fabric.Fabric // the interface's nil: only stored
	base := createOptions{qp: RC}
	var got createOptions
	n := testing.AllocsPerRun(100, func() {
		got = applyOptions(base, []Option{WithQPType(UD), WithFabric(f), WithQPType(RC)})
	})
	if got != (createOptions{qp: RC}) {
		t.Fatalf("got %+v", got)
	}
	if n != 0 && !raceEnabled {
		t.Errorf("%.0f allocations per Create's options, want 0", n)
	}
	if o := applyOptions(createOptions{}, nil); o != (createOptions{}) {
		t.Fatalf("no options: %+v", o)
	}
}

// TestPrivateSourceNotInTable: a synchronous id's private channel gets its
// number without an entry in the table of channel numbers (a weak pointer
// each, an allocation per synchronous id, finding 25): nothing else can
// look it up. The number is still new, and the id keeps it.
func TestPrivateSourceNotInTable(t *testing.T) {
	f := fakefab.New("private-number", true)
	t0 := tableLen()
	var nums []uint64
	for range 3 {
		s, err := Create(nil, nil, PSTCP, WithFabric(f))
		if err != nil {
			t.Fatal(err)
		}
		n := s.ChannelNumber()
		if n == 0 || slices.Contains(nums, n) {
			t.Fatalf("private channel number %d after %v", n, nums)
		}
		nums = append(nums, n)
		if err := s.Destroy(); err != nil {
			t.Fatal(err)
		}
		if s.ChannelNumber() != n {
			t.Fatalf("number %d after Destroy, was %d", s.ChannelNumber(), n)
		}
	}
	if d := tableLen() - t0; d != 0 {
		t.Fatalf("%d entries added to the table for private channels", d)
	}
}

func tableLen() int {
	channelNumbers.Lock()
	defer channelNumbers.Unlock()
	return len(channelNumbers.weak) + len(channelNumbers.strong)
}
