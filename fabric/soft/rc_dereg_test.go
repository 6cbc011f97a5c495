package soft_test

import (
	"bytes"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// The adversary of issue 18 item 2: a raw iWARP peer that stalls its
// receive window while the Go side owes it a large message, or that is
// placing a Write, when the application deregisters the region or
// destroys the QP and then reuses the memory. Not one byte written after
// DeregMR or DestroyQP returns may reach the peer, and no byte the peer
// sends afterwards may land.

// stallPeer is a raw peer connected to a Go server whose id has one
// region, with a receive buffer small enough to stall the Go side.
type stallPeer struct {
	f   *soft.Fabric
	ch  *rcChan
	lis *id.ID
	e   *rcEnd
	c   *net.TCPConn
	buf []byte
	m   id.MR
}

const markerByte = 0xA5

// termLocalWant is the Terminate of a stream cut for a local reason.
var termLocalWant = iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeCatastrophic, ECode: iwarp.RDMAPECodeUnspecified}

func newStallPeer(t *testing.T, size int, access id.Access) *stallPeer {
	t.Helper()
	// The stream's last bytes (a Terminate) wait behind the stalled window
	// until the test has filled 16 MiB with markers and drains: under -race
	// on a loaded machine that outlasts the default 2 s linger.
	s := &stallPeer{f: soft.New(soft.WithLinger(time.Minute)), buf: make([]byte, size)}
	s.ch = newRCChan(t, s.f)
	s.lis = listen(t, s.ch)
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}}
	c, err := d.Dial("tcp", "127.0.0.1:"+strconv.Itoa(int(s.lis.LocalAddr().Port())))
	if err != nil {
		t.Fatal(err)
	}
	s.c = c.(*net.TCPConn)
	req, _ := iwarp.AppendMPA(nil, &iwarp.MPAFrame{Rev: iwarp.MPARev2, Enhanced: true, IRD: 1, ORD: 1})
	if _, err := s.c.Write(req); err != nil {
		t.Fatal(err)
	}
	s.e = acceptNext(t, s.ch, id.QPInitAttr{}, func(tb testing.TB, e *rcEnd) {
		s.m = reg(tb, e, s.buf, access)
	})
	s.ch.want(t, id.EventEstablished)
	if _, extra := readMPA(t, s.c); len(extra) > 0 {
		t.Fatalf("%d bytes glued to the MPA Reply", len(extra))
	}
	return s
}

// onLoop runs fn on the server connection's loop (which orders it with
// the data path's copies).
func (s *stallPeer) onLoop(fn func()) { soft.OnConnLoop(s.e.id.Endpoint(), fn) }

// waitStalled waits until the Go side can write no more to the peer while
// it still owes it bytes.
func (s *stallPeer) waitStalled(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if soft.SendStalled(s.e.id.Endpoint()) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the Go side never stalled on the peer's window")
		}
		time.Sleep(time.Millisecond)
	}
}

// drain reads what the Go side sends until it closes, and returns the
// payload bytes of the tagged or untagged data messages and the Terminate
// that ended the stream (nil if none).
func (s *stallPeer) drain(t *testing.T) (payload int, marker bool, term *iwarp.Terminate) {
	t.Helper()
	for _, u := range readULPDUs(t, s.c, false, nil) {
		var h iwarp.Header
		p, err := iwarp.ParseULPDU(u, &h)
		if err != nil {
			t.Fatalf("bad ULPDU from the fabric: %v", err)
		}
		if h.Op == iwarp.OpTerminate {
			tt := h.Term
			term = &tt
			continue
		}
		payload += len(p)
		marker = marker || bytes.IndexByte(p, markerByte) >= 0
	}
	return payload, marker, term
}

func (s *stallPeer) close(t *testing.T) {
	t.Helper()
	_ = s.c.Close()
	for _, i := range []*id.ID{s.e.id, s.lis} {
		_ = i.Destroy()
	}
	_ = s.ch.src.Close()
	quiesceFabs(t, s.f)
}

