package iwarp

import (
	"bytes"
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// genMPAFrame draws a frame that AppendMPA accepts.
func genMPAFrame(t *rapid.T) MPAFrame {
	f := MPAFrame{
		Reply:    rapid.Bool().Draw(t, "reply"),
		Markers:  rapid.Bool().Draw(t, "markers"),
		CRC:      rapid.Bool().Draw(t, "crc"),
		Reject:   rapid.Bool().Draw(t, "reject"),
		Enhanced: rapid.Bool().Draw(t, "enhanced"),
		Flags:    rapid.Byte().Draw(t, "flags"),
		Rev:      rapid.Uint8Range(0, 2).Draw(t, "rev"),
		IRD:      rapid.Uint16Range(0, MaxIRDORD).Draw(t, "ird"),
		ORD:      rapid.Uint16Range(0, MaxIRDORD).Draw(t, "ord"),
		P2P:      rapid.Bool().Draw(t, "p2p"),
		SendRTR:  rapid.Bool().Draw(t, "sendRTR"),
		WriteRTR: rapid.Bool().Draw(t, "writeRTR"),
		ReadRTR:  rapid.Bool().Draw(t, "readRTR"),
	}
	maxPD := MaxPrivateData
	if f.HasIRDORD() {
		maxPD -= IRDORDLen
	}
	f.PrivateData = rapid.SliceOfN(rapid.Byte(), 0, maxPD).Draw(t, "pd")
	return f
}

// normalMPA is what ParseMPA yields for the encoding of f.
func normalMPA(f MPAFrame) MPAFrame {
	f.Flags = f.flagsByte()
	if !f.HasIRDORD() {
		f.IRD, f.ORD = 0, 0
		f.P2P, f.SendRTR, f.WriteRTR, f.ReadRTR = false, false, false, false
	}
	if len(f.PrivateData) == 0 {
		f.PrivateData = nil
	}
	return f
}

func TestPropMPARoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		f := genMPAFrame(t)
		wire, err := AppendMPA(nil, &f)
		if err != nil {
			t.Fatalf("AppendMPA: %v", err)
		}
		if len(wire) != f.Len() {
			t.Fatalf("encoded %d bytes, Len %d", len(wire), f.Len())
		}
		var g MPAFrame
		n, err := ParseMPA(wire, &g)
		wantErr := error(nil)
		if f.Markers && !f.Reject {
			wantErr = ErrMarkers
		}
		if err != wantErr || n != len(wire) {
			t.Fatalf("ParseMPA = %d, %v; want %d, %v", n, err, len(wire), wantErr)
		}
		if want := normalMPA(f); !reflect.DeepEqual(g, want) {
			t.Fatalf("round trip\n got %+v\nwant %+v", g, want)
		}
		// Every strict prefix asks for more, and never for less than it has.
		k := rapid.IntRange(0, len(wire)-1).Draw(t, "prefix")
		m, err := ParseMPA(wire[:k], &g)
		if err != ErrShort || m <= k || m > len(wire) {
			t.Fatalf("prefix %d: ParseMPA = %d, %v", k, m, err)
		}
	})
}

var allOpcodes = []Opcode{OpWrite, OpReadRequest, OpReadResponse, OpSend, OpSendInv, OpSendSE, OpSendSEInv, OpTerminate}

// genHeader draws a valid header with only its opcode's fields set.
func genHeader(t *rapid.T) Header {
	h := Header{
		Op:   rapid.SampledFrom(allOpcodes).Draw(t, "op"),
		Last: rapid.Bool().Draw(t, "last"),
	}
	if h.Op.Tagged() {
		h.STag = rapid.Uint32().Draw(t, "stag")
		h.TO = rapid.Uint64().Draw(t, "to")
		return h
	}
	h.InvalSTag = rapid.Uint32().Draw(t, "inval")
	h.MSN = rapid.Uint32().Draw(t, "msn")
	h.MO = rapid.Uint32().Draw(t, "mo")
	switch h.Op {
	case OpReadRequest:
		h.Read = ReadRequest{
			SinkSTag: rapid.Uint32().Draw(t, "sinkSTag"),
			SinkTO:   rapid.Uint64().Draw(t, "sinkTO"),
			Size:     rapid.Uint32().Draw(t, "size"),
			SrcSTag:  rapid.Uint32().Draw(t, "srcSTag"),
			SrcTO:    rapid.Uint64().Draw(t, "srcTO"),
		}
	case OpTerminate:
		h.Term = Terminate{
			Layer: Layer(rapid.Uint8Range(0, 15).Draw(t, "layer")),
			EType: rapid.Uint8Range(0, 15).Draw(t, "etype"),
			ECode: rapid.Byte().Draw(t, "ecode"),
			M:     rapid.Bool().Draw(t, "m"),
			D:     rapid.Bool().Draw(t, "d"),
			R:     rapid.Bool().Draw(t, "r"),
		}
	}
	return h
}

func TestPropHeaderRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := genHeader(t)
		var payload []byte
		if h.Op != OpReadRequest {
			payload = rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "payload")
		}
		ulpdu, err := AppendHeader(nil, &h)
		if err != nil {
			t.Fatalf("AppendHeader: %v", err)
		}
		if len(ulpdu) != h.Len() {
			t.Fatalf("header %d bytes, Len %d", len(ulpdu), h.Len())
		}
		ulpdu = append(ulpdu, payload...)
		var g Header
		p, err := ParseULPDU(ulpdu, &g)
		if err != nil {
			t.Fatalf("ParseULPDU: %v", err)
		}
		if g != h || !bytes.Equal(p, payload) {
			t.Fatalf("round trip\n got %+v payload % x\nwant %+v payload % x", g, p, h, payload)
		}
	})
}

func TestPropFPDUStreamSplit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		crc := rapid.Bool().Draw(t, "crc")
		size := rapid.OneOf(rapid.IntRange(0, 40), rapid.IntRange(0, 3000), rapid.IntRange(MaxULPDU-8, MaxULPDU))
		n := rapid.IntRange(0, 8).Draw(t, "count")
		var stream []byte
		var want [][]byte
		for i := 0; i < n; i++ {
			u := seqBytes(size.Draw(t, "size"))
			if len(u) > 0 {
				u[0] = rapid.Byte().Draw(t, "first")
			}
			var err error
			stream, err = AppendFPDU(stream, u[:min(len(u), 7)], u[min(len(u), 7):], crc)
			if err != nil {
				t.Fatalf("AppendFPDU: %v", err)
			}
			want = append(want, u)
		}
		// Split the stream at random points, with some empty writes.
		var d Deframer
		d.SetCRC(crc)
		var got [][]byte
		consumed := 0
		for off := 0; ; {
			if rapid.Bool().Draw(t, "empty") {
				_, _ = d.Write(nil)
			}
			k := rapid.IntRange(1, max(1, len(stream)/3)).Draw(t, "chunk")
			end := min(off+k, len(stream))
			if rapid.Bool().Draw(t, "useSpace") {
				space := d.WriteSpace(end - off)
				if err := d.Commit(copy(space, stream[off:end])); err != nil {
					t.Fatalf("Commit: %v", err)
				}
			} else if _, err := d.Write(stream[off:end]); err != nil {
				t.Fatalf("Write: %v", err)
			}
			for {
				u, err := d.Next()
				if err == ErrShort {
					break
				}
				if err != nil {
					t.Fatalf("Next: %v", err)
				}
				consumed += FPDULen(len(u))
				if consumed > end {
					t.Fatalf("deframer returned %d bytes of FPDUs after %d fed", consumed, end)
				}
				got = append(got, bytes.Clone(u))
			}
			if end == len(stream) {
				break
			}
			off = end
		}
		if len(got) != len(want) {
			t.Fatalf("got %d ULPDUs, want %d", len(got), len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("ULPDU %d differs: %d bytes, want %d", i, len(got[i]), len(want[i]))
			}
		}
		if d.Buffered() != 0 || consumed != len(stream) {
			t.Fatalf("Buffered %d, consumed %d of %d", d.Buffered(), consumed, len(stream))
		}
	})
}

func TestPropSegmenter(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		msg := seqBytes(rapid.IntRange(0, 5000).Draw(t, "len"))
		maxP := rapid.IntRange(1, 2000).Draw(t, "max")
		s, err := NewSegmenter(msg, maxP)
		if err != nil {
			t.Fatal(err)
		}
		var joined []byte
		count := 0
		for seg, ok := s.Next(); ok; seg, ok = s.Next() {
			count++
			if seg.Offset != len(joined) || len(seg.Payload) > maxP {
				t.Fatalf("segment %d: offset %d (want %d), %d bytes (max %d)", count, seg.Offset, len(joined), len(seg.Payload), maxP)
			}
			last := seg.Offset+len(seg.Payload) == len(msg)
			if seg.Last != last || (!last && len(seg.Payload) != maxP) {
				t.Fatalf("segment %d: Last %v, %d bytes at %d of %d", count, seg.Last, len(seg.Payload), seg.Offset, len(msg))
			}
			joined = append(joined, seg.Payload...)
		}
		wantCount := max(1, (len(msg)+maxP-1)/maxP)
		if !bytes.Equal(joined, msg) || count != wantCount {
			t.Fatalf("%d segments (want %d), joined %d bytes of %d", count, wantCount, len(joined), len(msg))
		}
	})
}
