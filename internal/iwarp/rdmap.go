package iwarp

import "strconv"

// Opcode is an RDMAP opcode (RFC 5040 §4.3), the low 4 bits of the second
// control byte.
type Opcode uint8

// RDMAP opcodes. siw supports these and no others (no RFC 7306 atomics or
// immediate data).
const (
	OpWrite          Opcode = 0 // RDMA Write (tagged)
	OpReadRequest    Opcode = 1 // RDMA Read Request (untagged, QN 1)
	OpReadResponse   Opcode = 2 // RDMA Read Response (tagged)
	OpSend           Opcode = 3 // Send (untagged, QN 0)
	OpSendInv        Opcode = 4 // Send with Invalidate
	OpSendSE         Opcode = 5 // Send with Solicited Event
	OpSendSEInv      Opcode = 6 // Send with Solicited Event and Invalidate
	OpTerminate      Opcode = 7 // Terminate (untagged, QN 2)
	maxOpcode               = OpTerminate
	opcodeUnassigned        = maxOpcode + 1
)

var opcodeNames = [...]string{
	OpWrite:        "Write",
	OpReadRequest:  "Read Request",
	OpReadResponse: "Read Response",
	OpSend:         "Send",
	OpSendInv:      "Send with Invalidate",
	OpSendSE:       "Send with SE",
	OpSendSEInv:    "Send with SE and Invalidate",
	OpTerminate:    "Terminate",
}

// String returns the opcode's name, or "Opcode(N)" for an unassigned one.
func (o Opcode) String() string {
	if o < opcodeUnassigned {
		return opcodeNames[o]
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// Valid reports whether o is one of the eight opcodes siw supports.
func (o Opcode) Valid() bool { return o <= maxOpcode }

// Tagged reports whether messages with this opcode use the DDP tagged
// model: Write and Read Response do, all others are untagged.
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// DDP untagged queue numbers (RFC 5040 §5.1).
const (
	QNSend        = 0 // Send and its variants
	QNReadRequest = 1 // RDMA Read Request
	QNTerminate   = 2 // Terminate
)

// QN returns the untagged queue number that messages with this opcode
// use. It is meaningless for tagged opcodes and returns 0 for them.
func (o Opcode) QN() uint32 {
	switch o {
	case OpReadRequest:
		return QNReadRequest
	case OpTerminate:
		return QNTerminate
	}
	return QNSend
}

// HeaderLen returns the length of the fixed ULPDU header for this opcode,
// from the control field up to the payload, not counting the MPA length
// field: TaggedHeaderLen, UntaggedHeaderLen, ReadRequestLen or
// TerminateHeaderLen. It returns 0 for an unassigned opcode.
func (o Opcode) HeaderLen() int {
	switch {
	case o > maxOpcode:
		return 0
	case o.Tagged():
		return TaggedHeaderLen
	case o == OpReadRequest:
		return ReadRequestLen
	case o == OpTerminate:
		return TerminateHeaderLen
	}
	return UntaggedHeaderLen
}

// ReadRequest is the body of an RDMA Read Request (RFC 5040 §4.4): where
// the data go (sink), how much, and where they come from (source).
type ReadRequest struct {
	SinkSTag uint32 // Data Sink STag; the Read Responses carry it
	SinkTO   uint64 // Data Sink Tagged Offset
	Size     uint32 // RDMA Read Message Size in bytes
	SrcSTag  uint32 // Data Source STag
	SrcTO    uint64 // Data Source Tagged Offset
}

// ReadRequestBodyLen is the length of the Read Request body after the
// untagged header.
const ReadRequestBodyLen = 28

// Layer is the layer that detected the error a Terminate reports (RFC 5040
// §4.8): the high nibble of the first Terminate byte.
type Layer uint8

// Terminate error layers.
const (
	LayerRDMAP Layer = 0
	LayerDDP   Layer = 1
	LayerLLP   Layer = 2 // the lower layer: MPA
)

// String returns the layer's name, or "Layer(N)".
func (l Layer) String() string {
	switch l {
	case LayerRDMAP:
		return "RDMAP"
	case LayerDDP:
		return "DDP"
	case LayerLLP:
		return "LLP"
	}
	return "Layer(" + strconv.Itoa(int(l)) + ")"
}

// RDMAP error types (Terminate EType when Layer is LayerRDMAP).
const (
	RDMAPETypeCatastrophic     = 0x0
	RDMAPETypeRemoteProtection = 0x1
	RDMAPETypeRemoteOperation  = 0x2
)

// RDMAP error codes (Terminate ECode when Layer is LayerRDMAP).
const (
	RDMAPECodeInvalidSTag        = 0x00
	RDMAPECodeBaseBounds         = 0x01
	RDMAPECodeAccessRights       = 0x02
	RDMAPECodeSTagNotAssoc       = 0x03
	RDMAPECodeTOWrap             = 0x04
	RDMAPECodeVersion            = 0x05
	RDMAPECodeOpcode             = 0x06
	RDMAPECodeCatastrophicStream = 0x07
	RDMAPECodeCatastrophicGlobal = 0x08
	RDMAPECodeCannotInvalidate   = 0x09
	RDMAPECodeUnspecified        = 0xff
)

// DDP error types (Terminate EType when Layer is LayerDDP).
const (
	DDPETypeCatastrophic = 0x0
	DDPETypeTaggedBuf    = 0x1
	DDPETypeUntaggedBuf  = 0x2
	DDPETypeRsvd         = 0x3
)

// DDP error codes (Terminate ECode when Layer is LayerDDP). The tagged
// codes go with DDPETypeTaggedBuf, the untagged ones with
// DDPETypeUntaggedBuf.
const (
	DDPECodeCatastrophic = 0x00

	DDPECodeTInvalidSTag  = 0x00
	DDPECodeTBaseBounds   = 0x01
	DDPECodeTSTagNotAssoc = 0x02
	DDPECodeTTOWrap       = 0x03
	DDPECodeTVersion      = 0x04

	DDPECodeUTInvalidQN       = 0x01
	DDPECodeUTInvalidMSNNoBuf = 0x02
	DDPECodeUTInvalidMSNRange = 0x03
	DDPECodeUTInvalidMO       = 0x04
	DDPECodeUTMsgTooLong      = 0x05
	DDPECodeUTVersion         = 0x06
)

// LLP (MPA) error type and codes (Terminate EType and ECode when Layer is
// LayerLLP). The last three are for enhanced connection establishment.
const (
	LLPETypeMPA = 0x0

	LLPECodeTCPStreamLost     = 0x01
	LLPECodeReceivedCRC       = 0x02
	LLPECodeFPDUStart         = 0x03
	LLPECodeInvalidReqResp    = 0x04
	LLPECodeLocalCatastrophic = 0x05
	LLPECodeInsufficientIRD   = 0x06
	LLPECodeNoMatchingRTR     = 0x07
)

// Bits of the third Terminate byte.
const (
	TermFlagM = 0x80 // the attached DDP header has a valid segment length
	TermFlagD = 0x40 // a DDP header is attached
	TermFlagR = 0x20 // an RDMAP header is attached
)

// Terminate is the 4-byte Terminate body after the untagged header
// (RFC 5040 §4.8). Any copy of the offending header that follows it is the
// Terminate's payload.
type Terminate struct {
	Layer Layer // 4 bits
	EType uint8 // 4 bits
	ECode uint8
	// M, D and R are the TermFlagM, TermFlagD and TermFlagR bits.
	M, D, R bool
}
