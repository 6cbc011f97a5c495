package iwarp

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestMPAKeys(t *testing.T) {
	if got := []byte(MPAKeyRequest); !bytes.Equal(got, keyReq) {
		t.Errorf("MPAKeyRequest = % x, want % x", got, keyReq)
	}
	if got := []byte(MPAKeyReply); !bytes.Equal(got, keyRep) {
		t.Errorf("MPAKeyReply = % x, want % x", got, keyRep)
	}
}

func TestMPAGolden(t *testing.T) {
	maxPD := seqBytes(MaxPrivateData - IRDORDLen)
	tests := []struct {
		name  string
		wire  []byte
		frame MPAFrame
	}{
		{
			name:  "siw default request",
			wire:  goldenMPAReqSiw,
			frame: MPAFrame{Enhanced: true, Flags: 0x10, Rev: 2, IRD: 1, ORD: 1},
		},
		{
			name:  "reply with CRC and Enhanced",
			wire:  goldenMPARepCRC,
			frame: MPAFrame{Reply: true, CRC: true, Enhanced: true, Flags: 0x50, Rev: 2, IRD: 1, ORD: 1},
		},
		{
			name: "reject reply with private data",
			wire: goldenMPARepReject,
			frame: MPAFrame{Reply: true, Reject: true, Enhanced: true, Flags: 0x30, Rev: 2, IRD: 1, ORD: 1,
				PrivateData: []byte("nope!")},
		},
		{
			name:  "P2P request offering Write RTR",
			wire:  goldenMPAReqP2P,
			frame: MPAFrame{Enhanced: true, Flags: 0x10, Rev: 2, IRD: 1, ORD: 1, P2P: true, WriteRTR: true},
		},
		{
			name:  "revision 1 request without private data",
			wire:  goldenMPAReqRev1,
			frame: MPAFrame{Rev: 1},
		},
		{
			name:  "Send and Read RTR bits, max IRD/ORD",
			wire:  cat(keyReq, hexb("10 02 00 04 | 7f ff 7f ff")),
			frame: MPAFrame{Enhanced: true, Flags: 0x10, Rev: 2, IRD: 0x3fff, ORD: 0x3fff, SendRTR: true, ReadRTR: true},
		},
		{
			name:  "GSO and reserved bits are kept in Flags",
			wire:  cat(keyReq, hexb("1f 02 00 06 | 00 10 00 20 | 41 42")),
			frame: MPAFrame{Enhanced: true, Flags: 0x1f, Rev: 2, IRD: 16, ORD: 32, PrivateData: []byte("AB")},
		},
		{
			name:  "Enhanced on revision 1 has no IRD/ORD block",
			wire:  cat(keyReq, hexb("10 01 00 04 | 00 01 00 01")),
			frame: MPAFrame{Enhanced: true, Flags: 0x10, Rev: 1, PrivateData: hexb("00 01 00 01")},
		},
		{
			name:  "revision 0 is accepted",
			wire:  cat(keyReq, hexb("00 00 00 01 | 7a")),
			frame: MPAFrame{Rev: 0, PrivateData: []byte("z")},
		},
		{
			name:  "reject reply without enhanced",
			wire:  cat(keyRep, hexb("20 01 00 03 | 62 79 65")),
			frame: MPAFrame{Reply: true, Reject: true, Flags: 0x20, Rev: 1, PrivateData: []byte("bye")},
		},
		{
			name:  "reject echoing the markers bit is a valid frame",
			wire:  cat(keyRep, hexb("a0 01 00 00")),
			frame: MPAFrame{Reply: true, Reject: true, Markers: true, Flags: 0xa0, Rev: 1},
		},
		{
			name:  "private data at the 256-byte limit",
			wire:  cat(keyReq, hexb("10 02 01 00 | 00 02 00 03"), maxPD),
			frame: MPAFrame{Enhanced: true, Flags: 0x10, Rev: 2, IRD: 2, ORD: 3, PrivateData: maxPD},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Decode, with trailing bytes that must be left alone.
			in := cat(tt.wire, hexb("de ad"))
			var f MPAFrame
			n, err := ParseMPA(in, &f)
			if err != nil || n != len(tt.wire) {
				t.Fatalf("ParseMPA = %d, %v; want %d, nil", n, err, len(tt.wire))
			}
			if !reflect.DeepEqual(f, tt.frame) {
				t.Errorf("ParseMPA frame\n got %+v\nwant %+v", f, tt.frame)
			}
			if f.Len() != len(tt.wire) {
				t.Errorf("Len = %d, want %d", f.Len(), len(tt.wire))
			}
			// Encode.
			prefix := []byte{0xee}
			got, err := AppendMPA(prefix, &tt.frame)
			if err != nil {
				t.Fatalf("AppendMPA: %v", err)
			}
			if want := cat(prefix, tt.wire); !bytes.Equal(got, want) {
				t.Errorf("AppendMPA\n got % x\nwant % x", got, want)
			}
		})
	}
}

