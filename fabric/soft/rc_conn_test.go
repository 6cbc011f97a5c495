package soft

import (
	"bytes"
	"fmt"
	"slices"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
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

// TestMPAFramesOnStack: the MPA Request and Reply are built in their
// writer's stack buffer (the write copies what the socket does not take),
// not in a slice allocated per connection, and parse back as sent.
func TestMPAFramesOnStack(t *testing.T) {
	f := New(WithName("mpa-stack"))
	defer f.Quiesce()
	pd := []byte("private")
	act := &conn{l: &loop{eng: &f.eng}, active: true, param: fabric.ConnParam{PrivateData: pd, ResponderResources: 4, InitiatorDepth: 2}}
	var buf [mpaBufLen]byte
	var req []byte
	if n := testing.AllocsPerRun(50, func() {
		b, ok := act.request(buf[:0])
		if !ok {
			t.Fatal("request not built")
		}
		req = b
	}); n != 0 {
		t.Errorf("MPA Request: %.0f allocations, want 0", n)
	}
	var got iwarp.MPAFrame
	if _, err := iwarp.ParseMPA(req, &got); err != nil || got.Reply || string(got.PrivateData) != "private" || got.IRD != 4 || got.ORD != 2 {
		t.Fatalf("request parses as %+v, %v", got, err)
	}
	pas := &conn{l: act.l, req: got}
	pas.req.PrivateData = nil
	var rep []byte
	if n := testing.AllocsPerRun(50, func() {
		b, _, err := pas.acceptReply(buf[:0], &fabric.ConnParam{PrivateData: pd, ResponderResources: 2, InitiatorDepth: 4})
		if err != nil {
			t.Fatal(err)
		}
		rep = b
	}); n != 0 {
		t.Errorf("MPA Reply: %.0f allocations, want 0", n)
	}
	if _, err := iwarp.ParseMPA(rep, &got); err != nil || !got.Reply || got.Reject || string(got.PrivateData) != "private" {
		t.Fatalf("reply parses as %+v, %v", got, err)
	}
}

// TestRTRFPDUAsEmitted: the zero-length RDMA Write that sendRTR writes
// from rtrFPDU is, with and without CRC, the FPDU emit builds for an RTR
// in tx, and parses back as a last, empty Write to rtrSTag at TO 0.
func TestRTRFPDUAsEmitted(t *testing.T) {
	for k, crc := range []bool{false, true} {
		p := &rcPath{c: &conn{}, crc: crc, rtr: RTRWrite}
		if !p.next() {
			t.Fatal("no RTR to send")
		}
		p.emit()
		if !bytes.Equal(p.tx, rtrFPDU[k]) {
			t.Fatalf("crc %v: rtrFPDU % x, emit % x", crc, rtrFPDU[k], p.tx)
		}
		ulpdu, n, err := iwarp.ParseFPDU(rtrFPDU[k], crc)
		if err != nil || n != len(rtrFPDU[k]) {
			t.Fatalf("crc %v: %d bytes, %v", crc, n, err)
		}
		var h iwarp.Header
		pl, err := iwarp.ParseULPDU(ulpdu, &h)
		if err != nil || h.Op != iwarp.OpWrite || h.STag != rtrSTag || h.TO != 0 || !h.Last || len(pl) != 0 {
			t.Fatalf("crc %v: %+v, %d bytes of payload, %v", crc, h, len(pl), err)
		}
	}
}

// TestPostConnOrder: a connection's task posted with postConn runs where
// its own post would have put it, between the tasks posted before and
// after it (each run of the loop's one function takes the oldest), and
// allocates nothing (a method value per connection before, finding 25);
// the FIFO keeps no burst's room once drained; on a stopped loop
// postConn reports false and leaves nothing queued.
func TestPostConnOrder(t *testing.T) {
	f := New(WithName("post-conn"))
	defer f.Quiesce()
	l, err := newLoop(&f.eng)
	if err != nil {
		t.Fatal(err)
	}
	go l.Run()
	conns := make([]*conn, 3)
	for k := range conns {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fds[0])
		defer unix.Close(fds[1])
		// Closing, past its data path: destroy marks it gone and reads
		// what came (nothing), nothing else.
		conns[k] = &conn{l: l, fd: fds[0], state: csClosing, rts: true}
	}
	gone := func(c *conn) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.gone
	}
	var seen []string
	for k, c := range conns {
		l.post(func() { seen = append(seen, fmt.Sprintf("before %d: %v", k, gone(c))) })
		if !l.postConn(connTask{c: c, kind: ctDestroy}) {
			t.Fatal("postConn on a running loop reported false")
		}
		l.post(func() { seen = append(seen, fmt.Sprintf("after %d: %v", k, gone(c))) })
	}
	l.call(func() {})
	want := []string{"before 0: false", "after 0: true", "before 1: false", "after 1: true", "before 2: false", "after 2: true"}
	if !slices.Equal(seen, want) {
		t.Fatalf("tasks ran as %q, want %q", seen, want)
	}
	c := &conn{l: l, state: csClosed}
	done := make(chan struct{})
	signal := func() { done <- struct{}{} }
	if n := testing.AllocsPerRun(100, func() {
		l.postConn(connTask{c: c, kind: ctDestroy})
		l.post(signal)
		<-done
	}); n != 0 && !RaceEnabled {
		t.Errorf("%.0f allocations per postConn, want 0", n)
	}
	// A burst (tasks queued while the loop is busy) grows the FIFO; once
	// it has drained, its buffer is not kept.
	hold := make(chan struct{})
	l.post(func() { <-hold })
	for range 4 * connTasksKept {
		l.postConn(connTask{c: c, kind: ctDestroy})
	}
	l.ctMu.Lock()
	grown := l.ctq.Cap()
	l.ctMu.Unlock()
	close(hold)
	l.call(func() {})
	l.ctMu.Lock()
	left, kept := l.ctq.Len(), l.ctq.Cap()
	l.ctMu.Unlock()
	if grown < 4*connTasksKept || left != 0 || kept > connTasksKept {
		t.Fatalf("after a burst: grown to %d, %d left, %d kept", grown, left, kept)
	}
	l.Close()
	if l.postConn(connTask{c: c, kind: ctDestroy}) {
		t.Fatal("postConn on a stopped loop reported true")
	}
	if n := l.ctq.Len(); n != 0 {
		t.Fatalf("%d tasks left queued on a stopped loop", n)
	}
}
