package iwarp

import (
	"encoding/binary"
	"fmt"
)

// MPA Request/Reply keys (RFC 5044 §7.1). Both are 16 bytes long.
const (
	MPAKeyRequest = "MPA ID Req Frame"
	MPAKeyReply   = "MPA ID Rep Frame"
)

// Sizes in an MPA Request/Reply frame.
const (
	// MPAKeyLen is the length of the key at the start of every frame.
	MPAKeyLen = 16
	// MPAHeaderLen is the fixed part of a frame: key, flags, revision
	// and PD_Length.
	MPAHeaderLen = 20
	// IRDORDLen is the length of the RFC 6581 IRD/ORD block that leads the
	// private data of an enhanced frame.
	IRDORDLen = 4
	// MaxPrivateData is the largest PD_Length siw accepts or sends; it
	// counts the IRD/ORD block. (RFC 5044 itself allows 512.)
	MaxPrivateData = 256
	// MaxIRDORD is the largest IRD or ORD value the IRD/ORD block holds.
	MaxIRDORD = 0x3fff
)

// MPA revisions.
const (
	MPARev1 = 1 // RFC 5044
	MPARev2 = 2 // RFC 6581 enhanced connection establishment
)

// Bits of the MPA flags byte (offset 16).
const (
	MPAFlagMarkers  = 0x80 // M: markers requested
	MPAFlagCRC      = 0x40 // C: CRC32c on FPDUs
	MPAFlagReject   = 0x20 // R: the Reply rejects the connection
	MPAFlagEnhanced = 0x10 // RFC 6581 enhanced connection establishment
	MPAFlagGSO      = 0x08 // siw-private GSO_EXP bit, taken from Res
	// MPAFlagsOther are the bits that MPAFrame has no boolean for: the siw
	// GSO bit and the three reserved bits. They travel in MPAFrame.Flags.
	MPAFlagsOther = 0x0f
)

// Bits of the IRD/ORD block. The low 14 bits of each word (MaxIRDORD) hold
// the value.
const (
	IRDFlagP2P      = 0x8000 // in the IRD word: peer-to-peer mode
	IRDFlagSendRTR  = 0x4000 // in the IRD word: zero-length Send RTR offered
	ORDFlagWriteRTR = 0x8000 // in the ORD word: zero-length Write RTR offered
	ORDFlagReadRTR  = 0x4000 // in the ORD word: zero-length Read RTR offered
)

// MPAFrame is a decoded MPA Request or Reply frame.
//
// The IRD/ORD block of RFC 6581 is present on the wire exactly when
// Enhanced is set and Rev is 2 (as in siw; see HasIRDORD). In that case
// IRD, ORD, P2P, SendRTR, WriteRTR and ReadRTR describe it and PrivateData
// holds only the application's private data after it; otherwise those
// fields are ignored by AppendMPA and zero after ParseMPA.
type MPAFrame struct {
	// Reply selects the key: false for "MPA ID Req Frame", true for
	// "MPA ID Rep Frame".
	Reply bool

	// Markers, CRC, Reject and Enhanced are the named bits of the flags
	// byte.
	Markers, CRC, Reject, Enhanced bool
	// Flags is the raw flags byte as ParseMPA found it. AppendMPA takes
	// only the MPAFlagsOther bits from it (the siw GSO bit and the
	// reserved bits) and the named bits from the booleans above, so a
	// responder that copies a Request into its Reply echoes unknown bits
	// the way siw does.
	Flags byte
	// Rev is the MPA revision: 0, 1 or 2.
	Rev uint8

	// IRD and ORD are the 14-bit inbound and outbound RDMA Read queue
	// depths of the IRD/ORD block.
	IRD, ORD uint16
	// P2P and SendRTR are the top bits of the IRD word; WriteRTR and
	// ReadRTR the top bits of the ORD word.
	P2P, SendRTR, WriteRTR, ReadRTR bool

	// PrivateData is the application's private data, without the IRD/ORD
	// block. After ParseMPA it aliases the parsed buffer (no copy is
	// made) and stays valid only as long as that buffer is left
	// unchanged; it is nil when empty.
	PrivateData []byte
}

// HasIRDORD reports whether the frame carries the RFC 6581 IRD/ORD block:
// Enhanced set and revision 2.
func (f *MPAFrame) HasIRDORD() bool { return f.Enhanced && f.Rev == MPARev2 }

// pdLen is the PD_Length field for f: private data plus any IRD/ORD block.
func (f *MPAFrame) pdLen() int {
	n := len(f.PrivateData)
	if f.HasIRDORD() {
		n += IRDORDLen
	}
	return n
}

// Len returns the encoded length of f in bytes.
func (f *MPAFrame) Len() int { return MPAHeaderLen + f.pdLen() }

// flagsByte assembles the flags byte from the booleans and the
// MPAFlagsOther bits of Flags.
func (f *MPAFrame) flagsByte() byte {
	b := f.Flags & MPAFlagsOther
	if f.Markers {
		b |= MPAFlagMarkers
	}
	if f.CRC {
		b |= MPAFlagCRC
	}
	if f.Reject {
		b |= MPAFlagReject
	}
	if f.Enhanced {
		b |= MPAFlagEnhanced
	}
	return b
}

