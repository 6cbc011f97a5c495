// Package sidr is the wire codec of the software fabric's unreliable
// datagram (UD) service: a small SIDR-like request/reply exchange that sets
// up UD "connections" (rdma_connect / rdma_accept / rdma_reject on PS_UDP,
// PS_IPOIB and UD PS_IB ids), and the header every UD data datagram carries.
// Both travel as UDP payloads; all integers are big-endian.
//
// Every message starts with the same two bytes: Version (1) and a Type
// (TypeREQ, TypeREP or TypeData), so a datagram that reaches the wrong
// socket is recognised and dropped.
//
// # SIDR request and reply (24-byte header + private data)
//
//	offset size field
//	0      1    version    1
//	1      1    type       1 = REQ, 2 = REP
//	2      2    port space the requester's rdma_port_space (REP: echoed)
//	4      8    tid        transaction id, chosen at random by the
//	                       requester; a REP answers the REQ with its tid
//	12     1    status     REQ: 0; REP: 0 success, 1 unsupported (no
//	                       listener of that port space on the port),
//	                       2 rejected by the listener (rdma_reject)
//	13     1    pd_len     private data length: REQ <= 180, REP <= 136
//	14     2    reserved   0
//	16     4    qp_num     REQ: the requester's QP number; REP: the
//	                       replier's (24 bits: the top byte is 0)
//	20     4    qkey       the sender's Q_Key
//	24     n    private data (pd_len bytes; the datagram ends there)
//
// The REQ goes to the listener's rdma_cm port (its UDP port); the REP comes
// back to the port the REQ came from, from the address and port the REQ went
// to (a requester ignores a REP from anywhere else). A REQ with no REP is
// retransmitted with the same tid, so a listener recognises duplicates by
// (source, tid).
//
// # Data header (16 bytes + payload)
//
//	offset size field
//	0      1    version    1
//	1      1    type       3 = DATA
//	2      1    flags      bit 0: solicited event; other bits 0
//	3      1    reserved   0
//	4      4    dst_qpn    the destination QP number (0xFFFFFF for a
//	                       multicast group); top byte 0
//	8      4    src_qpn    the sender's QP number; top byte 0
//	12     4    qkey       the Q_Key the sender used
//	16     n    payload    the message (one datagram, one message)
//
// Decoders check every field: the version, the type, reserved bytes and bits,
// 24-bit QP numbers, the private-data length against its limit and against
// the datagram's length (which must match exactly). Anything else is
// rejected with an error wrapping ErrMalformed.
package sidr

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version is the protocol version this package speaks.
const Version = 1

// Type is the kind of a message.
type Type uint8

// Message types.
const (
	TypeREQ  Type = 1
	TypeREP  Type = 2
	TypeData Type = 3
)

// Status is the outcome a SIDR REP carries.
type Status uint8

// REP statuses, numbered as InfiniBand's SIDR REP status (enum
// ib_cm_sidr_status). The active side reports a non-zero status as the
// status of its UNREACHABLE event, as the kernel's cma_sidr_rep_handler
// does: rdma_reject gives 2 (IB_SIDR_REJECT), verified against the kernel's
// rdma_cm on rxe; a port with no UD listener gives 1 (IB_SIDR_UNSUPPORTED).
const (
	StatusSuccess     Status = 0
	StatusUnsupported Status = 1
	StatusReject      Status = 2
)

// Sizes and limits.
const (
	HeaderLen     = 24  // SIDR header
	DataHeaderLen = 16  // data header
	MaxREQData    = 180 // private data of a REQ
	MaxREPData    = 136 // private data of a REP
	MaxQPN        = 0xFFFFFF
	// MulticastQPN is the destination QP number of group traffic.
	MulticastQPN = 0xFFFFFF
	// FlagSolicited is the data header's solicited-event bit.
	FlagSolicited = 1
)

// ErrMalformed is wrapped by every decoding error.
var ErrMalformed = errors.New("sidr: malformed message")

func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// Message is a SIDR REQ or REP.
type Message struct {
	Type      Type
	PortSpace uint16
	TID       uint64
	Status    Status
	QPN       uint32
	QKey      uint32
	// PrivateData aliases the decoded datagram.
	PrivateData []byte
}

// maxData returns the private-data limit of a message type.
func maxData(t Type) int {
	if t == TypeREQ {
		return MaxREQData
	}
	return MaxREPData
}

// Len is the encoded size of m.
func (m *Message) Len() int { return HeaderLen + len(m.PrivateData) }