func TestMPAEchoRequestAsReply(t *testing.T) {
	// siw's responder reuses the Request's bits for its Reply: the GSO and
	// reserved bits must come back unchanged.
	req := cat(keyReq, hexb("5f 02 00 04 | 00 08 00 04"))
	var f MPAFrame
	if _, err := ParseMPA(req, &f); err != nil {
		t.Fatal(err)
	}
	f.Reply = true
	f.IRD, f.ORD = f.ORD, f.IRD
	got, err := AppendMPA(nil, &f)
	if err != nil {
		t.Fatal(err)
	}
	want := cat(keyRep, hexb("5f 02 00 04 | 00 04 00 08"))
	if !bytes.Equal(got, want) {
		t.Errorf("reply\n got % x\nwant % x", got, want)
	}
	// Named booleans override the same bits in Flags.
	f.CRC = false
	got, _ = AppendMPA(nil, &f)
	if got[16] != 0x1f {
		t.Errorf("flags with CRC cleared = %#x, want 0x1f", got[16])
	}
}

func TestParseMPAIncremental(t *testing.T) {
	for _, wire := range [][]byte{goldenMPAReqSiw, goldenMPARepReject, goldenMPAReqRev1} {
		for k := 0; k < len(wire); k++ {
			var f MPAFrame
			n, err := ParseMPA(wire[:k], &f)
			want := MPAHeaderLen
			if k >= MPAHeaderLen {
				want = len(wire)
			}
			if err != ErrShort || n != want {
				t.Errorf("%q prefix %d: ParseMPA = %d, %v; want %d, ErrShort", wire[:16], k, n, err, want)
			}
			if !reflect.DeepEqual(f, MPAFrame{}) {
				t.Errorf("prefix %d: frame modified on ErrShort: %+v", k, f)
			}
		}
	}
}