// AppendMPA appends the encoding of f to dst and returns the extended
// slice. It fails, leaving dst unchanged, if Rev is above 2, if the
// private data plus IRD/ORD block exceed MaxPrivateData, or if IRD or ORD
// exceed MaxIRDORD. It does not refuse Markers or Reject, so that callers
// can echo a peer's bits; it allocates only if dst lacks capacity.
func AppendMPA(dst []byte, f *MPAFrame) ([]byte, error) {
	if f.Rev > MPARev2 {
		return dst, fmt.Errorf("%w: %d", ErrRevision, f.Rev)
	}
	pd := f.pdLen()
	if pd > MaxPrivateData {
		return dst, fmt.Errorf("%w: %d bytes", ErrPrivateDataTooLong, pd)
	}
	block := f.HasIRDORD()
	if block && (f.IRD > MaxIRDORD || f.ORD > MaxIRDORD) {
		return dst, fmt.Errorf("%w: IRD %d ORD %d", ErrIRDORDRange, f.IRD, f.ORD)
	}
	if f.Reply {
		dst = append(dst, MPAKeyReply...)
	} else {
		dst = append(dst, MPAKeyRequest...)
	}
	dst = append(dst, f.flagsByte(), f.Rev)
	dst = binary.BigEndian.AppendUint16(dst, uint16(pd))
	if block {
		ird, ord := f.IRD, f.ORD
		if f.P2P {
			ird |= IRDFlagP2P
		}
		if f.SendRTR {
			ird |= IRDFlagSendRTR
		}
		if f.WriteRTR {
			ord |= ORDFlagWriteRTR
		}
		if f.ReadRTR {
			ord |= ORDFlagReadRTR
		}
		dst = binary.BigEndian.AppendUint16(dst, ird)
		dst = binary.BigEndian.AppendUint16(dst, ord)
	}
	return append(dst, f.PrivateData...), nil
}

// keyPrefix reports whether b (at most MPAKeyLen bytes) is a prefix of the
// Request or the Reply key, and if it is long enough to tell, which.
func keyPrefix(b []byte) (ok, reply bool) {
	if len(b) > MPAKeyLen {
		b = b[:MPAKeyLen]
	}
	if string(b) == MPAKeyRequest[:len(b)] {
		return true, false
	}
	if string(b) == MPAKeyReply[:len(b)] {
		return true, true
	}
	return false, false
}

// ParseMPA decodes the MPA Request or Reply frame at the start of b into f
// and returns the frame's length n. Bytes after the frame (FPDUs sent right
// behind a Reply) are left alone.
//
// ParseMPA works on a growing buffer. While b holds less than a whole frame
// it returns ErrShort and, in n, the total length it needs so far: 20 until
// the header is complete, then the full frame length. A wrong key is
// reported as soon as a differing byte arrives.
//
// Errors ErrBadKey, ErrRevision and ErrPrivateDataTooLong are fatal (siw
// drops the connection) and come with n = 0. ErrIRDORDMissing and
// ErrMarkers describe a complete, well-formed frame that the responder must
// refuse: f is filled in and n is the frame length, so the caller can
// answer with a Reject that echoes the Request's bits. With
// ErrIRDORDMissing the short block is left in PrivateData. A Reject frame
// (R bit) is never reported with ErrMarkers. f is left unchanged on the
// other errors.
//
// f.Reply tells which key was found; the caller checks it is the one it
// expects. f.PrivateData aliases b. ParseMPA never allocates.
func ParseMPA(b []byte, f *MPAFrame) (n int, err error) {
	ok, reply := keyPrefix(b)
	if !ok {
		return 0, ErrBadKey
	}
	if len(b) < MPAHeaderLen {
		return MPAHeaderLen, ErrShort
	}
	flags, rev := b[16], b[17]
	pd := int(binary.BigEndian.Uint16(b[18:20]))
	if rev > MPARev2 {
		return 0, ErrRevision
	}
	if pd > MaxPrivateData {
		return 0, ErrPrivateDataTooLong
	}
	n = MPAHeaderLen + pd
	if len(b) < n {
		return n, ErrShort
	}
	*f = MPAFrame{
		Reply:    reply,
		Markers:  flags&MPAFlagMarkers != 0,
		CRC:      flags&MPAFlagCRC != 0,
		Reject:   flags&MPAFlagReject != 0,
		Enhanced: flags&MPAFlagEnhanced != 0,
		Flags:    flags,
		Rev:      rev,
	}
	data := b[MPAHeaderLen:n:n]
	if f.HasIRDORD() {
		if pd < IRDORDLen {
			if pd > 0 {
				f.PrivateData = data
			}
			return n, ErrIRDORDMissing
		}
		ird := binary.BigEndian.Uint16(data[0:2])
		ord := binary.BigEndian.Uint16(data[2:4])
		f.IRD, f.ORD = ird&MaxIRDORD, ord&MaxIRDORD
		f.P2P = ird&IRDFlagP2P != 0
		f.SendRTR = ird&IRDFlagSendRTR != 0
		f.WriteRTR = ord&ORDFlagWriteRTR != 0
		f.ReadRTR = ord&ORDFlagReadRTR != 0
		data = data[IRDORDLen:]
	}
	if len(data) > 0 {
		f.PrivateData = data
	}
	if f.Markers && !f.Reject {
		return n, ErrMarkers
	}
	return n, nil
}
