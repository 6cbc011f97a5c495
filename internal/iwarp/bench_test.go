package iwarp

import (
	"fmt"
	"testing"
)

// benchSizes are payload sizes of a Send; the largest fills ULPDU_Length.
var benchSizes = []struct {
	name string
	n    int
}{
	{"64B", 64},
	{"4KiB", 4096},
	{"64KiB", MaxULPDU - UntaggedHeaderLen},
}

func benchName(size string, crc bool) string {
	if crc {
		return size + "/crc"
	}
	return size + "/nocrc"
}

func BenchmarkAppendFPDU(b *testing.B) {
	hdr, _ := AppendHeader(nil, &Header{Op: OpSend, Last: true, MSN: 1})
	for _, sz := range benchSizes {
		for _, crc := range []bool{false, true} {
			b.Run(benchName(sz.name, crc), func(b *testing.B) {
				payload := seqBytes(sz.n)
				dst := make([]byte, 0, MaxFPDU)
				b.SetBytes(int64(sz.n))
				b.ReportAllocs()
				for b.Loop() {
					dst, _ = AppendFPDU(dst[:0], hdr, payload, crc)
				}
			})
		}
	}
}

func BenchmarkDeframer(b *testing.B) {
	hdr, _ := AppendHeader(nil, &Header{Op: OpSend, Last: true, MSN: 1})
	for _, sz := range benchSizes {
		for _, crc := range []bool{false, true} {
			b.Run(benchName(sz.name, crc), func(b *testing.B) {
				fpdu, _ := AppendFPDU(nil, hdr, seqBytes(sz.n), crc)
				d := NewDeframer(crc)
				_, _ = d.Write(fpdu) // grow the buffer before timing
				_, _ = d.Next()
				b.SetBytes(int64(sz.n))
				b.ReportAllocs()
				for b.Loop() {
					_, _ = d.Write(fpdu)
					if _, err := d.Next(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDeframerSegments feeds a stream of 4 KiB FPDUs in 1500-byte
// chunks through WriteSpace/Commit, as an epoll loop reading a socket
// would.
func BenchmarkDeframerSegments(b *testing.B) {
	hdr, _ := AppendHeader(nil, &Header{Op: OpSend, Last: true, MSN: 1})
	var stream []byte
	for range 16 {
		stream, _ = AppendFPDU(stream, hdr, seqBytes(4096), true)
	}
	d := NewDeframer(true)
	feed := func() {
		for off := 0; off < len(stream); off += 1500 {
			space := d.WriteSpace(1500)
			_ = d.Commit(copy(space[:1500], stream[off:]))
			for {
				if _, err := d.Next(); err != nil {
					break
				}
			}
		}
	}
	feed() // grow the buffer before timing
	b.SetBytes(int64(len(stream)))
	b.ReportAllocs()
	for b.Loop() {
		feed()
	}
	if d.Err() != nil || d.Buffered() != 0 {
		b.Fatalf("Err %v, Buffered %d", d.Err(), d.Buffered())
	}
}

func BenchmarkParseULPDU(b *testing.B) {
	for _, tc := range []struct {
		name  string
		ulpdu []byte
	}{
		{"send", goldenSend100[2:120]},
		{"write", goldenWriteRTR[2:16]},
		{"readRequest", goldenReadReq[2:48]},
		{"terminate", goldenTerm[2:24]},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var h Header
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseULPDU(tc.ulpdu, &h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkAppendHeader(b *testing.B) {
	for _, op := range []Opcode{OpSend, OpWrite, OpReadRequest} {
		b.Run(fmt.Sprint(op), func(b *testing.B) {
			h := Header{Op: op, Last: true, MSN: 1, STag: 1}
			dst := make([]byte, 0, 64)
			b.ReportAllocs()
			for b.Loop() {
				dst, _ = AppendHeader(dst[:0], &h)
			}
		})
	}
}

func BenchmarkParseMPA(b *testing.B) {
	var f MPAFrame
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseMPA(goldenMPARepReject, &f); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkAppendMPA(b *testing.B) {
	f := MPAFrame{Enhanced: true, Rev: 2, IRD: 1, ORD: 1, PrivateData: make([]byte, 56)}
	dst := make([]byte, 0, 128)
	b.ReportAllocs()
	for b.Loop() {
		dst, _ = AppendMPA(dst[:0], &f)
	}
}
