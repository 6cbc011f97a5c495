package soft

import (
	"bytes"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// Predicted placement (rc_rxpredict.go): one readv reads several FPDUs of
// a long Send, their payloads straight into the posted receive.

// sendMsg returns the FPDUs of a Send message with MSN msn carrying
// payload, cut into FPDUs of seg payload bytes (the last shorter), and
// where each FPDU starts in the returned stream.
func sendMsg(msn uint32, payload []byte, seg int, crc bool) (b []byte, starts []int) {
	for off := 0; off < len(payload) || off == 0; {
		n := min(seg, len(payload)-off)
		starts = append(starts, len(b))
		b = append(b, FPDU(iwarp.Header{Op: iwarp.OpSend, MSN: msn, MO: uint32(off), Last: off+n == len(payload)}, payload[off:off+n], crc)...)
		off += n
		if n == 0 {
			break
		}
	}
	return b, starts
}

// roomySocket lets the peer write a few hundred KiB at once.
func (fc *fuzzConn) roomySocket() {
	for _, fd := range []int{fc.c.fd, fc.peer} {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
}

// countReads counts readMore's reads until the test ends.
func countReads(t *testing.T) *int {
	n := new(int)
	rxReadHook = func(int) { *n++ }
	t.Cleanup(func() { rxReadHook = nil })
	return n
}

// TestRCPredictPlacement: three Sends, of 4, 4 and 4 FPDUs. The first
// fills its 64 KiB receive exactly (every FPDU after the first predicted
// right), the second ends 67 KiB short of its 128 KiB receive (its last
// FPDU predicted wrong: what was read from its header on goes through the
// deframer), the third follows. The stream is handed to the connection
// whole, or written in pieces cut inside an FPDU's CRC, its length field,
// its header and its payload, each piece read before the next is written;
// CRC off and on. Every message completes with its bytes, nothing lands
// outside the receives, and the deframer ends empty.
func TestRCPredictPlacement(t *testing.T) {
	const seg = 20000
	m1, m2, m3 := pattern(64<<10, 1), pattern(3*seg+1000, 2), pattern(90000, 3)
	for _, crc := range []bool{false, true} {
		s1, st1 := sendMsg(1, m1, seg, crc)
		s2, _ := sendMsg(2, m2, seg, crc)
		s3, _ := sendMsg(3, m3, 30000, crc)
		stream := append(append(append([]byte(nil), s1...), s2...), s3...)
		f2 := st1[1] // the second FPDU of the first message
		for _, tc := range []struct {
			name string
			cuts []int // where the peer's writes end; each is read before the next
		}{
			{"whole", nil},
			{"in-crc", []int{f2 - 3}},
			{"in-length", []int{f2 + 1}},
			{"in-header", []int{f2 + 9}},
			{"header-only", []int{f2 + iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen}},
			{"in-payload", []int{f2 + 5000, st1[2] + 7}},
			{"many", []int{4000, f2 + 12, 25000, st1[3] - 1, len(s1) + 100, len(s1) + 30000, len(s1) + len(s2) - 2}},
		} {
			name := tc.name
			if crc {
				name += "/crc"
			}
			t.Run(name, func(t *testing.T) {
				fc := newFuzzConnSized(t, crc, directBase)
				defer fc.close()
				fc.roomySocket()
				reads := countReads(t)
				head := iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen
				fc.c.received(stream[:head]) // the first header: its payload goes direct
				at := head
				for _, cut := range append(tc.cuts, len(stream)) {
					fc.fromPeer(t, stream[at:cut])
					fc.pump(t)
					at = cut
				}
				if fc.c.state != csRTS {
					t.Fatalf("state %d", fc.c.state)
				}
				var wc [4]fabric.WC
				n := fc.qp.rcq.Poll(wc[:])
				want := []struct {
					wrid uint64
					msg  []byte
					buf  []byte
				}{{0, m1, fc.bufs[0]}, {1, m2, fc.bufs[1]}, {3, m3, fc.bufs[3]}}
				if n != len(want) {
					t.Fatalf("completions %+v", wc[:n])
				}
				for k, w := range want {
					if wc[k].Status != fabric.WCSuccess || wc[k].WRID != w.wrid || int(wc[k].ByteLen) != len(w.msg) {
						t.Fatalf("completion %d: %+v", k, wc[k])
					}
					if !bytes.Equal(w.buf[:len(w.msg)], w.msg) {
						t.Fatalf("message %d is not in its receive", k+1)
					}
				}
				// Nothing past the receives (64 KiB, 128 KiB, 512 KiB).
				for k, r := range map[int]int{0: 64 << 10, 1: 128 << 10, 3: 512 << 10} {
					if i := bytes.IndexFunc(fc.bufs[k][r:], func(r rune) bool { return r != 0 }); i >= 0 {
						t.Fatalf("bytes landed in region %d at %d, past its receive", k, r+i)
					}
				}
				if d := fc.c.dp.dx; d == nil || d.on || fc.c.dp.df.Buffered() != 0 {
					t.Fatalf("after the stream: direct FPDU pending, %d bytes buffered", fc.c.dp.df.Buffered())
				}
				if tc.cuts == nil && *reads > 6 {
					t.Fatalf("%d reads for %d bytes in 12 FPDUs", *reads, len(stream))
				}
			})
		}
	}
}

// TestRCPredictLies: a predicted FPDU whose header says otherwise than
// predicted, or which fails the receive's checks, ends the connection as
// the deframed path does (the same Terminate, the receive failed), and
// lands nothing outside the receive; a predicted FPDU whose CRC is wrong
// terminates with a CRC error.
func TestRCPredictLies(t *testing.T) {
	const seg = 20000
	msg := pattern(3*seg, 4)
	for _, c := range []struct {
		name string
		crc  bool
		hdr  iwarp.Header // the second FPDU's header
		plen int          // its payload
		flip bool         // a payload byte of the second FPDU changed after its CRC
		term iwarp.Terminate
	}{
		{name: "msn", hdr: iwarp.Header{Op: iwarp.OpSend, MSN: 2, MO: seg}, plen: seg, term: termUTMSNRange},
		{name: "mo", hdr: iwarp.Header{Op: iwarp.OpSend, MSN: 1, MO: seg + 8}, plen: seg, term: termUTMO},
		{name: "too-long", hdr: iwarp.Header{Op: iwarp.OpSend, MSN: 1, MO: seg}, plen: 64<<10 - seg + 1, term: termUTNoBuf},
		{name: "crc", crc: true, hdr: iwarp.Header{Op: iwarp.OpSend, MSN: 1, MO: seg}, plen: seg, flip: true,
			term: iwarp.TerminateFor(iwarp.ErrCRC, nil)},
	} {
		t.Run(c.name, func(t *testing.T) {
			fc := newFuzzConnSized(t, c.crc, directBase)
			defer fc.close()
			fc.roomySocket()
			first := FPDU(iwarp.Header{Op: iwarp.OpSend, MSN: 1}, msg[:seg], c.crc)
			second := FPDU(c.hdr, pattern(c.plen, 5), c.crc)
			if c.flip {
				second[100] ^= 0x10
			}
			third := FPDU(iwarp.Header{Op: iwarp.OpSend, MSN: 1, MO: uint32(seg + c.plen), Last: true}, msg[:seg], c.crc)
			stream := append(append(first, second...), third...)
			head := iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen
			fc.c.received(stream[:head])
			if d := fc.c.dp.dx; d == nil || !d.on {
				t.Fatal("the first FPDU is not placed directly")
			}
			fc.fromPeer(t, stream[head:])
			fc.pump(t)
			if fc.c.state == csRTS {
				t.Fatal("the connection is still in RTS")
			}
			if !bytes.Equal(fc.bufs[0][:seg], msg[:seg]) {
				t.Fatal("the first FPDU is not in the receive")
			}
			if i := bytes.IndexFunc(fc.bufs[0][64<<10:], func(r rune) bool { return r != 0 }); i >= 0 {
				t.Fatalf("bytes landed past the receive at %d", 64<<10+i)
			}
			for _, k := range []int{1, 2, 3} {
				if i := bytes.IndexFunc(fc.bufs[k], func(r rune) bool { return r != 0 }); i >= 0 {
					t.Fatalf("bytes landed in region %d at %d", k, i)
				}
			}
			term, _ := fc.peerTerminate(t)
			if term == nil || term.Layer != c.term.Layer || term.EType != c.term.EType || term.ECode != c.term.ECode {
				t.Fatalf("Terminate %+v, want %+v", term, c.term)
			}
			var wc [2]fabric.WC
			if n := fc.qp.rcq.Poll(wc[:]); n < 1 || wc[0].WRID != 0 || wc[0].Status == fabric.WCSuccess {
				t.Fatalf("receive completions %+v", wc[:n])
			}
		})
	}
}

// TestRCPredictReadCount pins the gain: a Send of up to 1 MiB in FPDUs
// of 32 000 bytes (loopback's size) into a receive of its size, handed
// over in one piece, is read with one system call, as a 1 MiB read(2)
// takes it from TCP; not one per FPDU (finding 23), nor one per 256 KiB
// (finding 34 in BENCHMARKS.md: 2 reads at 512 KiB, 5 at 1 MiB).
func TestRCPredictReadCount(t *testing.T) {
	const seg = 32000
	for _, size := range []int{512 << 10, 1 << 20} {
		t.Run(strconv.Itoa(size>>10)+"KiB", func(t *testing.T) {
			fc := newFuzzConnSized(t, false, 4*size) // receive 0: size bytes
			defer fc.close()
			fc.roomySocket()
			msg := pattern(size, 6)
			s, starts := sendMsg(1, msg, seg, false)
			reads := countReads(t)
			head := iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen
			fc.c.received(s[:head])
			fc.fromPeer(t, s[head:])
			fc.pump(t)
			var wc [1]fabric.WC
			if n := fc.qp.rcq.Poll(wc[:]); n != 1 || wc[0].Status != fabric.WCSuccess || int(wc[0].ByteLen) != len(msg) {
				t.Fatalf("completions %+v", wc[:n])
			}
			if !bytes.Equal(fc.bufs[0][:len(msg)], msg) {
				t.Fatal("the message is not in the receive")
			}
			if *reads != 1 {
				t.Fatalf("%d reads for %d FPDUs (%d bytes), want 1", *reads, len(starts), len(s))
			}
		})
	}
}
