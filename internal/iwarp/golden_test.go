package iwarp

import (
	"encoding/hex"
	"strings"
)

// Golden byte vectors, written out by hand from the wire reference
// (shared/reference/iwarp-wire.md) and RFC 5040/5041/5044/6581. They are
// shared by the table tests and used as fuzz seeds.

// hexb decodes a hex string that may contain spaces and '|' separators.
func hexb(s string) []byte {
	s = strings.NewReplacer(" ", "", "|", "", "\n", "", "\t", "").Replace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		panic("bad hex in test vector: " + err.Error())
	}
	return b
}

// cat joins byte slices into a new one.
func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

var (
	keyReq = hexb("4D 50 41 20 49 44 20 52 65 71 20 46 72 61 6D 65") // "MPA ID Req Frame"
	keyRep = hexb("4D 50 41 20 49 44 20 52 65 70 20 46 72 61 6D 65") // "MPA ID Rep Frame"

	// siw's default MPA Request as sent by the rping client: Rev 2,
	// Enhanced, PD_Length 4, IRD 1, ORD 1. 24 bytes.
	goldenMPAReqSiw = cat(keyReq, hexb("10 02 00 04 | 00 01 00 01"))
	// A Reply with CRC and Enhanced.
	goldenMPARepCRC = cat(keyRep, hexb("50 02 00 04 | 00 01 00 01"))
	// A Reject Reply (R and Enhanced) with the IRD/ORD block and five
	// bytes of private data "nope!".
	goldenMPARepReject = cat(keyRep, hexb("30 02 00 09 | 00 01 00 01 | 6e 6f 70 65 21"))
	// A P2P Request offering a zero-length Write RTR.
	goldenMPAReqP2P = cat(keyReq, hexb("10 02 00 04 | 80 01 80 01"))
	// A revision 1 Request with no private data (SoftUiWarp style).
	goldenMPAReqRev1 = cat(keyReq, hexb("00 01 00 00"))

	// A 100-byte Send, last segment, MSN 1, CRC off: 124 bytes.
	goldenSend100Payload = seqBytes(100)
	goldenSend100        = cat(
		hexb("00 76 | 41 43 | 00000000 | 00000000 | 00000001 | 00000000"),
		goldenSend100Payload,
		hexb("00000000"))
	// A Send with a 1-byte payload: ULPDU 19 bytes, 3 pad bytes.
	goldenSend1 = hexb("00 13 | 41 43 | 00000000 | 00000000 | 00000001 | 00000000 | ab | 000000 | 00000000")
	// The same with CRC on; the CRC (0xfe7154c5, stored LE) was computed
	// with an independent bitwise CRC32c over the first 24 bytes.
	goldenSend1CRC = hexb("00 13 | 41 43 | 00000000 | 00000000 | 00000001 | 00000000 | ab | 000000 | c5 54 71 fe")
	// A zero-length RDMA Write RTR with STag 1, CRC off: 20 bytes.
	goldenWriteRTR = hexb("00 0e | c1 40 | 00000001 | 0000000000000000 | 00000000")
	// The same with CRC on (0x5f4cd3eb, stored LE).
	goldenWriteRTRCRC = hexb("00 0e | c1 40 | 00000001 | 0000000000000000 | eb d3 4c 5f")
	// An RDMA Read Request, MSN 1, CRC off: ULPDU_Length 46, 52 bytes.
	goldenReadReq = hexb(`00 2e | 41 41 | 00000000 | 00000001 | 00000001 | 00000000 |
		11223344 | 00007f00deadbeef | 00001000 | aabbccdd | 0102030405060708 | 00000000`)
	// A Terminate with no attached header: DDP layer, untagged buffer,
	// invalid QN; ULPDU_Length 22, 28 bytes.
	goldenTerm = hexb("00 16 | 41 47 | 00000000 | 00000002 | 00000001 | 00000000 | 12 01 00 00 | 00000000")
	// A Terminate (RDMAP, remote operation, bad opcode, M and R set) that
	// attaches the offending 20-byte untagged header: ULPDU_Length 42.
	goldenTermAttached = hexb(`00 2a | 41 47 | 00000000 | 00000002 | 00000003 | 00000000 | 02 06 a0 00 |
		0012 4148 00000000 00000000 00000001 00000000 | 00000000`)
)

// seqBytes returns n bytes 0, 1, 2, ... (mod 256).
func seqBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i)
	}
	return b
}

// allGoldenFPDUs lists the golden FPDUs with the CRC setting they need.
var allGoldenFPDUs = []struct {
	name string
	b    []byte
	crc  bool
}{
	{"send100", goldenSend100, false},
	{"send1", goldenSend1, false},
	{"send1crc", goldenSend1CRC, true},
	{"writeRTR", goldenWriteRTR, false},
	{"writeRTRcrc", goldenWriteRTRCRC, true},
	{"readReq", goldenReadReq, false},
	{"term", goldenTerm, false},
	{"termAttached", goldenTermAttached, false},
}

// allGoldenMPA lists the golden MPA frames.
var allGoldenMPA = [][]byte{
	goldenMPAReqSiw, goldenMPARepCRC, goldenMPARepReject, goldenMPAReqP2P, goldenMPAReqRev1,
}
