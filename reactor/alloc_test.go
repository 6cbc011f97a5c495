package reactor_test

import "testing"

// TestDispatchDoesNotAllocate runs the dispatch benchmarks and fails if an
// event costs an allocation on the way from the channel fd to its handler,
// inline or on the pool.
func TestDispatchDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	if testing.Short() {
		t.Skip("runs benchmarks")
	}
	for name, bench := range map[string]func(*testing.B){
		"inline": BenchmarkDispatchInline, "pool": BenchmarkDispatchPool4,
	} {
		if r := testing.Benchmark(bench); r.AllocsPerOp() > 0 {
			t.Errorf("%s: %d allocations per event (%s)", name, r.AllocsPerOp(), r.MemString())
		}
	}
}
