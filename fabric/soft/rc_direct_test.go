package soft

import (
	"bytes"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
	"github.com/cmrt/cmrt/poll"
)

// Direct placement (rc_rx.go): the payload of a long Send or Write FPDU
// lands in its destination as it arrives, not through the deframer.

// directBase sizes newFuzzConnSized's regions for these tests: region 0
// is 256 KiB with a 64 KiB receive (WRID 0), region 1 512 KiB, remotely
// writable, with a 128 KiB receive (WRID 1).
const directBase = 256 << 10

// pattern returns n bytes that differ from their neighbours and from a
// zeroed buffer.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = seed + byte(k*7+k>>8)
	}
	return b
}

// pump reads what the peer wrote until the socket is drained or the
// connection leaves RTS.
func (fc *fuzzConn) pump(tb testing.TB) {
	tb.Helper()
	for range 64 {
		if fc.c.state != csRTS {
			return
		}
		if n, err := unix.IoctlGetInt(fc.c.fd, unix.SIOCINQ); err != nil || n == 0 {
			return
		}
		fc.c.readable(nil)
	}
	tb.Fatal("the socket never drained")
}

// fromPeer writes b as the peer.
func (fc *fuzzConn) fromPeer(tb testing.TB, b []byte) {
	tb.Helper()
	if len(b) == 0 {
		return
	}
	if n, err := unix.Write(fc.peer, b); err != nil || n != len(b) {
		tb.Fatalf("peer write: %d of %d bytes, %v", n, len(b), err)
	}
}

// peerULPDUs returns the ULPDUs the connection sent the peer so far.
func (fc *fuzzConn) peerULPDUs(tb testing.TB) [][]byte {
	tb.Helper()
	var got []byte
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Read(fc.peer, buf)
		if n <= 0 || err != nil {
			break
		}
		got = append(got, buf[:n]...)
	}
	var out [][]byte
	for len(got) > 0 {
		u, n, err := iwarp.ParseFPDU(got, fc.c.crc)
		if err != nil {
			tb.Fatalf("bytes from the connection: %v", err)
		}
		out = append(out, u)
		got = got[n:]
	}
	return out
}

// peerTerminate returns the Terminate the connection sent the peer, and
// the header copy attached to it (from its MPA length field on).
func (fc *fuzzConn) peerTerminate(tb testing.TB) (*iwarp.Terminate, []byte) {
	tb.Helper()
	for _, u := range fc.peerULPDUs(tb) {
		var h iwarp.Header
		if att, err := iwarp.ParseULPDU(u, &h); err == nil && h.Op == iwarp.OpTerminate {
			return &h.Term, att
		}
	}
	return nil, nil
}

