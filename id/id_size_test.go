package id

import (
	"testing"
	"unsafe"
)

// TestIDSize: every connection has an id at each end, so an ID must stay
// within the 240-byte allocation size class; the sync.Cond that Destroy
// waits on (56 bytes) is made by the first waiter, which most ids never
// have, and put it in the 352-byte class; its one-byte fields spread
// between the wider ones put it in the 288-byte class.
func TestIDSize(t *testing.T) {
	if n := unsafe.Sizeof(ID{}); n > 240 {
		t.Fatalf("ID is %d bytes, want at most 240", n)
	}
}

// TestIDLayout: the fields a reactor's loop writes for every event it
// claims (reported) and reads (the handle table's entry, ref) sit at least
// a cache line away from those the worker that delivers and handles the
// event uses (the first group, uid to completed), in this ID and in the
// next one of its size class, so that in no ID, whatever its address, the
// two CPUs write the same line per event.
func TestIDLayout(t *testing.T) {
	var i ID
	workerEnd := unsafe.Offsetof(i.completed) + unsafe.Sizeof(i.completed) // the worker's group starts at 0
	for name, off := range map[string]uintptr{
		"uid": unsafe.Offsetof(i.uid), "journal": unsafe.Offsetof(i.journal), "state": unsafe.Offsetof(i.state),
		"mu": unsafe.Offsetof(i.mu), "chNum": unsafe.Offsetof(i.chNum), "destroyed": unsafe.Offsetof(i.destroyed),
		"deferWait": unsafe.Offsetof(i.deferWait), "waiters": unsafe.Offsetof(i.waiters), "handling": unsafe.Offsetof(i.handling),
	} {
		if off >= workerEnd {
			t.Errorf("worker's field %s at %d, past completed's end %d", name, off, workerEnd)
		}
	}
	loopStart := unsafe.Offsetof(i.ref)
	loopEnd := unsafe.Offsetof(i.reported) + unsafe.Sizeof(i.reported)
	if r := unsafe.Offsetof(i.reported); r < loopStart {
		t.Errorf("reported at %d, before ref at %d", r, loopStart)
	}
	const line, class = 64, 240 // the next ID of the size class starts 240 bytes on
	if gap := int(loopStart) - int(workerEnd); gap < line {
		t.Errorf("%d bytes between the worker's fields and the loop's, want at least %d", gap, line)
	}
	if gap := class - int(loopEnd); gap < line {
		t.Errorf("%d bytes between the loop's fields and the next ID's worker fields, want at least %d", gap, line)
	}
}
