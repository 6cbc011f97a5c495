package iwarp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

func TestPad(t *testing.T) {
	tests := []struct{ ulpdu, pad, fpdu int }{
		{0, 2, 8},
		{1, 1, 8},
		{2, 0, 8},
		{3, 3, 12},
		{4, 2, 12},
		{14, 0, 20}, // zero-length tagged segment
		{18, 0, 24}, // zero-length untagged segment
		{19, 3, 28},
		{20, 2, 28},
		{21, 1, 28},
		{22, 0, 28}, // Terminate without attached header
		{46, 0, 52}, // Read Request
		{118, 0, 124},
		{65535, 3, 65544},
	}
	for _, tt := range tests {
		if got := Pad(tt.ulpdu); got != tt.pad {
			t.Errorf("Pad(%d) = %d, want %d", tt.ulpdu, got, tt.pad)
		}
		if got := FPDULen(tt.ulpdu); got != tt.fpdu {
			t.Errorf("FPDULen(%d) = %d, want %d", tt.ulpdu, got, tt.fpdu)
		}
	}
	if MaxFPDU != 65544 {
		t.Errorf("MaxFPDU = %d, want 65544", MaxFPDU)
	}
}

func TestCRC32cKnownAnswer(t *testing.T) {
	// The standard CRC-32C check value (RFC 3720 Appendix B.4 family).
	if got := CRC32c([]byte("123456789")); got != 0xe3069283 {
		t.Errorf("CRC32c(123456789) = %#x, want 0xe3069283", got)
	}
}

// goldenFPDU describes how to build one golden FPDU with the encoders.
type goldenFPDU struct {
	name    string
	wire    []byte
	crc     bool
	hdr     Header
	payload []byte
}

var goldenFPDUs = []goldenFPDU{
	{
		name: "100-byte Send, CRC off", wire: goldenSend100,
		hdr:     Header{Op: OpSend, Last: true, MSN: 1},
		payload: goldenSend100Payload,
	},
	{
		name: "1-byte Send with 3 pad bytes", wire: goldenSend1,
		hdr:     Header{Op: OpSend, Last: true, MSN: 1},
		payload: []byte{0xab},
	},
	{
		name: "1-byte Send, CRC on", wire: goldenSend1CRC, crc: true,
		hdr:     Header{Op: OpSend, Last: true, MSN: 1},
		payload: []byte{0xab},
	},
	{
		name: "zero-length Write RTR", wire: goldenWriteRTR,
		hdr: Header{Op: OpWrite, Last: true, STag: 1},
	},
	{
		name: "zero-length Write RTR, CRC on", wire: goldenWriteRTRCRC, crc: true,
		hdr: Header{Op: OpWrite, Last: true, STag: 1},
	},
	{
		name: "Read Request", wire: goldenReadReq,
		hdr: Header{Op: OpReadRequest, Last: true, MSN: 1, Read: ReadRequest{
			SinkSTag: 0x11223344, SinkTO: 0x00007f00deadbeef, Size: 0x1000,
			SrcSTag: 0xaabbccdd, SrcTO: 0x0102030405060708,
		}},
	},
	{
		name: "Terminate without attached header", wire: goldenTerm,
		hdr: Header{Op: OpTerminate, Last: true, MSN: 1, Term: Terminate{
			Layer: LayerDDP, EType: DDPETypeUntaggedBuf, ECode: DDPECodeUTInvalidQN,
		}},
	},
	{
		name: "Terminate with attached header", wire: goldenTermAttached,
		hdr: Header{Op: OpTerminate, Last: true, MSN: 3, Term: Terminate{
			Layer: LayerRDMAP, EType: RDMAPETypeRemoteOperation, ECode: RDMAPECodeOpcode, M: true, R: true,
		}},
		payload: hexb("0012 4148 00000000 00000000 00000001 00000000"),
	},
}