// TestRCDirectPlacement: a Send into a posted receive and a two-FPDU
// Write into a region, each cut at several points between what the loop
// was handed and what it reads itself, with CRC off and on. Once an
// FPDU's header is in, its payload so far is in its destination and the
// deframer holds none of it (before direct placement it held the whole
// FPDU until its last byte, and the destination was untouched); at the
// end every byte is in place, the Send completes, and the connection is in
// RTS with nothing pending.
func TestRCDirectPlacement(t *testing.T) {
	const sendLen = directMin + 8<<10
	w1, w2 := pattern(directMin+10000, 1), pattern(20000, 2)
	f1 := iwarp.FPDULen(iwarp.TaggedHeaderLen + len(w1)) // the first Write FPDU
	for _, crc := range []bool{false, true} {
		send := FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, pattern(sendLen, 3), crc)
		for _, tc := range []struct {
			name string
			cut  int // bytes of the stream handed to the loop; the rest it reads
		}{
			{"header", iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen},
			{"header+1000", iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen + 1000},
			{"directMin-left", len(send) - iwarp.CRCLen - directMin},
			{"mid-header", 9},
			{"none", 0},
		} {
			name := "send/" + tc.name
			if crc {
				name += "/crc"
			}
			t.Run(name, func(t *testing.T) {
				fc := newFuzzConnSized(t, crc, directBase)
				defer fc.close()
				fc.c.received(send[:tc.cut])
				if head := iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen; tc.cut > head {
					placed := tc.cut - head
					if got := fc.bufs[0][:placed]; !bytes.Equal(got, send[head:tc.cut]) {
						t.Fatalf("the %d payload bytes handed over are not in the receive yet", placed)
					}
					if n := fc.c.dp.df.Buffered(); n != 0 {
						t.Fatalf("the deframer holds %d bytes of a direct FPDU", n)
					}
				}
				fc.fromPeer(t, send[tc.cut:])
				fc.pump(t)
				if fc.c.state != csRTS {
					t.Fatalf("state %d", fc.c.state)
				}
				var wc [2]fabric.WC
				if n := fc.qp.rcq.Poll(wc[:]); n != 1 || wc[0].Status != fabric.WCSuccess || wc[0].WRID != 0 || wc[0].ByteLen != sendLen {
					t.Fatalf("completions %+v", wc[:n])
				}
				if !bytes.Equal(fc.bufs[0][:sendLen], pattern(sendLen, 3)) {
					t.Fatal("the Send's payload is not in the receive")
				}
				if d := fc.c.dp.dx; d != nil && d.on || fc.c.dp.df.Buffered() != 0 {
					t.Fatalf("pending after the Send: direct %+v, %d bytes buffered", d, fc.c.dp.df.Buffered())
				}
			})
		}
		for _, cut := range []int{16, 16 + 1, 16 + 5000, f1 + 16 + 100, f1 - 2} {
			name := "write/cut=" + strconv.Itoa(cut)
			if crc {
				name += "/crc"
			}
			t.Run(name, func(t *testing.T) {
				fc := newFuzzConnSized(t, crc, directBase)
				defer fc.close()
				wm := fc.mrs[1]
				stream := append(FPDU(iwarp.Header{Op: iwarp.OpWrite, STag: wm.RKey(), TO: wm.Addr() + 100}, w1, crc),
					FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: wm.RKey(), TO: wm.Addr() + 100 + uint64(len(w1))}, w2, crc)...)
				fc.c.received(stream[:cut])
				if placed := cut - 16; placed > 0 && placed < len(w1) {
					if !bytes.Equal(fc.bufs[1][100:100+placed], w1[:placed]) {
						t.Fatalf("the %d payload bytes handed over are not in the region yet", placed)
					}
				}
				fc.fromPeer(t, stream[cut:])
				fc.pump(t)
				if fc.c.state != csRTS {
					t.Fatalf("state %d", fc.c.state)
				}
				want := append(append(make([]byte, 100), w1...), w2...)
				if got := fc.bufs[1][:len(want)]; !bytes.Equal(got, want) {
					t.Fatal("the Write is not in the region")
				}
				if p := fc.c.dp; p.in == nil || p.in.wr.active || (p.dx != nil && p.dx.on) || p.df.Buffered() != 0 {
					t.Fatalf("pending after the Write: inbound %+v, %d bytes buffered", p.in, p.df.Buffered())
				}
			})
		}
	}
}

