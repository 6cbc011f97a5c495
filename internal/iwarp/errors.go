package iwarp

import "errors"

// ErrShort reports that the input holds only part of a frame. It is not a
// protocol error: feed more bytes and call again. ParseMPA and ParseFPDU
// return, together with ErrShort, the total number of bytes they need.
var ErrShort = errors.New("iwarp: need more bytes")

// MPA Request/Reply errors.
var (
	// ErrBadKey reports that the first 16 bytes are neither the MPA
	// Request key nor the MPA Reply key.
	ErrBadKey = errors.New("iwarp: bad MPA key")
	// ErrRevision reports an MPA revision above 2.
	ErrRevision = errors.New("iwarp: unsupported MPA revision")
	// ErrPrivateDataTooLong reports private data (including the IRD/ORD
	// block) longer than MaxPrivateData.
	ErrPrivateDataTooLong = errors.New("iwarp: MPA private data too long")
	// ErrIRDORDMissing reports a revision 2 frame with the Enhanced bit
	// set whose private data is too short to hold the IRD/ORD block.
	ErrIRDORDMissing = errors.New("iwarp: MPA enhanced frame without IRD/ORD block")
	// ErrIRDORDRange reports an IRD or ORD value above MaxIRDORD given to
	// the encoder.
	ErrIRDORDRange = errors.New("iwarp: MPA IRD/ORD value out of range")
	// ErrMarkers reports an MPA frame asking for markers, which are not
	// supported.
	ErrMarkers = errors.New("iwarp: MPA markers requested")
)

// FPDU errors.
var (
	// ErrCRC reports an FPDU whose CRC32c does not match its contents.
	ErrCRC = errors.New("iwarp: MPA CRC mismatch")
	// ErrULPDUTooLong reports a ULPDU longer than MaxULPDU given to the
	// encoder.
	ErrULPDUTooLong = errors.New("iwarp: ULPDU too long")
	// ErrSegmentSize reports a segment or payload size too small to carry
	// any payload.
	ErrSegmentSize = errors.New("iwarp: segment size too small")
	// ErrCommit reports a Deframer.Commit of more bytes than the space
	// handed out by Deframer.WriteSpace.
	ErrCommit = errors.New("iwarp: commit beyond write space")
)

// DDP/RDMAP header errors.
var (
	// ErrTruncated reports a ULPDU shorter than the header its opcode
	// requires.
	ErrTruncated = errors.New("iwarp: ULPDU truncated")
	// ErrDDPVersion reports a DDP version other than 1.
	ErrDDPVersion = errors.New("iwarp: unsupported DDP version")
	// ErrRDMAPVersion reports an RDMAP version other than 1.
	ErrRDMAPVersion = errors.New("iwarp: unsupported RDMAP version")
	// ErrOpcode reports an RDMAP opcode above 7 (OpTerminate).
	ErrOpcode = errors.New("iwarp: unsupported RDMAP opcode")
	// ErrTagged reports a DDP tagged flag that disagrees with the opcode:
	// Write and Read Response are tagged, all others untagged.
	ErrTagged = errors.New("iwarp: DDP tagged flag does not match opcode")
	// ErrQN reports an untagged queue number that disagrees with the
	// opcode (Send* 0, Read Request 1, Terminate 2).
	ErrQN = errors.New("iwarp: DDP queue number does not match opcode")
	// ErrReadRequestPayload reports bytes after the body of a Read
	// Request.
	ErrReadRequestPayload = errors.New("iwarp: payload after RDMA Read Request")
	// ErrTermField reports a Terminate layer or error type above 15 given
	// to the encoder.
	ErrTermField = errors.New("iwarp: Terminate layer or error type out of range")
)