func TestParseMPAErrors(t *testing.T) {
	tests := []struct {
		name  string
		wire  []byte
		err   error
		n     int
		frame MPAFrame // expected frame for the errors that fill it
	}{
		{name: "empty input is short", wire: nil, err: ErrShort, n: 20},
		{name: "wrong key", wire: cat([]byte("MPA ID Foo Frame"), hexb("10 02 00 04 00 01 00 01")), err: ErrBadKey},
		{name: "wrong key detected early", wire: []byte("MPX"), err: ErrBadKey},
		{name: "key case matters", wire: cat([]byte("mpa id req frame"), hexb("10 02 00 00")), err: ErrBadKey},
		{name: "key differs in the last byte", wire: cat([]byte("MPA ID Req Framf"), hexb("10 02 00 00")), err: ErrBadKey},
		{name: "revision 3", wire: cat(keyReq, hexb("10 03 00 04 00 01 00 01")), err: ErrRevision},
		{name: "revision 255", wire: cat(keyRep, hexb("00 ff 00 00")), err: ErrRevision},
		{name: "PD_Length 257 fails before the data arrive", wire: cat(keyReq, hexb("10 02 01 01")), err: ErrPrivateDataTooLong},
		{name: "PD_Length 0xffff", wire: cat(keyReq, hexb("00 01 ff ff")), err: ErrPrivateDataTooLong},
		{
			name: "enhanced with PD_Length 2", wire: cat(keyReq, hexb("10 02 00 02 00 01")),
			err: ErrIRDORDMissing, n: 22,
			frame: MPAFrame{Enhanced: true, Flags: 0x10, Rev: 2, PrivateData: hexb("00 01")},
		},
		{
			name: "enhanced with PD_Length 0", wire: cat(keyReq, hexb("10 02 00 00")),
			err: ErrIRDORDMissing, n: 20,
			frame: MPAFrame{Enhanced: true, Flags: 0x10, Rev: 2},
		},
		{
			name: "markers requested", wire: cat(keyReq, hexb("90 02 00 04 00 01 00 01")),
			err: ErrMarkers, n: 24,
			frame: MPAFrame{Markers: true, Enhanced: true, Flags: 0x90, Rev: 2, IRD: 1, ORD: 1},
		},
		{
			name: "markers in an accepting reply", wire: cat(keyRep, hexb("80 01 00 00")),
			err: ErrMarkers, n: 20,
			frame: MPAFrame{Reply: true, Markers: true, Flags: 0x80, Rev: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f MPAFrame
			n, err := ParseMPA(tt.wire, &f)
			if err != tt.err || n != tt.n {
				t.Fatalf("ParseMPA = %d, %v; want %d, %v", n, err, tt.n, tt.err)
			}
			if !reflect.DeepEqual(f, tt.frame) {
				t.Errorf("frame\n got %+v\nwant %+v", f, tt.frame)
			}
		})
	}
}

func TestAppendMPAErrors(t *testing.T) {
	tests := []struct {
		name  string
		frame MPAFrame
		err   error
	}{
		{"revision 3", MPAFrame{Rev: 3}, ErrRevision},
		{"253 bytes plus the block", MPAFrame{Enhanced: true, Rev: 2, PrivateData: make([]byte, 253)}, ErrPrivateDataTooLong},
		{"257 bytes without block", MPAFrame{Rev: 1, PrivateData: make([]byte, 257)}, ErrPrivateDataTooLong},
		{"IRD 0x4000", MPAFrame{Enhanced: true, Rev: 2, IRD: 0x4000}, ErrIRDORDRange},
		{"ORD 0xffff", MPAFrame{Enhanced: true, Rev: 2, ORD: 0xffff}, ErrIRDORDRange},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte{1, 2, 3}
			got, err := AppendMPA(dst, &tt.frame)
			if !errors.Is(err, tt.err) {
				t.Fatalf("AppendMPA error = %v, want %v", err, tt.err)
			}
			if !bytes.Equal(got, []byte{1, 2, 3}) {
				t.Errorf("dst changed on error: % x", got)
			}
		})
	}
	// Out-of-range IRD/ORD are ignored when there is no block to hold them.
	got, err := AppendMPA(nil, &MPAFrame{Rev: 1, IRD: 0xffff, ORD: 0xffff, PrivateData: make([]byte, 256)})
	if err != nil || len(got) != 276 || !bytes.Equal(got[16:20], hexb("00 01 01 00")) {
		t.Errorf("AppendMPA without block = % x..., %v", got[:20], err)
	}
}

func TestParseMPAAliasesAndDoesNotAllocate(t *testing.T) {
	in := goldenMPARepReject
	var f MPAFrame
	if _, err := ParseMPA(in, &f); err != nil {
		t.Fatal(err)
	}
	if &f.PrivateData[0] != &in[24] {
		t.Error("PrivateData does not alias the input")
	}
	if cap(f.PrivateData) != len(f.PrivateData) {
		t.Errorf("PrivateData cap %d > len %d: appends would overwrite the input", cap(f.PrivateData), len(f.PrivateData))
	}
	bad := cat(keyReq, hexb("10 07 00 00"))
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = ParseMPA(in, &f)
		_, _ = ParseMPA(in[:10], &f)
		_, _ = ParseMPA(bad, &f)
	})
	if allocs != 0 {
		t.Errorf("ParseMPA allocates %v times per run", allocs)
	}
}