// TestRCDirectErrors: what ends a direct FPDU ends its connection as the
// deframed path does, and lands nothing it may not: a CRC mismatch found
// when the FPDU's CRC arrives (Terminate LLP/MPA/CRC, the receive
// flushed), a region deregistered while the payload is due (nothing lands
// after DeregMR returns), a bad STag or a receive too small found as the
// header arrives (nothing lands at all).
func TestRCDirectErrors(t *testing.T) {
	const payload = directMin + 8<<10
	type tc struct {
		name     string
		crc      bool
		stream   func(fc *fuzzConn) []byte
		cut      int
		between  func(t *testing.T, fc *fuzzConn) // after the cut is handed over
		term     iwarp.Terminate
		untouch  int // index of the buffer that must hold none of the payload after the cut
		from     int // from this offset on
		at       int // where the offending FPDU starts in the stream
		recvFail bool
	}
	writeTo := func(stag uint32, to uint64) func(fc *fuzzConn) []byte {
		return func(fc *fuzzConn) []byte {
			return FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: stag, TO: to}, pattern(payload, 9), false)
		}
	}
	for _, c := range []tc{
		{
			name: "crc", crc: true, cut: 100, untouch: -1, recvFail: true,
			stream: func(fc *fuzzConn) []byte {
				b := FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, pattern(payload, 4), true)
				b[5000] ^= 0x40
				return b
			},
			term: iwarp.TerminateFor(iwarp.ErrCRC, nil),
		},
		{
			name: "dereg", cut: 1000, untouch: 1,
			stream: func(fc *fuzzConn) []byte { return writeTo(fc.mrs[1].RKey(), fc.mrs[1].Addr())(fc) },
			between: func(t *testing.T, fc *fuzzConn) {
				if d := fc.c.dp.dx; d == nil || !d.on {
					t.Fatal("the Write is not placed directly")
				}
				if err := fc.qp.DeregMR(fc.mrs[1]); err != nil {
					t.Fatal(err)
				}
				clear(fc.bufs[1])
			},
			term: termTSTag,
		},
		{
			name: "bad-stag", cut: 1000, untouch: 1,
			stream: func(fc *fuzzConn) []byte { return writeTo(fc.mrs[1].RKey()^0x100, fc.mrs[1].Addr())(fc) },
			term:   termTSTag,
		},
		{
			name: "no-remote-write", cut: 1000, untouch: 0,
			stream: func(fc *fuzzConn) []byte { return writeTo(fc.mrs[0].RKey(), fc.mrs[0].Addr())(fc) },
			term:   termTSTag,
		},
		{
			name: "out-of-bounds", cut: 1000, untouch: 1,
			stream: func(fc *fuzzConn) []byte {
				return writeTo(fc.mrs[1].RKey(), fc.mrs[1].Addr()+uint64(len(fc.bufs[1]))-payload+1)(fc)
			},
			term: termTBounds,
		},
		{
			// The second FPDU of a Send overflows the 64 KiB receive.
			name: "recv-too-small", cut: iwarp.FPDULen(iwarp.UntaggedHeaderLen+payload) + 1000, untouch: 0, from: payload, recvFail: true,
			at: iwarp.FPDULen(iwarp.UntaggedHeaderLen + payload),
			stream: func(fc *fuzzConn) []byte {
				return append(FPDU(iwarp.Header{Op: iwarp.OpSend, MSN: 1}, pattern(payload, 5), false),
					FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1, MO: payload}, pattern(64<<10-payload+1000, 6), false)...)
			},
			term: termUTNoBuf,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc := newFuzzConnSized(t, c.crc, directBase)
			defer fc.close()
			stream := c.stream(fc)
			fc.c.received(stream[:c.cut])
			if c.between != nil {
				c.between(t, fc)
			}
			if fc.c.state == csRTS {
				fc.fromPeer(t, stream[c.cut:])
				fc.pump(t)
			}
			if fc.c.state == csRTS {
				t.Fatal("the connection is still in RTS")
			}
			if c.untouch >= 0 {
				if k := bytes.IndexFunc(fc.bufs[c.untouch][c.from:], func(r rune) bool { return r != 0 }); k >= 0 {
					t.Fatalf("payload landed in buffer %d at %d", c.untouch, c.from+k)
				}
			}
			term, att := fc.peerTerminate(t)
			if term == nil || term.Layer != c.term.Layer || term.EType != c.term.EType || term.ECode != c.term.ECode {
				t.Fatalf("Terminate %+v, want %+v", term, c.term)
			}
			// The header copy carries the ULPDU length the peer sent,
			// although only the FPDU's start was in when it was judged.
			if term.M {
				if at := stream[c.at:]; len(att) < 2+iwarp.TaggedHeaderLen || !bytes.Equal(att, at[:len(att)]) {
					t.Fatalf("attached header % x, the FPDU starts % x", att, at[:min(len(at), len(att))])
				}
			} else if c.term != iwarp.TerminateFor(iwarp.ErrCRC, nil) {
				t.Fatal("no header copy attached")
			}
			if c.recvFail {
				var wc [1]fabric.WC
				if n := fc.qp.rcq.Poll(wc[:]); n != 1 || wc[0].WRID != 0 || wc[0].Status == fabric.WCSuccess {
					t.Fatalf("receive completions %+v", wc[:n])
				}
			}
		})
	}
}

