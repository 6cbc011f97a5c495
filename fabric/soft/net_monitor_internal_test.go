package soft

import (
	"testing"
	"time"
)

// TestTrackNoAlloc: the address monitor watches both ends of every
// connection; what it reported for one (ADDR_CHANGE) is a flag of the
// endpoint, not a structure allocated per watch.
func TestTrackNoAlloc(t *testing.T) {
	f := New(WithName("track-alloc"), WithIdleGrace(time.Hour))
	defer f.Quiesce()
	keep := newEndpoint(f, 0, 0)
	f.mon.track(keep) // the monitor stays up
	defer f.mon.untrack(keep)
	ep := newEndpoint(f, 0, 0)
	f.mon.track(ep)
	f.mon.untrack(ep)
	allocs := testing.AllocsPerRun(100, func() {
		f.mon.track(ep)
		f.mon.untrack(ep)
	})
	if allocs != 0 {
		t.Errorf("track and untrack: %.0f allocations, want 0", allocs)
	}
}
