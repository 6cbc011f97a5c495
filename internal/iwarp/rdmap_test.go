package iwarp

import (
	"errors"
	"fmt"
	"testing"
)

func TestOpcode(t *testing.T) {
	tests := []struct {
		op     Opcode
		name   string
		tagged bool
		qn     uint32
		hlen   int
	}{
		{OpWrite, "Write", true, 0, 14},
		{OpReadRequest, "Read Request", false, 1, 46},
		{OpReadResponse, "Read Response", true, 0, 14},
		{OpSend, "Send", false, 0, 18},
		{OpSendInv, "Send with Invalidate", false, 0, 18},
		{OpSendSE, "Send with SE", false, 0, 18},
		{OpSendSEInv, "Send with SE and Invalidate", false, 0, 18},
		{OpTerminate, "Terminate", false, 2, 22},
	}
	for i, tt := range tests {
		if int(tt.op) != i {
			t.Errorf("%s = %d, want %d", tt.name, tt.op, i)
		}
		if got := tt.op.String(); got != tt.name {
			t.Errorf("Opcode(%d).String() = %q, want %q", i, got, tt.name)
		}
		if !tt.op.Valid() || tt.op.Tagged() != tt.tagged || (!tt.tagged && tt.op.QN() != tt.qn) || tt.op.HeaderLen() != tt.hlen {
			t.Errorf("%v: Valid %v Tagged %v QN %d HeaderLen %d; want true %v %d %d",
				tt.op, tt.op.Valid(), tt.op.Tagged(), tt.op.QN(), tt.op.HeaderLen(), tt.tagged, tt.qn, tt.hlen)
		}
	}
	for _, op := range []Opcode{8, 15, 255} {
		if op.Valid() || op.HeaderLen() != 0 || op.String() != fmt.Sprintf("Opcode(%d)", op) {
			t.Errorf("Opcode(%d): Valid %v HeaderLen %d String %q", op, op.Valid(), op.HeaderLen(), op.String())
		}
	}
}

func TestLayerString(t *testing.T) {
	for l, want := range map[Layer]string{LayerRDMAP: "RDMAP", LayerDDP: "DDP", LayerLLP: "LLP", 9: "Layer(9)"} {
		if got := l.String(); got != want {
			t.Errorf("Layer(%d).String() = %q, want %q", l, got, want)
		}
	}
}

func TestTerminateCodeValues(t *testing.T) {
	// The numeric values siw uses (iwarp.h ddp_ecode, rdmap_ecode,
	// llp_ecode, term_elayer); a typo here would put wrong codes on the
	// wire.
	got := []int{
		int(LayerRDMAP), int(LayerDDP), int(LayerLLP),
		RDMAPETypeCatastrophic, RDMAPETypeRemoteProtection, RDMAPETypeRemoteOperation,
		RDMAPECodeInvalidSTag, RDMAPECodeBaseBounds, RDMAPECodeAccessRights, RDMAPECodeSTagNotAssoc,
		RDMAPECodeTOWrap, RDMAPECodeVersion, RDMAPECodeOpcode, RDMAPECodeCatastrophicStream,
		RDMAPECodeCatastrophicGlobal, RDMAPECodeCannotInvalidate, RDMAPECodeUnspecified,
		DDPETypeCatastrophic, DDPETypeTaggedBuf, DDPETypeUntaggedBuf, DDPETypeRsvd,
		DDPECodeCatastrophic, DDPECodeTInvalidSTag, DDPECodeTBaseBounds, DDPECodeTSTagNotAssoc,
		DDPECodeTTOWrap, DDPECodeTVersion,
		DDPECodeUTInvalidQN, DDPECodeUTInvalidMSNNoBuf, DDPECodeUTInvalidMSNRange, DDPECodeUTInvalidMO,
		DDPECodeUTMsgTooLong, DDPECodeUTVersion,
		LLPETypeMPA, LLPECodeTCPStreamLost, LLPECodeReceivedCRC, LLPECodeFPDUStart, LLPECodeInvalidReqResp,
		LLPECodeLocalCatastrophic, LLPECodeInsufficientIRD, LLPECodeNoMatchingRTR,
		TermFlagM, TermFlagD, TermFlagR,
	}
	want := []int{
		0, 1, 2,
		0, 1, 2,
		0, 1, 2, 3,
		4, 5, 6, 7,
		8, 9, 0xff,
		0, 1, 2, 3,
		0, 0, 1, 2,
		3, 4,
		1, 2, 3, 4,
		5, 6,
		0, 1, 2, 3, 4,
		5, 6, 7,
		0x80, 0x40, 0x20,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("code values\n got %v\nwant %v", got, want)
	}
}

