package iwarp

import (
	"encoding/binary"
	"fmt"
)

// The 2-byte control field that starts every ULPDU (RFC 5041 §4.2 and
// RFC 5040 §4.2):
//
//	byte 0: T(0x80) L(0x40) reserved(0x3c) DDP version(0x03)
//	byte 1: RDMAP version(0xc0) reserved(0x30) opcode(0x0f)
const (
	DDPFlagTagged = 0x80 // T: tagged buffer model
	DDPFlagLast   = 0x40 // L: last segment of the message
	DDPVersion    = 1
	RDMAPVersion  = 1

	ddpVersionMask   = 0x03
	rdmapVersionMask = 0xc0
	rdmapVersionBit  = 6
	opcodeMask       = 0x0f
)

// ULPDU header lengths, counted from the control field (the MPA length
// field is not included).
const (
	// ControlLen is the length of the DDP/RDMAP control field.
	ControlLen = 2
	// TaggedHeaderLen is control, STag and TO (Write, Read Response).
	TaggedHeaderLen = 14
	// UntaggedHeaderLen is control, RsvdULP, QN, MSN and MO (Send*).
	UntaggedHeaderLen = 18
	// ReadRequestLen is the untagged header plus the Read Request body;
	// a Read Request ULPDU is exactly this long (FPDU 52 bytes).
	ReadRequestLen = UntaggedHeaderLen + ReadRequestBodyLen
	// TerminateHeaderLen is the untagged header plus the 4-byte Terminate
	// body; a Terminate with no attached header is this long.
	TerminateHeaderLen = UntaggedHeaderLen + 4
)

// Header is a decoded DDP/RDMAP header. Which fields are used depends on
// Op; the others are zero after ParseULPDU and ignored by AppendHeader.
// The DDP tagged flag and the untagged queue number are implied by Op
// (Opcode.Tagged, Opcode.QN) and so have no fields.
type Header struct {
	Op   Opcode
	Last bool // DDP L flag: the message's last segment

	// Tagged opcodes (Write, Read Response).
	STag uint32 // Data Sink STag
	TO   uint64 // Data Sink Tagged Offset of this segment

	// Untagged opcodes (Send*, Read Request, Terminate).
	InvalSTag uint32 // RsvdULP field: the STag to invalidate for Send with Invalidate; zero otherwise
	MSN       uint32 // message sequence number, per queue, from 1
	MO        uint32 // message offset of this segment

	Read ReadRequest // Op == OpReadRequest
	Term Terminate   // Op == OpTerminate
}

// Len returns the encoded length of h, the same as h.Op.HeaderLen().
func (h *Header) Len() int { return h.Op.HeaderLen() }

// AppendHeader appends the ULPDU header h to dst: control field, the
// tagged or untagged DDP header, and the Read Request or Terminate body
// for those opcodes. The T bit and the queue number come from h.Op. It
// fails, leaving dst unchanged, for an unassigned opcode or a Terminate
// Layer or EType above 15. It allocates only if dst lacks capacity.
//
// The result is the hdr argument of AppendFPDU; the MPA length field is
// not part of it.
func AppendHeader(dst []byte, h *Header) ([]byte, error) {
	op := h.Op
	if !op.Valid() {
		return dst, fmt.Errorf("%w: %d", ErrOpcode, op)
	}
	if op == OpTerminate && (h.Term.Layer > 0xf || h.Term.EType > 0xf) {
		return dst, fmt.Errorf("%w: layer %d etype %d", ErrTermField, h.Term.Layer, h.Term.EType)
	}
	c0 := byte(DDPVersion)
	if op.Tagged() {
		c0 |= DDPFlagTagged
	}
	if h.Last {
		c0 |= DDPFlagLast
	}
	dst = append(dst, c0, RDMAPVersion<<rdmapVersionBit|byte(op))
	if op.Tagged() {
		dst = binary.BigEndian.AppendUint32(dst, h.STag)
		return binary.BigEndian.AppendUint64(dst, h.TO), nil
	}
	dst = binary.BigEndian.AppendUint32(dst, h.InvalSTag)
	dst = binary.BigEndian.AppendUint32(dst, op.QN())
	dst = binary.BigEndian.AppendUint32(dst, h.MSN)
	dst = binary.BigEndian.AppendUint32(dst, h.MO)
	switch op {
	case OpReadRequest:
		r := &h.Read
		dst = binary.BigEndian.AppendUint32(dst, r.SinkSTag)
		dst = binary.BigEndian.AppendUint64(dst, r.SinkTO)
		dst = binary.BigEndian.AppendUint32(dst, r.Size)
		dst = binary.BigEndian.AppendUint32(dst, r.SrcSTag)
		dst = binary.BigEndian.AppendUint64(dst, r.SrcTO)
	case OpTerminate:
		t := &h.Term
		var flags byte
		if t.M {
			flags |= TermFlagM
		}
		if t.D {
			flags |= TermFlagD
		}
		if t.R {
			flags |= TermFlagR
		}
		dst = append(dst, byte(t.Layer)<<4|t.EType, t.ECode, flags, 0)
	}
	return dst, nil
}