func TestFPDUGolden(t *testing.T) {
	lens := map[string]int{
		"100-byte Send, CRC off": 124, "zero-length Write RTR": 20, "Read Request": 52,
		"Terminate without attached header": 28,
	}
	for _, tt := range goldenFPDUs {
		t.Run(tt.name, func(t *testing.T) {
			if want, ok := lens[tt.name]; ok && len(tt.wire) != want {
				t.Fatalf("golden vector is %d bytes, want %d", len(tt.wire), want)
			}
			// Encode.
			hdr, err := AppendHeader(nil, &tt.hdr)
			if err != nil {
				t.Fatal(err)
			}
			got, err := AppendFPDU([]byte{0x99}, hdr, tt.payload, tt.crc)
			if err != nil {
				t.Fatal(err)
			}
			if want := cat([]byte{0x99}, tt.wire); !bytes.Equal(got, want) {
				t.Errorf("AppendFPDU\n got % x\nwant % x", got, want)
			}
			// Decode.
			ulpdu, n, err := ParseFPDU(cat(tt.wire, []byte{0x77}), tt.crc)
			if err != nil || n != len(tt.wire) {
				t.Fatalf("ParseFPDU = %d, %v; want %d, nil", n, err, len(tt.wire))
			}
			if want := tt.wire[2 : 2+int(binary.BigEndian.Uint16(tt.wire))]; !bytes.Equal(ulpdu, want) {
				t.Errorf("ULPDU\n got % x\nwant % x", ulpdu, want)
			}
			var h Header
			payload, err := ParseULPDU(ulpdu, &h)
			if err != nil {
				t.Fatalf("ParseULPDU: %v", err)
			}
			if h != tt.hdr {
				t.Errorf("header\n got %+v\nwant %+v", h, tt.hdr)
			}
			if !bytes.Equal(payload, tt.payload) {
				t.Errorf("payload\n got % x\nwant % x", payload, tt.payload)
			}
		})
	}
}

func TestFPDUCRCPlacement(t *testing.T) {
	// Compute the CRC independently with hash/crc32 over length field,
	// ULPDU and pad, and check it sits little-endian in the last 4 bytes.
	table := crc32.MakeTable(crc32.Castagnoli)
	for _, n := range []int{0, 1, 2, 3, 100, 1001, 65535 - UntaggedHeaderLen} {
		hdr, _ := AppendHeader(nil, &Header{Op: OpSendSE, Last: true, MSN: 7, MO: 0})
		payload := seqBytes(n)
		fpdu, err := AppendFPDU(nil, hdr, payload, true)
		if err != nil {
			t.Fatal(err)
		}
		ulen := len(hdr) + n
		covered := 2 + ulen + Pad(ulen)
		if len(fpdu) != covered+4 {
			t.Fatalf("payload %d: FPDU %d bytes, want %d", n, len(fpdu), covered+4)
		}
		for i, b := range fpdu[2+ulen : covered] {
			if b != 0 {
				t.Errorf("payload %d: pad byte %d = %#x", n, i, b)
			}
		}
		sum := crc32.Checksum(fpdu[:covered], table)
		want := []byte{byte(sum), byte(sum >> 8), byte(sum >> 16), byte(sum >> 24)}
		if !bytes.Equal(fpdu[covered:], want) {
			t.Errorf("payload %d: CRC field % x, want % x (LE of %#x)", n, fpdu[covered:], want, sum)
		}
		// The same FPDU without CRC has a zero CRC field.
		plain, _ := AppendFPDU(nil, hdr, payload, false)
		if !bytes.Equal(plain[:covered], fpdu[:covered]) || !bytes.Equal(plain[covered:], []byte{0, 0, 0, 0}) {
			t.Errorf("payload %d: CRC-off FPDU differs beyond a zero CRC field", n)
		}
	}
}