func TestTerminateFor(t *testing.T) {
	write := goldenWriteRTR[2:16]
	send := goldenSend100[2:20]
	tests := []struct {
		name  string
		err   error
		ulpdu []byte
		want  Terminate
	}{
		{"DDP version, untagged", ErrDDPVersion, send, Terminate{Layer: LayerDDP, EType: 2, ECode: 6}},
		{"DDP version, tagged", ErrDDPVersion, write, Terminate{Layer: LayerDDP, EType: 1, ECode: 4}},
		{"DDP version, no ULPDU", ErrDDPVersion, nil, Terminate{Layer: LayerDDP, EType: 2, ECode: 6}},
		{"RDMAP version", ErrRDMAPVersion, send, Terminate{Layer: LayerRDMAP, EType: 2, ECode: 5}},
		{"opcode", ErrOpcode, send, Terminate{Layer: LayerRDMAP, EType: 2, ECode: 6}},
		{"tagged flag", ErrTagged, send, Terminate{Layer: LayerRDMAP, EType: 2, ECode: 6}},
		{"QN", ErrQN, send, Terminate{Layer: LayerDDP, EType: 2, ECode: 1}},
		{"Read Request payload", ErrReadRequestPayload, nil, Terminate{Layer: LayerDDP, EType: 2, ECode: 5}},
		{"truncated", ErrTruncated, nil, Terminate{Layer: LayerDDP, EType: 0, ECode: 0}},
		{"CRC", ErrCRC, nil, Terminate{Layer: LayerLLP, EType: 0, ECode: 2}},
		{"wrapped CRC", fmt.Errorf("conn 3: %w", ErrCRC), nil, Terminate{Layer: LayerLLP, EType: 0, ECode: 2}},
		{"MPA key", ErrBadKey, nil, Terminate{Layer: LayerLLP, EType: 0, ECode: 4}},
		{"MPA revision", ErrRevision, nil, Terminate{Layer: LayerLLP, EType: 0, ECode: 4}},
		{"MPA private data", ErrPrivateDataTooLong, nil, Terminate{Layer: LayerLLP, EType: 0, ECode: 4}},
		{"MPA IRD/ORD", ErrIRDORDMissing, nil, Terminate{Layer: LayerLLP, EType: 0, ECode: 4}},
		{"MPA markers", ErrMarkers, nil, Terminate{Layer: LayerLLP, EType: 0, ECode: 4}},
		{"unknown", errors.New("boom"), nil, Terminate{Layer: LayerRDMAP, EType: 0, ECode: 0xff}},
		{"nil", nil, nil, Terminate{Layer: LayerRDMAP, EType: 0, ECode: 0xff}},
	}
	for _, tt := range tests {
		if got := TerminateFor(tt.err, tt.ulpdu); got != tt.want {
			t.Errorf("%s: TerminateFor = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func TestTerminateForParseErrors(t *testing.T) {
	// End to end: a bad ULPDU, the Terminate the engine would send for it,
	// and that Terminate's bytes.
	bad := hexb("41 43 | 00000000 | 00000001 | 00000001 | 00000000") // Send on QN 1
	var h Header
	_, err := ParseULPDU(bad, &h)
	term := TerminateFor(err, bad)
	term.D = true
	hdr, err := AppendHeader(nil, &Header{Op: OpTerminate, Last: true, MSN: 1, Term: term})
	if err != nil {
		t.Fatal(err)
	}
	fpdu, _ := AppendFPDU(nil, hdr, append(hexb("00 12"), bad...), false)
	want := hexb(`00 2a | 41 47 | 00000000 | 00000002 | 00000001 | 00000000 | 12 01 40 00 |
		00 12 41 43 00000000 00000001 00000001 00000000 | 00000000`)
	if string(fpdu) != string(want) {
		t.Errorf("Terminate FPDU\n got % x\nwant % x", fpdu, want)
	}
}
