package kernel

import (
	"path/filepath"
	"testing"

	"github.com/cmrt/cmrt/fabric"
)

// TestSourceOnMigrate checks the hooks a reactor installs on a source
// (fabric.MigrateNotifier): each runs on every notice until its stop, and
// a closed source drops them and takes no more. /dev/null, a character
// device that accepts every write, stands in for rdma_cm.
func TestSourceOnMigrate(t *testing.T) {
	f := New(WithDevicePath("/dev/null"), WithABIVersionPath(filepath.Join(t.TempDir(), "none")), WithAFIB(false))
	es, err := f.Open()
	if err != nil {
		t.Skipf("no /dev/null to stand in for rdma_cm: %v", err)
	}
	mn, ok := es.(fabric.MigrateNotifier)
	if !ok {
		t.Fatal("the kernel source is not a fabric.MigrateNotifier")
	}
	s := es.(*source)
	var a, b int
	stopA := mn.OnMigrate(func() { a++ })
	stopB := mn.OnMigrate(func() { b++ })
	s.migrated()
	if a != 1 || b != 1 {
		t.Fatalf("after one notice: a %d, b %d; want 1, 1", a, b)
	}
	if !stopA() {
		t.Fatal("stop of an installed hook reported false")
	}
	if stopA() {
		t.Fatal("second stop reported true")
	}
	s.migrated()
	if a != 1 || b != 2 {
		t.Fatalf("after a's stop: a %d, b %d; want 1, 2", a, b)
	}
	if err := es.Close(); err != nil {
		t.Fatal(err)
	}
	s.migrated()
	if b != 2 {
		t.Fatalf("a closed source called a hook (b %d)", b)
	}
	if stopB() {
		t.Fatal("stop after Close reported the hook installed")
	}
	late := mn.OnMigrate(func() { a++ })
	s.migrated()
	if a != 1 || late() {
		t.Fatalf("a hook installed on a closed source: a %d", a)
	}
}