// Append encodes m at the end of b. It fails (ErrMalformed) for what a
// decoder would refuse: a bad type, a non-zero REQ status, a QP number over
// 24 bits or too much private data.
func Append(b []byte, m *Message) ([]byte, error) {
	if err := m.check(len(m.PrivateData)); err != nil {
		return b, err
	}
	var h [HeaderLen]byte
	h[0] = Version
	h[1] = byte(m.Type)
	binary.BigEndian.PutUint16(h[2:], m.PortSpace)
	binary.BigEndian.PutUint64(h[4:], m.TID)
	h[12] = byte(m.Status)
	h[13] = byte(len(m.PrivateData))
	binary.BigEndian.PutUint32(h[16:], m.QPN)
	binary.BigEndian.PutUint32(h[20:], m.QKey)
	b = append(b, h[:]...)
	return append(b, m.PrivateData...), nil
}

func (m *Message) check(pdLen int) error {
	switch m.Type {
	case TypeREQ:
		if m.Status != StatusSuccess {
			return malformed("REQ with status %d", m.Status)
		}
	case TypeREP:
	default:
		return malformed("type %d is not REQ or REP", m.Type)
	}
	if m.QPN > MaxQPN {
		return malformed("QP number %#x over 24 bits", m.QPN)
	}
	if pdLen > maxData(m.Type) {
		return malformed("%d bytes of private data, limit %d", pdLen, maxData(m.Type))
	}
	return nil
}

// Parse decodes a SIDR REQ or REP from a whole datagram. PrivateData aliases
// b.
func Parse(b []byte, m *Message) error {
	if len(b) < HeaderLen {
		return malformed("%d bytes, header is %d", len(b), HeaderLen)
	}
	if b[0] != Version {
		return malformed("version %d", b[0])
	}
	if b[14] != 0 || b[15] != 0 {
		return malformed("reserved bytes set")
	}
	pd := int(b[13])
	if len(b) != HeaderLen+pd {
		return malformed("length %d, header says %d", len(b), HeaderLen+pd)
	}
	*m = Message{
		Type:        Type(b[1]),
		PortSpace:   binary.BigEndian.Uint16(b[2:]),
		TID:         binary.BigEndian.Uint64(b[4:]),
		Status:      Status(b[12]),
		QPN:         binary.BigEndian.Uint32(b[16:]),
		QKey:        binary.BigEndian.Uint32(b[20:]),
		PrivateData: b[HeaderLen : HeaderLen+pd : HeaderLen+pd],
	}
	return m.check(pd)
}

// DataHeader is the header of a UD data datagram.
type DataHeader struct {
	Flags  uint8
	DstQPN uint32
	SrcQPN uint32
	QKey   uint32
}

// PutDataHeader encodes h into the first DataHeaderLen bytes of b, which
// must be that long. QP numbers are truncated to 24 bits and unknown flags
// dropped, so the result always decodes.
func PutDataHeader(b []byte, h *DataHeader) {
	_ = b[DataHeaderLen-1]
	b[0] = Version
	b[1] = byte(TypeData)
	b[2] = h.Flags & FlagSolicited
	b[3] = 0
	binary.BigEndian.PutUint32(b[4:], h.DstQPN&MaxQPN)
	binary.BigEndian.PutUint32(b[8:], h.SrcQPN&MaxQPN)
	binary.BigEndian.PutUint32(b[12:], h.QKey)
}

// ParseData decodes the header of a data datagram and returns its payload,
// which aliases b.
func ParseData(b []byte, h *DataHeader) ([]byte, error) {
	if len(b) < DataHeaderLen {
		return nil, malformed("%d bytes, data header is %d", len(b), DataHeaderLen)
	}
	if b[0] != Version {
		return nil, malformed("version %d", b[0])
	}
	if Type(b[1]) != TypeData {
		return nil, malformed("type %d is not DATA", b[1])
	}
	if b[2]&^FlagSolicited != 0 || b[3] != 0 {
		return nil, malformed("reserved flags or byte set")
	}
	*h = DataHeader{
		Flags:  b[2],
		DstQPN: binary.BigEndian.Uint32(b[4:]),
		SrcQPN: binary.BigEndian.Uint32(b[8:]),
		QKey:   binary.BigEndian.Uint32(b[12:]),
	}
	if h.DstQPN > MaxQPN || h.SrcQPN > MaxQPN {
		return nil, malformed("QP number over 24 bits")
	}
	return b[DataHeaderLen:], nil
}

// Kind returns the type of a datagram from its first two bytes, or 0 when
// it is too short or of another version.
func Kind(b []byte) Type {
	if len(b) < 2 || b[0] != Version {
		return 0
	}
	return Type(b[1])
}