// FuzzRCReceiveDirect is FuzzRCReceive with regions and receives large
// enough for direct placement, and a differential check: the bytes handed
// over in two pieces (so that long FPDUs are placed directly) leave the
// receive buffers and regions as the same bytes handed over whole (every
// FPDU deframed), whenever both connections end in RTS with nothing
// pending. With CRC off, a connection that ended must have ended in both.
func FuzzRCReceiveDirect(f *testing.F) {
	probe := newFuzzConnSized(f, false, directBase)
	wm := probe.mrs[1]
	probe.close()
	send := FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, pattern(directMin+6000, 1), false)
	write := append(FPDU(iwarp.Header{Op: iwarp.OpWrite, STag: wm.RKey(), TO: wm.Addr()}, pattern(directMin+9000, 2), false),
		FPDU(iwarp.Header{Op: iwarp.OpWrite, Last: true, STag: wm.RKey(), TO: wm.Addr() + directMin + 9000}, pattern(5000, 3), false)...)
	f.Add(false, uint16(40), send)
	f.Add(false, uint16(300), append(write, send...))
	f.Add(true, uint16(300), FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, pattern(directMin+7000, 4), true))
	// Predicted FPDUs (rc_rxpredict.go): a Send of three FPDUs whose last
	// is shorter than predicted, and a Send after it.
	pred, _ := sendMsg(1, pattern(2*(directMin+1000)+3000, 5), directMin+1000, false)
	after, _ := sendMsg(2, pattern(5000, 6), directMin, false)
	f.Add(false, uint16(40), append(pred, after...))
	f.Fuzz(func(t *testing.T, crc bool, split uint16, data []byte) {
		k := min(int(split), len(data))
		a, b := newFuzzConnSized(t, crc, directBase), newFuzzConnSized(t, crc, directBase)
		defer a.close()
		defer b.close()
		if a.mrs[1].RKey() != b.mrs[1].RKey() || a.mrs[1].Addr() != b.mrs[1].Addr() {
			t.Fatal("the two connections' regions differ")
		}
		a.c.received(data[:k])
		if a.c.state == csRTS && len(data) > k {
			if _, err := unix.Write(a.peer, data[k:]); err != nil {
				t.Skip(err)
			}
			a.pump(t)
		}
		b.c.received(data)
		quiet := func(fc *fuzzConn) bool {
			p := fc.c.dp
			return fc.c.state == csRTS && !p.dead && (p.dx == nil || !p.dx.on) && p.df.Buffered() == 0
		}
		if a.c.state == csRTS && a.c.dp.dead || b.c.state == csRTS && b.c.dp.dead {
			t.Fatal("data path dead on a live connection")
		}
		if !crc && (a.c.state == csRTS) != (b.c.state == csRTS) && quiet(a) {
			t.Fatalf("split: state %d, whole: state %d", a.c.state, b.c.state)
		}
		if quiet(a) && quiet(b) {
			wa, wb := a.recvTails(), b.recvTails()
			if len(wa) != len(wb) {
				t.Fatalf("receives: split %v, whole %v", wa, wb)
			}
			for i := range a.bufs {
				ba, bb := bytes.Clone(a.bufs[i]), bytes.Clone(b.bufs[i])
				// A receive holds stream bytes past its message where a
				// prediction was wrong (rc_rxpredict.go): only its
				// message's bytes count.
				if r, ok := wa[uint64(i)]; ok {
					if r != wb[uint64(i)] {
						t.Fatalf("receive %d: split %v, whole %v", i, r, wb[uint64(i)])
					}
					clear(ba[r[0]:r[1]])
					clear(bb[r[0]:r[1]])
				}
				if !bytes.Equal(ba, bb) {
					t.Fatalf("buffer %d differs between split and whole", i)
				}
			}
		}
	})
}