// TestRCNoReadAfterRelease: the peer asks for a whole region by RDMA Read
// and stalls its window; the application deregisters the region (or
// destroys the QP) and writes a marker into every byte. The peer never
// receives a marker byte: the Read Response stops, with a Terminate (a
// protection error for the region, a local error for the QP).
func TestRCNoReadAfterRelease(t *testing.T) {
	const size = 16 << 20
	for _, how := range []string{"dereg", "destroy-qp"} {
		t.Run(how, func(t *testing.T) {
			s := newStallPeer(t, size, id.AccessRemoteRead)
			defer s.close(t)
			rr := soft.FPDU(iwarp.Header{Op: iwarp.OpReadRequest, Last: true, MSN: 1,
				Read: iwarp.ReadRequest{SinkSTag: 0x4242, Size: size, SrcSTag: s.m.RKey(), SrcTO: s.m.Addr()}}, nil, false)
			if _, err := s.c.Write(rr); err != nil {
				t.Fatal(err)
			}
			s.waitStalled(t)
			var err error
			if how == "dereg" {
				err = s.e.id.DeregMR(s.m)
			} else {
				err = s.e.id.DestroyQP()
			}
			if err != nil {
				t.Fatal(err)
			}
			for k := range s.buf {
				s.buf[k] = markerByte
			}
			n, marker, term := s.drain(t)
			if marker {
				t.Fatalf("the peer read bytes written after %s returned", how)
			}
			if n >= size {
				t.Fatalf("the whole region (%d bytes) went out", n)
			}
			want := iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeRemoteProtection, ECode: iwarp.RDMAPECodeInvalidSTag}
			if how == "destroy-qp" {
				want = termLocalWant
			}
			if term == nil || term.Layer != want.Layer || term.EType != want.EType || term.ECode != want.ECode {
				t.Fatalf("Terminate %+v, want %+v", term, want)
			}
			s.ch.want(t, id.EventDisconnected)
			t.Logf("%d of %d bytes read before %s", n, size, how)
		})
	}
}

// TestRCNoSendAfterDereg: a large Send or RDMA Write of the Go side is cut
// when its region is deregistered mid-message: no byte written afterwards
// goes out, the work request completes with a local protection error and
// the stream ends with a Terminate.
func TestRCNoSendAfterDereg(t *testing.T) {
	const size = 16 << 20
	for _, op := range []id.WROpcode{id.WRSend, id.WRWrite} {
		t.Run(fmt.Sprint(op), func(t *testing.T) {
			s := newStallPeer(t, size, id.AccessLocalWrite)
			defer s.close(t)
			wr := id.SendWR{WRID: 7, Opcode: op, Flags: id.SendSignaled, Buf: s.buf, MR: s.m, RKey: 0x4242}
			if err := s.e.qp.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			s.waitStalled(t)
			if err := s.e.id.DeregMR(s.m); err != nil {
				t.Fatal(err)
			}
			for k := range s.buf {
				s.buf[k] = markerByte
			}
			n, marker, term := s.drain(t)
			if marker {
				t.Fatal("the peer got bytes written after DeregMR returned")
			}
			if n >= size {
				t.Fatalf("the whole message (%d bytes) went out", n)
			}
			if term == nil || term.Layer != termLocalWant.Layer || term.EType != termLocalWant.EType || term.ECode != termLocalWant.ECode {
				t.Fatalf("Terminate %+v, want %+v", term, termLocalWant)
			}
			if wc := comp(t, s.e.qp.SendCQ()); wc.WRID != 7 || wc.Status != id.WCLocProtErr {
				t.Fatalf("completion %+v, want a local protection error", wc)
			}
			s.ch.want(t, id.EventDisconnected)
		})
	}
}

// TestRCNoWriteAfterRelease: the peer places the first segment of an RDMA
// Write; the application deregisters the region (or destroys the QP) and
// clears it; the peer's next segments never land.
func TestRCNoWriteAfterRelease(t *testing.T) {
	const size = 64 << 10
	for _, how := range []string{"dereg", "destroy-qp"} {
		t.Run(how, func(t *testing.T) {
			s := newStallPeer(t, size, id.AccessLocalWrite|id.AccessRemoteWrite)
			defer s.close(t)
			first := bytes.Repeat([]byte{'w'}, 1024)
			seg := soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, STag: s.m.RKey(), TO: s.m.Addr()}, first, false)
			if _, err := s.c.Write(seg); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Second)
			for placed := false; !placed; {
				s.onLoop(func() { placed = s.buf[len(first)-1] == 'w' })
				if time.Now().After(deadline) {
					t.Fatal("first segment never placed")
				}
				time.Sleep(time.Millisecond)
			}
			var err error
			if how == "dereg" {
				err = s.e.id.DeregMR(s.m)
			} else {
				err = s.e.id.DestroyQP()
			}
			if err != nil {
				t.Fatal(err)
			}
			clear(s.buf)
			// The rest of the Write, and then a walk over the region.
			after := []byte("AFTER-QP-DESTROYED")
			var rest []byte
			for off := len(first); off+len(after) <= 4096; off += len(after) {
				rest = append(rest, soft.FPDU(iwarp.Header{Op: iwarp.OpWrite, STag: s.m.RKey(), TO: s.m.Addr() + uint64(off)}, after, false)...)
			}
			_, _ = s.c.Write(rest) // the connection may already be closed
			_, _, term := s.drain(t)
			s.onLoop(func() {})
			if k := bytes.Index(s.buf, after); k >= 0 {
				t.Fatalf("a segment sent after %s landed at offset %d", how, k)
			}
			if term == nil {
				t.Fatal("no Terminate")
			}
			s.ch.want(t, id.EventDisconnected)
		})
	}
}
