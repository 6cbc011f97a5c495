package iwarp

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func FuzzParseMPA(f *testing.F) {
	for _, g := range allGoldenMPA {
		f.Add(g)
		f.Add(g[:len(g)-1])
	}
	f.Add(cat(keyReq, hexb("90 02 00 04 00 01 00 01")))
	f.Add(cat(keyReq, hexb("10 02 00 02 00 01")))
	f.Add(cat(keyRep, hexb("1f 02 01 00"), make([]byte, 256)))
	f.Fuzz(func(t *testing.T, data []byte) {
		var fr MPAFrame
		n, err := ParseMPA(data, &fr)
		switch err {
		case nil, ErrMarkers:
			if n < MPAHeaderLen || n > len(data) {
				t.Fatalf("n = %d for %d bytes", n, len(data))
			}
			if fr.Len() != n {
				t.Fatalf("Len %d != n %d", fr.Len(), n)
			}
			// The encoding is canonical: re-encoding gives back the input.
			enc, err := AppendMPA(nil, &fr)
			if err != nil {
				t.Fatalf("AppendMPA of a parsed frame: %v", err)
			}
			if !bytes.Equal(enc, data[:n]) {
				t.Fatalf("re-encoded\n got % x\nwant % x", enc, data[:n])
			}
		case ErrIRDORDMissing:
			if n > len(data) || !fr.HasIRDORD() || n-MPAHeaderLen >= IRDORDLen {
				t.Fatalf("ErrIRDORDMissing with n %d, frame %+v", n, fr)
			}
		case ErrShort:
			if n <= len(data) {
				t.Fatalf("ErrShort asks for %d bytes, has %d", n, len(data))
			}
			// Feeding the rest must not fail for lack of bytes again
			// below the announced length.
			if n2, err2 := ParseMPA(append(bytes.Clone(data), make([]byte, n-len(data))...), &fr); err2 == ErrShort && n2 <= n {
				t.Fatalf("after padding to %d bytes: ErrShort for %d", n, n2)
			}
		case ErrBadKey, ErrRevision, ErrPrivateDataTooLong:
			if n != 0 {
				t.Fatalf("%v with n = %d", err, n)
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

func FuzzParseULPDU(f *testing.F) {
	for _, g := range allGoldenFPDUs {
		ulen := int(binary.BigEndian.Uint16(g.b))
		f.Add(g.b[2 : 2+ulen])
	}
	f.Add(hexb("7d 77 | 00000000 | 00000002 | 00000001 | 00000000 | 02 06 ff ff"))
	f.Add(hexb("41 48"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Header
		payload, err := ParseULPDU(data, &h)
		if err != nil {
			switch err {
			case ErrTruncated, ErrDDPVersion, ErrRDMAPVersion, ErrOpcode, ErrTagged, ErrQN, ErrReadRequestPayload:
			default:
				t.Fatalf("unexpected error %v", err)
			}
			if payload != nil {
				t.Fatal("payload with error")
			}
			return
		}
		hl := h.Len()
		if hl == 0 || hl+len(payload) != len(data) || (len(payload) > 0 && &payload[0] != &data[hl]) {
			t.Fatalf("header %d + payload %d != %d bytes, or payload not aliased", hl, len(payload), len(data))
		}
		// Re-encoding gives back the header, up to the reserved bits that
		// receivers ignore.
		enc, err := AppendHeader(nil, &h)
		if err != nil {
			t.Fatalf("AppendHeader of a parsed header: %v", err)
		}
		want := bytes.Clone(data[:hl])
		want[0] &^= 0x3c
		want[1] &^= 0x30
		if h.Op == OpTerminate {
			want[20] &^= 0x1f
			want[21] = 0
		}
		if !bytes.Equal(enc, want) {
			t.Fatalf("re-encoded\n got % x\nwant % x", enc, want)
		}
	})
}

func FuzzParseFPDU(f *testing.F) {
	for _, g := range allGoldenFPDUs {
		f.Add(g.b, g.crc)
	}
	f.Fuzz(func(t *testing.T, data []byte, crc bool) {
		u, n, err := ParseFPDU(data, crc)
		switch err {
		case nil:
			if n > len(data) || n != FPDULen(len(u)) || (len(u) > 0 && &u[0] != &data[2]) {
				t.Fatalf("n %d for %d bytes, ULPDU %d", n, len(data), len(u))
			}
			body := n - CRCLen
			if crc && bytes.Equal(data[2+len(u):body], zeros[:Pad(len(u))]) {
				// With CRC on and zero pad, the encoding is canonical.
				enc, _ := AppendFPDU(nil, u, nil, true)
				if !bytes.Equal(enc, data[:n]) {
					t.Fatalf("re-encoded\n got % x\nwant % x", enc, data[:n])
				}
			}
		case ErrShort:
			if n <= len(data) {
				t.Fatalf("ErrShort asks for %d bytes, has %d", n, len(data))
			}
		case ErrCRC:
			if !crc || n > len(data) {
				t.Fatalf("ErrCRC with crc %v, n %d of %d", crc, n, len(data))
			}
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// FuzzDeframer feeds the input to a Deframer in chunks whose sizes come
// from seed, and checks that it yields exactly what ParseFPDU yields on
// the whole input.
func FuzzDeframer(f *testing.F) {
	stream, _ := goldenStream()
	f.Add(stream, false, uint64(1))
	f.Add(stream, false, uint64(0x9e3779b97f4a7c15))
	f.Add(cat(goldenSend1CRC, goldenWriteRTRCRC), true, uint64(7))
	f.Add(cat(goldenSend1CRC, goldenWriteRTR), true, uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, crc bool, seed uint64) {
		// Reference: parse the whole input at once.
		var want [][]byte
		var wantErr error
		for rest := data; ; {
			u, n, err := ParseFPDU(rest, crc)
			if err != nil {
				if err != ErrShort {
					wantErr = err
				}
				break
			}
			want = append(want, u)
			rest = rest[n:]
		}

		d := NewDeframer(crc)
		x := seed | 1
		var got [][]byte
		var gotErr error
		fed, consumed := 0, 0
		for fed < len(data) && gotErr == nil {
			// xorshift64 for chunk sizes: mostly small, sometimes large.
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			k := int(x % 17)
			if x&0x300 == 0 {
				k = int(x>>20) % (len(data) + 1)
			}
			end := min(fed+k, len(data))
			if x&1 == 0 {
				space := d.WriteSpace(end - fed)
				if err := d.Commit(copy(space, data[fed:end])); err != nil {
					t.Fatalf("Commit: %v", err)
				}
			} else if _, err := d.Write(data[fed:end]); err != nil {
				t.Fatalf("Write: %v", err)
			}
			fed = end
			for {
				u, err := d.Next()
				if err == ErrShort {
					break
				}
				if err != nil {
					gotErr = err
					break
				}
				consumed += FPDULen(len(u))
				if consumed > fed {
					t.Fatalf("returned %d bytes of FPDUs after %d fed", consumed, fed)
				}
				got = append(got, bytes.Clone(u))
			}
		}
		if gotErr != wantErr || len(got) != len(want) {
			t.Fatalf("deframer: %d ULPDUs, err %v; whole-input parse: %d, err %v", len(got), gotErr, len(want), wantErr)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("ULPDU %d differs", i)
			}
		}
		if gotErr == nil && d.Buffered() != len(data)-consumed {
			t.Fatalf("Buffered %d, want %d", d.Buffered(), len(data)-consumed)
		}
	})
}