// ParseULPDU decodes the DDP/RDMAP header at the start of the ULPDU b (as
// returned by ParseFPDU or Deframer.Next) into h and returns the payload
// after it, which aliases b. For a Terminate the payload is the attached
// copy of the offending header, if any.
//
// It checks, in this order, as siw does: the DDP version (ErrDDPVersion),
// the RDMAP version (ErrRDMAPVersion), the opcode (ErrOpcode), the tagged
// flag against the opcode (ErrTagged), the length against the opcode's
// header (ErrTruncated; also for fewer than 2 bytes), the untagged queue
// number against the opcode (ErrQN), and that a Read Request carries
// nothing after its body (ErrReadRequestPayload). Reserved bits are
// ignored. Message sequence, offsets and STags are the caller's to check.
//
// On error h is left unchanged; TerminateFor maps the error to the
// Terminate to send. ParseULPDU never allocates.
func ParseULPDU(b []byte, h *Header) (payload []byte, err error) {
	if len(b) < ControlLen {
		return nil, ErrTruncated
	}
	c0, c1 := b[0], b[1]
	if c0&ddpVersionMask != DDPVersion {
		return nil, ErrDDPVersion
	}
	if c1&rdmapVersionMask != RDMAPVersion<<rdmapVersionBit {
		return nil, ErrRDMAPVersion
	}
	op := Opcode(c1 & opcodeMask)
	if !op.Valid() {
		return nil, ErrOpcode
	}
	if (c0&DDPFlagTagged != 0) != op.Tagged() {
		return nil, ErrTagged
	}
	hl := op.HeaderLen()
	if len(b) < hl {
		return nil, ErrTruncated
	}
	be := binary.BigEndian
	if op.Tagged() {
		*h = Header{
			Op:   op,
			Last: c0&DDPFlagLast != 0,
			STag: be.Uint32(b[2:6]),
			TO:   be.Uint64(b[6:14]),
		}
		return b[hl:], nil
	}
	if be.Uint32(b[6:10]) != op.QN() {
		return nil, ErrQN
	}
	if op == OpReadRequest && len(b) > hl {
		return nil, ErrReadRequestPayload
	}
	*h = Header{
		Op:        op,
		Last:      c0&DDPFlagLast != 0,
		InvalSTag: be.Uint32(b[2:6]),
		MSN:       be.Uint32(b[10:14]),
		MO:        be.Uint32(b[14:18]),
	}
	switch op {
	case OpReadRequest:
		h.Read = ReadRequest{
			SinkSTag: be.Uint32(b[18:22]),
			SinkTO:   be.Uint64(b[22:30]),
			Size:     be.Uint32(b[30:34]),
			SrcSTag:  be.Uint32(b[34:38]),
			SrcTO:    be.Uint64(b[38:46]),
		}
	case OpTerminate:
		h.Term = Terminate{
			Layer: Layer(b[18] >> 4),
			EType: b[18] & 0x0f,
			ECode: b[19],
			M:     b[20]&TermFlagM != 0,
			D:     b[20]&TermFlagD != 0,
			R:     b[20]&TermFlagR != 0,
		}
	}
	return b[hl:], nil
}
