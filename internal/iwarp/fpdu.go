package iwarp

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"slices"
)

// FPDU layout (RFC 5044 §4, without markers):
//
//	[ULPDU_Length be16][ULPDU][pad 0..3][CRC 4 bytes, little-endian]
const (
	// LengthFieldLen is the size of the ULPDU_Length field that starts
	// every FPDU.
	LengthFieldLen = 2
	// CRCLen is the size of the CRC field that ends every FPDU. The field
	// is present, and zero, when CRC was not negotiated.
	CRCLen = 4
	// MaxULPDU is the largest ULPDU_Length.
	MaxULPDU = 65535
	// MaxFPDU is the length of the largest FPDU: 65535 bytes of ULPDU
	// plus the length field, 3 bytes of pad and the CRC.
	MaxFPDU = LengthFieldLen + MaxULPDU + 3 + CRCLen
)

// castagnoli is the CRC32c table; on amd64 and arm64 crc32 uses the CPU's
// CRC32c instructions with it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// zeros supplies pad bytes.
var zeros [4]byte

// Pad returns the number of pad bytes after a ULPDU of ulpduLen bytes, so
// that length field, ULPDU and pad together are a multiple of 4 bytes:
// (-(2 + ulpduLen)) & 3.
func Pad(ulpduLen int) int { return -(LengthFieldLen + ulpduLen) & 3 }

// FPDULen returns the length on the wire of an FPDU carrying a ULPDU of
// ulpduLen bytes.
func FPDULen(ulpduLen int) int {
	return LengthFieldLen + ulpduLen + Pad(ulpduLen) + CRCLen
}

// CRC32c returns the MPA CRC of an FPDU whose length field, ULPDU and pad
// are b: CRC32c (Castagnoli) over exactly those bytes. On the wire it is
// stored little-endian.
func CRC32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// CRC32cUpdate returns the CRC32c of the bytes summed in crc followed by
// b: CRC32cUpdate(CRC32c(a), b) == CRC32c(append(a, b...)), and
// CRC32cUpdate(0, b) == CRC32c(b). It checks an FPDU whose bytes arrive
// in pieces.
func CRC32cUpdate(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// AppendFPDU appends one FPDU to dst whose ULPDU is hdr followed by
// payload, so a DDP/RDMAP header and a payload need not be joined first.
// With crc set the CRC field holds the CRC32c of the FPDU, otherwise zero.
// It fails, leaving dst unchanged, if the ULPDU would exceed MaxULPDU. It
// allocates only if dst lacks capacity.
func AppendFPDU(dst, hdr, payload []byte, crc bool) ([]byte, error) {
	ulen := len(hdr) + len(payload)
	if ulen > MaxULPDU {
		return dst, fmt.Errorf("%w: %d bytes", ErrULPDUTooLong, ulen)
	}
	dst = slices.Grow(dst, FPDULen(ulen))
	start := len(dst)
	dst = binary.BigEndian.AppendUint16(dst, uint16(ulen))
	dst = append(dst, hdr...)
	dst = append(dst, payload...)
	dst = append(dst, zeros[:Pad(ulen)]...)
	var sum uint32
	if crc {
		sum = CRC32c(dst[start:])
	}
	return binary.LittleEndian.AppendUint32(dst, sum), nil
}

// ParseFPDU decodes the FPDU at the start of b. It returns its ULPDU,
// which aliases b, and the FPDU's length n. With crc set the CRC field is
// checked; otherwise it is ignored, as siw does. Pad bytes are not
// checked.
//
// If b holds less than a whole FPDU, ParseFPDU returns ErrShort and, in n,
// the total length it needs so far (2 until the length field is complete).
// On ErrCRC, n is the length of the damaged FPDU. ParseFPDU never
// allocates.
func ParseFPDU(b []byte, crc bool) (ulpdu []byte, n int, err error) {
	if len(b) < LengthFieldLen {
		return nil, LengthFieldLen, ErrShort
	}
	ulen := int(binary.BigEndian.Uint16(b))
	body := LengthFieldLen + ulen + Pad(ulen)
	n = body + CRCLen
	if len(b) < n {
		return nil, n, ErrShort
	}
	if crc && CRC32c(b[:body]) != binary.LittleEndian.Uint32(b[body:n]) {
		return nil, n, ErrCRC
	}
	end := LengthFieldLen + ulen
	return b[LengthFieldLen:end:end], n, nil
}
