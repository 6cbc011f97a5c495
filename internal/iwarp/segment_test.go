package iwarp

import (
	"bytes"
	"errors"
	"testing"
)

func TestMaxPayload(t *testing.T) {
	tests := []struct {
		seg  int
		op   Opcode
		want int
	}{
		{1448, OpSend, 1424},         // Ethernet MSS: 1448 - 2 - 18 - 4
		{1448, OpWrite, 1428},        // 1448 - 2 - 14 - 4
		{1448, OpReadResponse, 1428}, //
		{1460, OpSend, 1432},         // rounded down to 1456 first
		{65483, OpSend, 65456},       // loopback MSS, rounded to 65480
		{65483, OpWrite, 65460},      //
		{1 << 20, OpSend, 65516},     // capped by ULPDU_Length 65535, kept pad-free
		{1 << 20, OpWrite, 65520},    //
		{32, OpSend, 8},              //
		{31, OpSend, 0},              // 24 bytes leave no payload room
		{0, OpWrite, 0},              //
		{-8, OpWrite, 0},             //
		{1448, OpTerminate, 1420},    //
		{1448, OpReadRequest, 0},     // carries no payload
		{1448, Opcode(9), 0},         //
	}
	for _, tt := range tests {
		got := MaxPayload(tt.seg, tt.op)
		if got != tt.want {
			t.Errorf("MaxPayload(%d, %v) = %d, want %d", tt.seg, tt.op, got, tt.want)
		}
		if got > 0 {
			ulen := tt.op.HeaderLen() + got
			if Pad(ulen) != 0 || ulen > MaxULPDU || FPDULen(ulen) > tt.seg&^7 {
				t.Errorf("MaxPayload(%d, %v) = %d gives ULPDU %d, pad %d, FPDU %d", tt.seg, tt.op, got, ulen, Pad(ulen), FPDULen(ulen))
			}
		}
	}
}

func TestSegmenter(t *testing.T) {
	msg := seqBytes(10)
	tests := []struct {
		name string
		msg  []byte
		max  int
		want []Segment
	}{
		{"three pieces", msg, 4, []Segment{
			{Offset: 0, Payload: msg[0:4]},
			{Offset: 4, Payload: msg[4:8]},
			{Offset: 8, Payload: msg[8:10], Last: true},
		}},
		{"exact multiple has no empty tail", msg[:8], 4, []Segment{
			{Offset: 0, Payload: msg[0:4]},
			{Offset: 4, Payload: msg[4:8], Last: true},
		}},
		{"fits in one", msg, 10, []Segment{{Offset: 0, Payload: msg, Last: true}}},
		{"empty message", nil, 4, []Segment{{Offset: 0, Payload: []byte{}, Last: true}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSegmenter(tt.msg, tt.max)
			if err != nil {
				t.Fatal(err)
			}
			var got []Segment
			for seg, ok := s.Next(); ok; seg, ok = s.Next() {
				got = append(got, seg)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %d segments, want %d: %+v", len(got), len(tt.want), got)
			}
			for i := range got {
				g, w := got[i], tt.want[i]
				if g.Offset != w.Offset || g.Last != w.Last || !bytes.Equal(g.Payload, w.Payload) {
					t.Errorf("segment %d = %+v, want %+v", i, g, w)
				}
			}
			if _, ok := s.Next(); ok {
				t.Error("Next after the last segment returned ok")
			}
		})
	}
	if _, err := NewSegmenter(msg, 0); !errors.Is(err, ErrSegmentSize) {
		t.Errorf("NewSegmenter(max 0) error = %v, want ErrSegmentSize", err)
	}
	var zero Segmenter
	if _, ok := zero.Next(); ok {
		t.Error("zero Segmenter returned a segment")
	}
}

func TestSegmentedSendOnTheWire(t *testing.T) {
	// A 3001-byte Send at the Ethernet MSS: 1424 + 1424 + 153 bytes.
	msg := seqBytes(3001)
	s, err := NewSegmenter(msg, MaxPayload(1448, OpSend))
	if err != nil {
		t.Fatal(err)
	}
	var wire, hdr []byte
	for seg, ok := s.Next(); ok; seg, ok = s.Next() {
		hdr, _ = AppendHeader(hdr[:0], &Header{Op: OpSend, Last: seg.Last, MSN: 1, MO: uint32(seg.Offset)})
		wire, _ = AppendFPDU(wire, hdr, seg.Payload, false)
	}
	// 1448 + 1448 + (2+18+153+3+4=180)
	if len(wire) != 1448+1448+180 {
		t.Fatalf("wire is %d bytes, want %d", len(wire), 1448+1448+180)
	}
	wantHeads := []struct {
		off  int
		head []byte
	}{
		{0, hexb("05 a2 | 01 43 | 00000000 00000000 00000001 00000000")},
		{1448, hexb("05 a2 | 01 43 | 00000000 00000000 00000001 00000590")},
		{2896, hexb("00 ab | 41 43 | 00000000 00000000 00000001 00000b20")},
	}
	for _, w := range wantHeads {
		if got := wire[w.off : w.off+20]; !bytes.Equal(got, w.head) {
			t.Errorf("FPDU at %d starts % x, want % x", w.off, got, w.head)
		}
	}
	// Reassemble.
	var d Deframer
	_, _ = d.Write(wire)
	var got []byte
	for {
		u, err := d.Next()
		if err != nil {
			break
		}
		var h Header
		p, err := ParseULPDU(u, &h)
		if err != nil || int(h.MO) != len(got) {
			t.Fatalf("segment at MO %d: %v (have %d bytes)", h.MO, err, len(got))
		}
		got = append(got, p...)
	}
	if !bytes.Equal(got, msg) {
		t.Error("reassembled message differs")
	}
}

func TestSegmenterDoesNotAllocate(t *testing.T) {
	msg := seqBytes(100000)
	allocs := testing.AllocsPerRun(100, func() {
		s, _ := NewSegmenter(msg, 1424)
		for _, ok := s.Next(); ok; _, ok = s.Next() {
		}
	})
	if allocs != 0 {
		t.Errorf("Segmenter allocates %v times per message", allocs)
	}
}
