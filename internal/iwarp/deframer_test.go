package iwarp

import (
	"bytes"
	"errors"
	"testing"
)

// goldenStream is the CRC-off golden FPDUs back to back, and their ULPDUs.
func goldenStream() (stream []byte, ulpdus [][]byte) {
	for _, g := range allGoldenFPDUs {
		if g.crc {
			continue
		}
		stream = append(stream, g.b...)
		ulen := int(g.b[0])<<8 | int(g.b[1])
		ulpdus = append(ulpdus, g.b[2:2+ulen])
	}
	return stream, ulpdus
}

// drain calls Next until ErrShort and returns copies of the ULPDUs.
func drain(t *testing.T, d *Deframer) [][]byte {
	t.Helper()
	var out [][]byte
	for {
		u, err := d.Next()
		if err == ErrShort {
			return out
		}
		if err != nil {
			t.Fatalf("Next: %v", err)
		}
		out = append(out, bytes.Clone(u))
	}
}

func equalULPDUs(t *testing.T, got, want [][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d ULPDUs, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("ULPDU %d\n got % x\nwant % x", i, got[i], want[i])
		}
	}
}

func TestDeframerChunkSizes(t *testing.T) {
	stream, want := goldenStream()
	if len(want) != 6 {
		t.Fatalf("golden stream has %d FPDUs, want 6", len(want))
	}
	for _, chunk := range []int{1, 2, 3, 7, 20, 51, len(stream)} {
		var d Deframer
		var got [][]byte
		for off := 0; off < len(stream); off += chunk {
			end := min(off+chunk, len(stream))
			if n, err := d.Write(stream[off:end]); err != nil || n != end-off {
				t.Fatalf("chunk %d: Write = %d, %v", chunk, n, err)
			}
			got = append(got, drain(t, &d)...)
		}
		equalULPDUs(t, got, want)
		if d.Buffered() != 0 {
			t.Errorf("chunk %d: %d bytes left buffered", chunk, d.Buffered())
		}
	}
}

func TestDeframerCRC(t *testing.T) {
	d := NewDeframer(true)
	if !d.CRC() {
		t.Fatal("NewDeframer(true).CRC() = false")
	}
	_, _ = d.Write(cat(goldenSend1CRC, goldenWriteRTRCRC))
	equalULPDUs(t, drain(t, d), [][]byte{goldenSend1CRC[2:21], goldenWriteRTRCRC[2:16]})

	// A damaged FPDU stops the Deframer for good, until Reset.
	bad := bytes.Clone(goldenWriteRTRCRC)
	bad[9] ^= 0x80
	_, _ = d.Write(cat(bad, goldenSend1CRC))
	if u, err := d.Next(); err != ErrCRC || u != nil {
		t.Fatalf("damaged FPDU: Next = % x, %v; want nil, ErrCRC", u, err)
	}
	if _, err := d.Next(); err != ErrCRC {
		t.Errorf("Next after ErrCRC = %v, want ErrCRC", err)
	}
	if n, err := d.Write([]byte{1}); n != 0 || err != ErrCRC {
		t.Errorf("Write after ErrCRC = %d, %v; want 0, ErrCRC", n, err)
	}
	if err := d.Err(); err != ErrCRC {
		t.Errorf("Err() = %v, want ErrCRC", err)
	}
	if d.Buffered() != len(goldenSend1CRC) {
		t.Errorf("Buffered after ErrCRC = %d, want %d (the FPDU after the damaged one)", d.Buffered(), len(goldenSend1CRC))
	}
	d.Reset()
	if d.Err() != nil || d.Buffered() != 0 || !d.CRC() {
		t.Errorf("after Reset: Err %v, Buffered %d, CRC %v", d.Err(), d.Buffered(), d.CRC())
	}
	_, _ = d.Write(goldenWriteRTRCRC)
	equalULPDUs(t, drain(t, d), [][]byte{goldenWriteRTRCRC[2:16]})

	// SetCRC(false) stops checking.
	d.SetCRC(false)
	_, _ = d.Write(bad)
	equalULPDUs(t, drain(t, d), [][]byte{bad[2:16]})
}

func TestDeframerBatchValidity(t *testing.T) {
	// ULPDUs from successive Next calls stay valid until the next Write.
	stream, want := goldenStream()
	var d Deframer
	_, _ = d.Write(stream)
	var got [][]byte
	for {
		u, err := d.Next()
		if err != nil {
			break
		}
		got = append(got, u)
	}
	equalULPDUs(t, got, want)
}