func TestParseFPDUCRC(t *testing.T) {
	bad := bytes.Clone(goldenSend1CRC)
	bad[20] ^= 0x01 // flip a payload bit
	if _, n, err := ParseFPDU(bad, true); err != ErrCRC || n != 28 {
		t.Errorf("corrupted payload: ParseFPDU = %d, %v; want 28, ErrCRC", n, err)
	}
	// The pad is covered by the CRC.
	bad = bytes.Clone(goldenSend1CRC)
	bad[22] = 0x01
	if _, _, err := ParseFPDU(bad, true); err != ErrCRC {
		t.Errorf("corrupted pad: err = %v, want ErrCRC", err)
	}
	// The length field is covered too.
	bad = bytes.Clone(goldenWriteRTRCRC)
	bad[3] = 0x41
	if _, _, err := ParseFPDU(bad, true); err != ErrCRC {
		t.Errorf("corrupted control field: err = %v, want ErrCRC", err)
	}
	// A byte-swapped (big-endian) CRC is wrong.
	bad = bytes.Clone(goldenWriteRTRCRC)
	copy(bad[16:], hexb("5f 4c d3 eb"))
	if _, _, err := ParseFPDU(bad, true); err != ErrCRC {
		t.Errorf("big-endian CRC: err = %v, want ErrCRC", err)
	}
	// With CRC off the field is not checked, whatever it holds.
	u, n, err := ParseFPDU(goldenSend1CRC, false)
	if err != nil || n != 28 || len(u) != 19 {
		t.Errorf("CRC off, nonzero field: ParseFPDU = %d bytes, %d, %v; want 19, 28, nil", len(u), n, err)
	}
	// With CRC on, a zero CRC field is an error.
	if _, _, err := ParseFPDU(goldenSend1, true); err != ErrCRC {
		t.Errorf("CRC on, zero field: err = %v, want ErrCRC", err)
	}
}

func TestParseFPDUIncremental(t *testing.T) {
	wire := goldenSend100
	for k := 0; k < len(wire); k++ {
		u, n, err := ParseFPDU(wire[:k], false)
		want := 2
		if k >= 2 {
			want = 124
		}
		if err != ErrShort || n != want || u != nil {
			t.Errorf("prefix %d: ParseFPDU = %v, %d, %v; want nil, %d, ErrShort", k, u, n, err, want)
		}
	}
}

func TestFPDUMaxULPDU(t *testing.T) {
	payload := seqBytes(MaxULPDU - UntaggedHeaderLen)
	hdr, _ := AppendHeader(nil, &Header{Op: OpSend, Last: true, MSN: 1})
	for _, crc := range []bool{false, true} {
		fpdu, err := AppendFPDU(nil, hdr, payload, crc)
		if err != nil {
			t.Fatal(err)
		}
		if len(fpdu) != MaxFPDU || !bytes.Equal(fpdu[:2], hexb("ff ff")) {
			t.Fatalf("crc %v: FPDU %d bytes starting % x; want %d starting ff ff", crc, len(fpdu), fpdu[:2], MaxFPDU)
		}
		u, n, err := ParseFPDU(fpdu, crc)
		if err != nil || n != MaxFPDU || len(u) != MaxULPDU {
			t.Fatalf("crc %v: ParseFPDU = %d bytes, %d, %v", crc, len(u), n, err)
		}
		if !bytes.Equal(u[UntaggedHeaderLen:], payload) {
			t.Errorf("crc %v: payload differs", crc)
		}
	}
	// One byte more does not fit the length field.
	dst := []byte{5}
	got, err := AppendFPDU(dst, hdr, seqBytes(MaxULPDU-UntaggedHeaderLen+1), false)
	if !errors.Is(err, ErrULPDUTooLong) || !bytes.Equal(got, []byte{5}) {
		t.Errorf("oversized ULPDU: AppendFPDU = % x, %v; want 05, ErrULPDUTooLong", got, err)
	}
}

func TestParseFPDUAliasesAndDoesNotAllocate(t *testing.T) {
	in := goldenSend1CRC
	u, _, err := ParseFPDU(in, true)
	if err != nil {
		t.Fatal(err)
	}
	if &u[0] != &in[2] || cap(u) != len(u) {
		t.Errorf("ULPDU does not alias the input with cap = len (cap %d, len %d)", cap(u), len(u))
	}
	dst := make([]byte, 0, 256)
	hdr := goldenSend100[2:20]
	allocs := testing.AllocsPerRun(100, func() {
		_, _, _ = ParseFPDU(in, true)
		_, _, _ = ParseFPDU(goldenSend1, true) // ErrCRC
		_, _, _ = ParseFPDU(in[:5], true)      // ErrShort
		_, _ = AppendFPDU(dst[:0], hdr, goldenSend100Payload, true)
	})
	if allocs != 0 {
		t.Errorf("FPDU codec allocates %v times per run", allocs)
	}
}
