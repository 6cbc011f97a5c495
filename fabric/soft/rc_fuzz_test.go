package soft

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
	"github.com/cmrt/cmrt/poll"
)

// fuzzConn is a connection in RTS over a socket pair, with a QP holding a
// few receives and regions, driven by the calling goroutine as its loop
// (the loop is created but never run).
type fuzzConn struct {
	c    *conn
	peer int
	qp   *rcQP
	src  fabric.EventSource
	l    *loop
	bufs [][]byte
	mrs  []fabric.MR
}

// fuzzSTagKey keys the fuzz connection's protection domain, so that its
// regions get the same STags and addresses in every run and the seeds can
// name them.
var fuzzSTagKey = []byte("cmrt fuzz stags!")

func newFuzzConn(tb testing.TB, crc bool) *fuzzConn { return newFuzzConnSized(tb, crc, 256) }

// newFuzzConnSized is newFuzzConn with regions of base<<k bytes (k = 0..3)
// and receives of a quarter of that.
func newFuzzConnSized(tb testing.TB, crc bool, base int) *fuzzConn {
	f := New()
	src, err := f.Open()
	if err != nil {
		tb.Fatal(err)
	}
	e, err := src.Create(1, fabric.PSTCP, fabric.RC)
	if err != nil {
		tb.Fatal(err)
	}
	ep := e.(*endpoint)
	l, err := newLoop(&f.eng)
	if err != nil {
		tb.Fatal(err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatal(err)
	}
	c := &conn{l: l, fd: fds[0], state: csRTS, ep: ep, crc: crc, ird: 2, ord: 2}
	if c.gen, err = l.register(c.fd, poll.In|poll.RDHup, c); err != nil {
		tb.Fatal(err)
	}
	x, err := ep.tp.createQP(&fabric.QPInitAttr{Cap: fabric.QPCap{MaxRecvWR: 4}})
	if err != nil {
		tb.Fatal(err)
	}
	fc := &fuzzConn{c: c, peer: fds[1], qp: x.(*rcQP), src: src, l: l}
	fc.qp.pd.mrs.mu.Lock()
	err = fc.qp.pd.mrs.seedLocked(fuzzSTagKey)
	fc.qp.pd.mrs.mu.Unlock()
	if err != nil {
		tb.Fatal(err)
	}
	for k, a := range []fabric.Access{fabric.AccessLocalWrite, fabric.AccessLocalWrite | fabric.AccessRemoteWrite, fabric.AccessRemoteRead, fabric.AccessLocalWrite | fabric.AccessRemoteRead | fabric.AccessRemoteWrite} {
		b := make([]byte, base<<k)
		fc.bufs = append(fc.bufs, b)
		m, err := fc.qp.RegMR(b, a)
		if err != nil {
			tb.Fatal(err)
		}
		fc.mrs = append(fc.mrs, m)
		if a&fabric.AccessLocalWrite != 0 {
			_ = fc.qp.PostRecv(&fabric.RecvWR{WRID: uint64(k), Buf: b[:base/4<<k], MR: m})
		}
	}
	_ = fc.qp.PostRecv(&fabric.RecvWR{WRID: 9})
	c.startDataPath(false, false, 0, nil)
	return fc
}

func (fc *fuzzConn) close() {
	if fc.c.state != csClosed {
		fc.c.closeNow()
	}
	_ = fc.qp.Destroy()
	_ = unix.Close(fc.peer)
	_ = fc.src.Close()
	fc.l.Close() // never ran: releases its descriptors
}

// FuzzRCReceive feeds arbitrary bytes to the receive path of a connection
// in RTS, in two pieces (one handed over, one read from the socket): it
// must not panic or block, and the connection either consumes them or
// closes.
func FuzzRCReceive(f *testing.F) {
	send := FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, []byte("hello"), false)
	sendCRC := FPDU(iwarp.Header{Op: iwarp.OpSendSE, Last: true, MSN: 1}, []byte("hello"), true)
	two := append(FPDU(iwarp.Header{Op: iwarp.OpSend, MSN: 1}, make([]byte, 40), false),
		FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1, MO: 40}, make([]byte, 20), false)...)
	// The regions' STags and addresses, the same in every run.
	probe := newFuzzConn(f, false)
	wm, rm := probe.mrs[1], probe.mrs[2]
	probe.close()
	write := FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: wm.RKey(), TO: wm.Addr()}, make([]byte, 32), false)
	read := FPDU(iwarp.Header{Op: iwarp.OpReadRequest, Last: true, MSN: 1,
		Read: iwarp.ReadRequest{SinkSTag: 5, Size: 100, SrcSTag: rm.RKey(), SrcTO: rm.Addr()}}, nil, false)
	term := FPDU(iwarp.Header{Op: iwarp.OpTerminate, Last: true, MSN: 1}, nil, false)
	rresp := FPDU(iwarp.Header{Op: iwarp.OpReadResponse, Last: true, STag: 1}, nil, false)
	for _, s := range [][]byte{send, two, write, read, term, rresp, append(send, write...), append(read, read...)} {
		f.Add(false, uint16(len(s)/2), s)
	}
	f.Add(true, uint16(3), sendCRC)
	f.Add(false, uint16(0), []byte{0xff, 0xff, 0x41, 0x43})
	f.Fuzz(func(t *testing.T, crc bool, split uint16, data []byte) {
		fc := newFuzzConn(t, crc)
		defer fc.close()
		k := min(int(split), len(data))
		if _, err := unix.Write(fc.peer, data[k:]); err != nil && len(data[k:]) > 0 {
			t.Skip(err)
		}
		if fc.c.state == csRTS {
			fc.c.received(data[:k])
		}
		if fc.c.state == csRTS {
			fc.c.readable(nil)
		}
		switch fc.c.state {
		case csRTS:
			if fc.c.dp.dead {
				t.Fatal("data path dead on a live connection")
			}
		case csClosing, csClosed:
		default:
			t.Fatalf("state %d", fc.c.state)
		}
	})
}

// TestFuzzConnSTags: the fuzz connection's regions get the same STags and
// addresses in every run (the seeds name them), and a seed Write lands.
func TestFuzzConnSTags(t *testing.T) {
	a, b := newFuzzConn(t, false), newFuzzConn(t, false)
	defer a.close()
	defer b.close()
	for k := range a.mrs {
		if a.mrs[k].RKey() != b.mrs[k].RKey() || a.mrs[k].Addr() != b.mrs[k].Addr() {
			t.Fatalf("region %d: %#x@%#x, then %#x@%#x", k, a.mrs[k].RKey(), a.mrs[k].Addr(), b.mrs[k].RKey(), b.mrs[k].Addr())
		}
	}
	wm := a.mrs[1]
	a.c.received(FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: wm.RKey(), TO: wm.Addr() + 8}, []byte("placed"), false))
	if a.c.state != csRTS || string(a.bufs[1][8:14]) != "placed" {
		t.Fatalf("seed Write not placed (state %d)", a.c.state)
	}
}