// recvTails returns, by WRID, the part of each receive past what its
// message placed in it: of the receives completed (their completions
// taken off the queue), from ByteLen on; of the one being placed, from
// what is placed so far. A receive the fuzz connection posted for WRID k
// is bufs[k]'s start.
func (fc *fuzzConn) recvTails() map[uint64][2]int {
	out := map[uint64][2]int{}
	var wc [8]fabric.WC
	for {
		n := fc.qp.rcq.Poll(wc[:])
		for _, w := range wc[:n] {
			if w.WRID < uint64(len(fc.bufs)) {
				out[w.WRID] = [2]int{int(w.ByteLen), len(fc.bufs[0]) / 4 << w.WRID}
			}
		}
		if n == 0 {
			break
		}
	}
	if in := fc.c.dp.in; in != nil && in.rcv.active && in.rcv.wr.WRID < uint64(len(fc.bufs)) {
		out[in.rcv.wr.WRID] = [2]int{in.rcv.placed, len(in.rcv.wr.Buf)}
	}
	return out
}

// collect reads what the connection sends the peer, letting the
// connection write more each time the peer made room (the loop's EPOLLOUT
// report, made by hand), until want bytes came or nothing moves.
func (fc *fuzzConn) collect(tb testing.TB, want int) []byte {
	tb.Helper()
	var got []byte
	buf := make([]byte, 64<<10)
	for idle := 0; len(got) < want && idle < 100; {
		n, err := unix.Read(fc.peer, buf)
		if n > 0 {
			got = append(got, buf[:n]...)
			idle = 0
		} else if err != nil && err != unix.EAGAIN {
			tb.Fatal(err)
		} else {
			idle++
		}
		fc.c.onEvents(poll.Out)
	}
	return got
}

// TestRCDirectSend: long Sends and Writes go out as FPDUs built around
// the region's bytes, without passing through the connection's tx buffer
// when the socket takes them whole (before, every byte was copied into tx
// first), and intact when it does not (what is left is kept in tx from an
// FPDU's start): every FPDU parses with its CRC, carries the right
// header, pad and payload, and the sends complete.
func TestRCDirectSend(t *testing.T) {
	const size = 300 << 10 // several FPDUs, more than one writev batch
	for _, crc := range []bool{false, true} {
		for _, sndbuf := range []int{4 << 20, 8 << 10} {
			name := "roomy"
			if sndbuf < size {
				name = "stalling"
			}
			if crc {
				name += "/crc"
			}
			t.Run(name, func(t *testing.T) {
				fc := newFuzzConnSized(t, crc, directBase)
				defer fc.close()
				for _, fd := range []int{fc.c.fd, fc.peer} {
					_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, sndbuf)
					_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, sndbuf)
				}
				fc.c.dp.maxUntag, fc.c.dp.maxTagged = 65000-iwarp.UntaggedHeaderLen-2, 65000-iwarp.TaggedHeaderLen-1
				src := pattern(size+3, 7)
				m, err := fc.qp.RegMR(src, fabric.AccessLocalWrite)
				if err != nil {
					t.Fatal(err)
				}
				wrs := []fabric.SendWR{
					{WRID: 1, Opcode: fabric.WRSend, Buf: src[:size], MR: m, Flags: fabric.SendSignaled},
					{WRID: 2, Opcode: fabric.WRWrite, Buf: src[3:], MR: m, RKey: 0x1234, RemoteAddr: 0x1000, Flags: fabric.SendSignaled},
				}
				for k := range wrs {
					if err := fc.qp.PostSend(&wrs[k]); err != nil {
						t.Fatal(err)
					}
				}
				if sndbuf > size && cap(fc.c.dp.tx) != 0 {
					t.Fatalf("a socket with room for everything, and %d bytes of tx allocated", cap(fc.c.dp.tx))
				}
				if sndbuf < size && !fc.c.out {
					t.Fatal("the socket never filled")
				}
				got := fc.collect(t, 2*size+1000)
				var send, write []byte
				for len(got) > 0 {
					u, n, err := iwarp.ParseFPDU(got, crc)
					if err != nil {
						t.Fatalf("FPDU at %d bytes from the end: %v", len(got), err)
					}
					if pad := got[iwarp.LengthFieldLen+len(u) : n-iwarp.CRCLen]; !bytes.Equal(pad, make([]byte, len(pad))) {
						t.Fatalf("pad % x", pad)
					}
					got = got[n:]
					var h iwarp.Header
					p, err := iwarp.ParseULPDU(u, &h)
					if err != nil {
						t.Fatal(err)
					}
					switch h.Op {
					case iwarp.OpSend:
						if h.MSN != 1 || int(h.MO) != len(send) || h.Last != (len(send)+len(p) == size) {
							t.Fatalf("Send FPDU %+v after %d bytes", h, len(send))
						}
						send = append(send, p...)
					case iwarp.OpWrite:
						if h.STag != 0x1234 || h.TO != 0x1000+uint64(len(write)) || h.Last != (len(write)+len(p) == size) {
							t.Fatalf("Write FPDU %+v after %d bytes", h, len(write))
						}
						write = append(write, p...)
					default:
						t.Fatalf("opcode %v", h.Op)
					}
				}
				if !bytes.Equal(send, src[:size]) || !bytes.Equal(write, src[3:]) {
					t.Fatalf("payloads: Send %d bytes, Write %d bytes, not the region's", len(send), len(write))
				}
				var wc [3]fabric.WC
				if n := fc.qp.scq.Poll(wc[:]); n != 2 || wc[0].WRID != 1 || wc[1].WRID != 2 || wc[0].Status != fabric.WCSuccess || wc[1].Status != fabric.WCSuccess {
					t.Fatalf("send completions %+v", wc[:n])
				}
			})
		}
	}
}

