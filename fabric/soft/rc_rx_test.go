package soft

import (
	"bytes"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// TestRCReadSpare: a connection in RTS reads into its deframer's spare
// room (readSpare), not into readable's 16 KiB stack buffer, which was
// zeroed on every read and copied out of (finding 17, second step). A
// Send that fits the room is read there in one read and placed, and the
// deframer does not grow; one that does not fit is finished by the stack
// read; a deframer with no room leaves the read to the stack buffer; a
// CRC mismatch read there terminates with nothing placed.
func TestRCReadSpare(t *testing.T) {
	const base = 64 << 10 // receives: WRID 0 16 KiB, WRID 1 32 KiB
	var reads []int
	spareReadHook = func(n int) { reads = append(reads, n) }
	defer func() { spareReadHook = nil }()
	for _, crc := range []bool{false, true} {
		name := "crc=off"
		if crc {
			name = "crc=on"
		}
		first := func(n int) []byte {
			return FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 1}, pattern(n, 1), crc)
		}
		second := FPDU(iwarp.Header{Op: iwarp.OpSend, Last: true, MSN: 2}, pattern(4<<10, 2), crc)
		placed := func(t *testing.T, fc *fuzzConn) {
			t.Helper()
			var wc [2]fabric.WC
			if n := fc.qp.rcq.Poll(wc[:]); n != 1 || wc[0].Status != fabric.WCSuccess || wc[0].WRID != 1 || wc[0].ByteLen != 4<<10 {
				t.Fatalf("completions %+v", wc[:n])
			}
			if !bytes.Equal(fc.bufs[1][:4<<10], pattern(4<<10, 2)) {
				t.Fatal("the Send's payload is not in the receive")
			}
		}
		// prime hands the connection a first Send as the stack read does,
		// which sizes the deframer, and returns its room.
		prime := func(t *testing.T, fc *fuzzConn, n int) int {
			t.Helper()
			fc.c.received(first(n))
			var wc [2]fabric.WC
			if k := fc.qp.rcq.Poll(wc[:]); k != 1 || wc[0].WRID != 0 || wc[0].Status != fabric.WCSuccess {
				t.Fatalf("first Send: %+v", wc[:k])
			}
			return len(fc.c.dp.df.WriteSpace(0))
		}
		t.Run(name+"/fits", func(t *testing.T) {
			fc := newFuzzConnSized(t, crc, base)
			defer fc.close()
			room := prime(t, fc, 4<<10)
			if room < len(second) {
				t.Fatalf("room %d after a 4 KiB Send, want at least %d", room, len(second))
			}
			reads = reads[:0]
			fc.fromPeer(t, second)
			if !fc.c.readable(nil) {
				t.Fatal("readable read nothing")
			}
			if len(reads) != 1 || reads[0] != len(second) {
				t.Fatalf("spare reads %v, want one of %d bytes", reads, len(second))
			}
			placed(t, fc)
			if got := len(fc.c.dp.df.WriteSpace(0)); got != room {
				t.Fatalf("deframer room %d after the read, want %d (not grown)", got, room)
			}
		})
		t.Run(name+"/overflows", func(t *testing.T) {
			fc := newFuzzConnSized(t, crc, base)
			defer fc.close()
			room := prime(t, fc, 64)
			if room < spareMin || room >= len(second) {
				t.Fatalf("room %d after a 64 B Send", room)
			}
			reads = reads[:0]
			fc.fromPeer(t, second)
			fc.c.readable(nil)
			if len(reads) != 1 || reads[0] != room {
				t.Fatalf("spare reads %v, want one of %d bytes", reads, room)
			}
			placed(t, fc)
		})
		t.Run(name+"/no-room", func(t *testing.T) {
			fc := newFuzzConnSized(t, crc, base)
			defer fc.close()
			reads = reads[:0]
			fc.fromPeer(t, first(64))
			fc.c.readable(nil)
			if len(reads) != 0 {
				t.Fatalf("spare reads %v into an empty deframer", reads)
			}
			var wc [2]fabric.WC
			if k := fc.qp.rcq.Poll(wc[:]); k != 1 || wc[0].WRID != 0 || wc[0].Status != fabric.WCSuccess {
				t.Fatalf("first Send: %+v", wc[:k])
			}
		})
		if !crc {
			continue
		}
		t.Run(name+"/bad-crc", func(t *testing.T) {
			fc := newFuzzConnSized(t, crc, base)
			defer fc.close()
			prime(t, fc, 4<<10)
			bad := bytes.Clone(second)
			bad[len(bad)-1] ^= 1
			reads = reads[:0]
			fc.fromPeer(t, bad)
			fc.c.readable(nil)
			if len(reads) != 1 {
				t.Fatalf("spare reads %v", reads)
			}
			if fc.c.state == csRTS {
				t.Fatal("a CRC mismatch left the connection in RTS")
			}
			if !bytes.Equal(fc.bufs[1][:4<<10], make([]byte, 4<<10)) {
				t.Fatal("bytes of an FPDU whose CRC failed landed in the receive")
			}
			if term, _ := fc.peerTerminate(t); term == nil {
				t.Fatal("no Terminate sent")
			}
		})
	}
}