func TestDeframerWriteSpace(t *testing.T) {
	stream, want := goldenStream()
	var d Deframer
	var got [][]byte
	for off := 0; off < len(stream); {
		space := d.WriteSpace(16)
		if len(space) < 16 {
			t.Fatalf("WriteSpace(16) gave %d bytes", len(space))
		}
		n := copy(space[:min(len(space), 13)], stream[off:])
		if err := d.Commit(n); err != nil {
			t.Fatalf("Commit(%d): %v", n, err)
		}
		off += n
		got = append(got, drain(t, &d)...)
	}
	equalULPDUs(t, got, want)

	space := d.WriteSpace(4)
	if err := d.Commit(len(space) + 1); err != ErrCommit {
		t.Errorf("Commit beyond space = %v, want ErrCommit", err)
	}
	if err := d.Commit(-1); err != ErrCommit {
		t.Errorf("Commit(-1) = %v, want ErrCommit", err)
	}
	// Commits from one WriteSpace may come in pieces, but not add up to
	// more than it gave.
	copy(space, goldenWriteRTR[:4])
	if err := d.Commit(1); err != nil {
		t.Fatal(err)
	}
	if err := d.Commit(len(space)); err != ErrCommit {
		t.Errorf("Commit of the whole space after 1 byte = %v, want ErrCommit", err)
	}
	if err := d.Commit(3); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Next(); err != ErrShort {
		t.Fatalf("Next on 4 bytes = %v, want ErrShort", err)
	}
	if err := d.Commit(1); err != ErrCommit {
		t.Errorf("Commit after Next = %v, want ErrCommit", err)
	}
	if d.Buffered() != 4 {
		t.Errorf("Buffered = %d, want 4", d.Buffered())
	}
	_, _ = d.Write(goldenWriteRTR[4:])
	equalULPDUs(t, drain(t, &d), [][]byte{goldenWriteRTR[2:16]})
}

func TestDeframerDoesNotAllocate(t *testing.T) {
	stream, _ := goldenStream()
	big, _ := AppendFPDU(nil, goldenSend100[2:20], seqBytes(MaxULPDU-UntaggedHeaderLen), true)
	d := NewDeframer(false)
	run := func() {
		for off := 0; off < len(stream); off += 37 {
			_, _ = d.Write(stream[off:min(off+37, len(stream))])
			for {
				if _, err := d.Next(); err != nil {
					break
				}
			}
		}
	}
	run() // warm up the buffer
	if allocs := testing.AllocsPerRun(50, run); allocs != 0 {
		t.Errorf("Deframer allocates %v times per stream (CRC off)", allocs)
	}
	d.SetCRC(true)
	runBig := func() {
		for off := 0; off < len(big); off += 1500 {
			space := d.WriteSpace(1500)
			_ = d.Commit(copy(space[:1500], big[off:]))
			for {
				if _, err := d.Next(); err != nil {
					break
				}
			}
		}
	}
	runBig()
	if allocs := testing.AllocsPerRun(20, runBig); allocs != 0 {
		t.Errorf("Deframer allocates %v times per 64 KiB FPDU (CRC on)", allocs)
	}
	if d.Err() != nil || d.Buffered() != 0 {
		t.Errorf("after max FPDUs: Err %v, Buffered %d", d.Err(), d.Buffered())
	}
}

// TestDeframerPeekDiscard: a caller that takes an FPDU over from its header
// (Peek) and Discards what it took finds the next FPDU whole; Discard
// refuses more than is buffered, consuming nothing.
func TestDeframerPeekDiscard(t *testing.T) {
	stream, ulpdus := goldenStream()
	first := FPDULen(len(ulpdus[0]))
	var d Deframer
	if _, err := d.Write(stream[:first+3]); err != nil {
		t.Fatal(err)
	}
	if got := d.Peek(); !bytes.Equal(got, stream[:first+3]) {
		t.Fatalf("Peek % x", got)
	}
	if err := d.Discard(first + 4); !errors.Is(err, ErrCommit) {
		t.Fatalf("Discard beyond the buffer: %v", err)
	}
	if err := d.Discard(first); err != nil {
		t.Fatal(err)
	}
	if d.Buffered() != 3 {
		t.Fatalf("%d bytes buffered", d.Buffered())
	}
	if _, err := d.Write(stream[first+3:]); err != nil {
		t.Fatal(err)
	}
	equalULPDUs(t, drain(t, &d), ulpdus[1:])
}

// TestCRC32cUpdate: the CRC of an FPDU summed piece by piece is the CRC of
// the whole.
func TestCRC32cUpdate(t *testing.T) {
	b := []byte("an FPDU whose bytes arrive in pieces, some long and some short")
	for cut := range len(b) + 1 {
		if got, want := CRC32cUpdate(CRC32cUpdate(0, b[:cut]), b[cut:]), CRC32c(b); got != want {
			t.Fatalf("cut %d: %#x, want %#x", cut, got, want)
		}
	}
}