// TestRCDirectSendTail: a long message's short last FPDU goes out in the
// direct writev with the rest, and so do the long messages after it: with
// room in the socket, nothing is copied into tx (before, the last FPDU
// went through fill, which copied it and the next messages' FPDUs there).
func TestRCDirectSendTail(t *testing.T) {
	const size = 70000 // one full FPDU and a last one under txDirectMin
	fc := newFuzzConnSized(t, false, directBase)
	defer fc.close()
	fc.roomySocket()
	fc.c.dp.maxUntag = 65000 - iwarp.UntaggedHeaderLen - 2
	src := pattern(2*size, 8)
	m, err := fc.qp.RegMR(src, fabric.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	wrs := []fabric.SendWR{
		{WRID: 1, Opcode: fabric.WRSend, Buf: src[:size], MR: m, Flags: fabric.SendSignaled},
		{WRID: 2, Opcode: fabric.WRSend, Buf: src[size:], MR: m, Flags: fabric.SendSignaled},
	}
	for k := range wrs {
		if err := fc.qp.PostSend(&wrs[k]); err != nil {
			t.Fatal(err)
		}
	}
	got := fc.collect(t, 2*size+200)
	if c := cap(fc.c.dp.tx); c != 0 {
		t.Fatalf("%d bytes of tx allocated with room in the socket", c)
	}
	var payload []byte
	var fpdus int
	for len(got) > 0 {
		u, n, err := iwarp.ParseFPDU(got, false)
		if err != nil {
			t.Fatal(err)
		}
		got = got[n:]
		var h iwarp.Header
		p, err := iwarp.ParseULPDU(u, &h)
		if err != nil || h.Op != iwarp.OpSend {
			t.Fatalf("%+v, %v", h, err)
		}
		payload = append(payload, p...)
		fpdus++
	}
	if fpdus != 4 || !bytes.Equal(payload, src) {
		t.Fatalf("%d FPDUs, payload intact %v", fpdus, bytes.Equal(payload, src))
	}
	var wc [3]fabric.WC
	if n := fc.qp.scq.Poll(wc[:]); n != 2 || wc[0].WRID != 1 || wc[1].WRID != 2 || wc[0].Status != fabric.WCSuccess || wc[1].Status != fabric.WCSuccess {
		t.Fatalf("send completions %+v", wc[:n])
	}
}
