package iwarp

import (
	"bytes"
	"errors"
	"testing"
)

func TestControlBytes(t *testing.T) {
	// The byte pairs at FPDU offsets 2-3 from the wire reference.
	tests := []struct {
		op   Opcode
		last bool
		want []byte
	}{
		{OpSend, true, hexb("41 43")},
		{OpReadRequest, true, hexb("41 41")},
		{OpWrite, true, hexb("c1 40")},
		{OpReadResponse, true, hexb("c1 42")},
		{OpTerminate, true, hexb("41 47")},
		{OpSendInv, true, hexb("41 44")},
		{OpSendSE, true, hexb("41 45")},
		{OpSendSEInv, true, hexb("41 46")},
		{OpSend, false, hexb("01 43")},
		{OpWrite, false, hexb("81 40")},
		{OpReadResponse, false, hexb("81 42")},
	}
	for _, tt := range tests {
		got, err := AppendHeader(nil, &Header{Op: tt.op, Last: tt.last})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:2], tt.want) || len(got) != tt.op.HeaderLen() {
			t.Errorf("%v last=%v: control % x (header %d bytes), want % x (%d bytes)",
				tt.op, tt.last, got[:2], len(got), tt.want, tt.op.HeaderLen())
		}
	}
}

func TestHeaderGolden(t *testing.T) {
	tests := []struct {
		name    string
		ulpdu   []byte
		hdr     Header
		payload []byte
	}{
		{
			name:  "Send with Invalidate carries the STag in RsvdULP",
			ulpdu: hexb("41 44 | cafef00d | 00000000 | 00000005 | 00000010 | 01 02"),
			hdr:   Header{Op: OpSendInv, Last: true, InvalSTag: 0xcafef00d, MSN: 5, MO: 16}, payload: hexb("01 02"),
		},
		{
			name:  "Send with SE and Invalidate, middle segment",
			ulpdu: hexb("01 46 | 00000102 | 00000000 | ffffffff | 00001000"),
			hdr:   Header{Op: OpSendSEInv, InvalSTag: 0x102, MSN: 0xffffffff, MO: 0x1000},
		},
		{
			name:  "Read Response segment",
			ulpdu: hexb("81 42 | 00000a01 | ffffffff00000000 | 55"),
			hdr:   Header{Op: OpReadResponse, STag: 0xa01, TO: 0xffffffff00000000}, payload: hexb("55"),
		},
		{
			name:  "RDMA Write with payload",
			ulpdu: hexb("c1 40 | 12345678 | 0000000000001000 | 00 11 22"),
			hdr:   Header{Op: OpWrite, Last: true, STag: 0x12345678, TO: 0x1000}, payload: hexb("00 11 22"),
		},
		{
			name:  "Terminate with D flag",
			ulpdu: hexb("41 47 | 00000000 | 00000002 | 00000001 | 00000000 | 11 03 40 00"),
			hdr: Header{Op: OpTerminate, Last: true, MSN: 1, Term: Terminate{
				Layer: LayerDDP, EType: DDPETypeTaggedBuf, ECode: DDPECodeTTOWrap, D: true,
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Header
			p, err := ParseULPDU(tt.ulpdu, &h)
			if err != nil {
				t.Fatal(err)
			}
			if h != tt.hdr {
				t.Errorf("header\n got %+v\nwant %+v", h, tt.hdr)
			}
			if !bytes.Equal(p, tt.payload) {
				t.Errorf("payload % x, want % x", p, tt.payload)
			}
			enc, err := AppendHeader(nil, &tt.hdr)
			if err != nil {
				t.Fatal(err)
			}
			if want := tt.ulpdu[:len(tt.ulpdu)-len(tt.payload)]; !bytes.Equal(enc, want) {
				t.Errorf("AppendHeader\n got % x\nwant % x", enc, want)
			}
		})
	}
}

func TestParseULPDUReservedBitsIgnored(t *testing.T) {
	// All reserved bits set in the control field and the Terminate body.
	u := hexb("7d 77 | 00000000 | 00000002 | 00000001 | 00000000 | 02 06 ff ff")
	var h Header
	if _, err := ParseULPDU(u, &h); err != nil {
		t.Fatal(err)
	}
	want := Header{Op: OpTerminate, Last: true, MSN: 1, Term: Terminate{
		Layer: LayerRDMAP, EType: RDMAPETypeRemoteOperation, ECode: RDMAPECodeOpcode, M: true, D: true, R: true,
	}}
	if h != want {
		t.Errorf("header\n got %+v\nwant %+v", h, want)
	}
}

func TestParseULPDUErrors(t *testing.T) {
	send := goldenSend100[2:20] // 18-byte Send header, MSN 1
	mod := func(b []byte, i int, v byte) []byte { c := bytes.Clone(b); c[i] = v; return c }
	rr := goldenReadReq[2:48]
	term := goldenTerm[2:24]
	write := goldenWriteRTR[2:16]
	tests := []struct {
		name  string
		ulpdu []byte
		err   error
	}{
		{"empty", nil, ErrTruncated},
		{"one byte", hexb("41"), ErrTruncated},
		{"DDP version 0", mod(send, 0, 0x40), ErrDDPVersion},
		{"DDP version 2", mod(send, 0, 0x42), ErrDDPVersion},
		{"DDP version 3, tagged", mod(write, 0, 0xc3), ErrDDPVersion},
		{"DDP version checked on 2 bytes", hexb("40 43"), ErrDDPVersion},
		{"RDMAP version 0", mod(send, 1, 0x03), ErrRDMAPVersion},
		{"RDMAP version 2", mod(send, 1, 0x83), ErrRDMAPVersion},
		{"RDMAP version 3", mod(send, 1, 0xc3), ErrRDMAPVersion},
		{"opcode 8", mod(send, 1, 0x48), ErrOpcode},
		{"opcode 15", mod(send, 1, 0x4f), ErrOpcode},
		{"Send with T bit", mod(send, 0, 0xc1), ErrTagged},
		{"Read Request with T bit", mod(rr, 0, 0xc1), ErrTagged},
		{"Write without T bit", mod(write, 0, 0x41), ErrTagged},
		{"Read Response without T bit", hexb("41 42 | 00000001 | 0000000000000000"), ErrTagged},
		{"Send of 17 bytes", send[:17], ErrTruncated},
		{"Write of 13 bytes", write[:13], ErrTruncated},
		{"Read Request of 45 bytes", rr[:45], ErrTruncated},
		{"Terminate of 21 bytes", term[:21], ErrTruncated},
		{"Send on QN 1", mod(send, 9, 1), ErrQN},
		{"Send with Invalidate on QN 2", hexb("41 44 | 00000001 | 00000002 | 00000001 | 00000000"), ErrQN},
		{"Send with high QN byte", mod(send, 6, 1), ErrQN},
		{"Read Request on QN 0", mod(rr, 9, 0), ErrQN},
		{"Terminate on QN 0", mod(term, 9, 0), ErrQN},
		{"Terminate on QN 1", mod(term, 9, 1), ErrQN},
		{"Read Request with payload", cat(rr, []byte{0}), ErrReadRequestPayload},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sentinel := Header{Op: OpSendSE, MSN: 42}
			h := sentinel
			p, err := ParseULPDU(tt.ulpdu, &h)
			if err != tt.err {
				t.Fatalf("ParseULPDU error = %v, want %v", err, tt.err)
			}
			if p != nil {
				t.Errorf("payload % x returned with error", p)
			}
			if h != sentinel {
				t.Errorf("header changed on error: %+v", h)
			}
		})
	}
}

