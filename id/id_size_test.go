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
