package soft

import (
	"testing"
	"unsafe"
)

// TestConnSize: every connection of a server holds a conn, so it must stay
// within the 256-byte allocation size class (it held a 256-byte copy of
// the MPA Request's private data for the connection's life, which put it
// in the 576-byte class).
func TestConnSize(t *testing.T) {
	if n := unsafe.Sizeof(conn{}); n > 256 {
		t.Fatalf("conn is %d bytes, want at most 256", n)
	}
}

// TestEndpointSize: every connection's end has an endpoint, which must stay
// within the 224-byte allocation size class (its flags were spread between
// the pointers, which put it in the 256-byte class).
func TestEndpointSize(t *testing.T) {
	if n := unsafe.Sizeof(endpoint{}); n > 224 {
		t.Fatalf("endpoint is %d bytes, want at most 224", n)
	}
}

// TestRCPathSize: every connection in RTS with a QP, or still in its start
// (the RTR, the hold), has a data path, which must stay within the
// 352-byte allocation size class (an idle one is dropped: dropIdle). What few
// connections use, or use only for a moment, is made on first use or
// lives on the stack: the Read queues (rcReads), the inbound message
// (rcRx), the parsed header and a header scratch buffer; with flags spread
// between wider fields they put it in the 768-byte class.
func TestRCPathSize(t *testing.T) {
	if n := unsafe.Sizeof(rcPath{}); n > 352 {
		t.Fatalf("rcPath is %d bytes, want at most 352", n)
	}
}