func TestAppendHeaderErrors(t *testing.T) {
	dst := []byte{7}
	got, err := AppendHeader(dst, &Header{Op: 8})
	if !errors.Is(err, ErrOpcode) || !bytes.Equal(got, []byte{7}) {
		t.Errorf("opcode 8: AppendHeader = % x, %v; want 07, ErrOpcode", got, err)
	}
	got, err = AppendHeader(dst, &Header{Op: OpTerminate, Term: Terminate{Layer: 16}})
	if !errors.Is(err, ErrTermField) || !bytes.Equal(got, []byte{7}) {
		t.Errorf("layer 16: AppendHeader = % x, %v; want 07, ErrTermField", got, err)
	}
	got, err = AppendHeader(dst, &Header{Op: OpTerminate, Term: Terminate{EType: 0x10}})
	if !errors.Is(err, ErrTermField) || !bytes.Equal(got, []byte{7}) {
		t.Errorf("etype 16: AppendHeader = % x, %v; want 07, ErrTermField", got, err)
	}
	// Fields that do not belong to the opcode are not written.
	got, err = AppendHeader(nil, &Header{Op: OpWrite, Last: true, STag: 1, MSN: 9, MO: 9, Read: ReadRequest{Size: 9}})
	if err != nil || !bytes.Equal(got, goldenWriteRTR[2:16]) {
		t.Errorf("Write with stray fields: % x, %v; want % x", got, err, goldenWriteRTR[2:16])
	}
}

func TestHeaderCodecDoesNotAllocate(t *testing.T) {
	dst := make([]byte, 0, 64)
	rr := goldenReadReq[2:48]
	var h Header
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = ParseULPDU(rr, &h)
		_, _ = ParseULPDU(goldenSend100[2:122], &h)
		_, _ = ParseULPDU(rr[:3], &h) // error path
		_, _ = AppendHeader(dst[:0], &h)
	})
	if allocs != 0 {
		t.Errorf("header codec allocates %v times per run", allocs)
	}
	if h.Op != OpSend || h.MSN != 1 {
		t.Errorf("last parsed header = %+v", h)
	}
}
