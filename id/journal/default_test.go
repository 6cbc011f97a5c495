package journal

import "testing"

// allocatedAtInit is evaluated when the package is initialized, before any
// test runs (and package journal's importers' init functions cannot have
// run yet): the default journal's ring must not exist then.
var allocatedAtInit = defaultJournal.j != nil

// The default journal's 4 MiB ring is allocated on the first call of
// Default, not when the package is initialized, and holds DefaultCapacity
// records.
func TestDefaultIsLazy(t *testing.T) {
	if allocatedAtInit {
		t.Fatal("the default journal was allocated at package initialization")
	}
	j := Default()
	if j == nil || j.Cap() != DefaultCapacity || Default() != j {
		t.Fatalf("Default() = %p (cap %d), want one journal of %d records", j, j.Cap(), DefaultCapacity)
	}
	if DefaultCapacity != 65536 {
		t.Errorf("DefaultCapacity = %d, the documentation says 65536", DefaultCapacity)
	}
}
