package rsocket

import (
	"encoding/binary"
	"fmt"
	"syscall"
)

// The wire format of librdmacm's rsockets (SOCK_STREAM), as its protocol
// description (librdmacm/docs/rsocket) and rsocket.c define it.
//
// Connection set-up carries a connData in the private data of the request
// and of the reply. Data moves by RDMA Write into the peer's receive
// buffer; each transfer, and every internal notice, is announced by a
// 32-bit message word: the immediate data of an RDMA Write with Immediate
// where the transport has it (InfiniBand, RoCE), a 4-byte Send after the
// Write on iWARP (rsockets' RS_OPT_MSG_SEND).

// Message word opcodes: the top three bits of a message word.
const (
	opData     = 0 // bits 28:0: bytes written into the receive buffer
	opWrite    = 2 // a direct (iomap) write; never sent as a message
	opSGL      = 4 // bits 28:0: the new send-sequence limit (credits)
	opIOMapSGL = 6 // bits 15:0: the index of an updated iomap entry
	opCtrl     = 7 // bits 28:0: a control code
)

// Control codes of opCtrl messages.
const (
	ctrlDisconnect = 0
	ctrlKeepalive  = 1
	ctrlShutdown   = 2
)

const (
	msgDataMask = 1<<29 - 1
	msgSize     = 4 // bytes of a message word sent as a Send
)

// msgWord builds a message word.
func msgWord(op, data uint32) uint32 { return op<<29 | data&msgDataMask }

// msgOp and msgData split a message word.
func msgOp(m uint32) uint32   { return m >> 29 }
func msgData(m uint32) uint32 { return m & msgDataMask }

// connFlagNet says the sender is big-endian: the byte order of the SGL and
// iomap entries it wants written into its memory, and of its message
// words. connFlagIOMap says the target iomap size field is valid.
//
// connFlagMarked is cmrt's: the sender sets msgSGEMark in every credit
// message that follows an SGL entry it wrote. rsockets ignores flags it
// does not know and reads only the low 16 bits of a credit message, so C
// peers are unaffected; between cmrt peers the mark lets the receiver read
// an entry only once it is written, where rsockets reads every used-up
// entry at every credit message, which can overlap the peer's next write
// of it.
const (
	connFlagNet    = 1 << 0
	connFlagIOMap  = 1 << 1
	connFlagMarked = 1 << 7
)

// msgSGEMark marks a credit (opSGL) message that follows an SGL entry
// write (connFlagMarked).
const msgSGEMark = 1 << 28

// connVersion is the only version rsockets defines.
const connVersion = 1

// connDataLen is the size of struct rs_conn_data on the wire.
const connDataLen = 40

// sge is struct rs_sge: a remote buffer (address, key, length).
type sge struct {
	Addr uint64
	Key  uint32
	Len  uint32
}

// sgeLen and iomapLen are the sizes of struct rs_sge and struct rs_iomap.
const (
	sgeLen   = 16
	iomapLen = 24
)

// connData is struct rs_conn_data: what each side tells the other at
// connection set-up. Multi-byte fields are big-endian on the wire.
type connData struct {
	Version   uint8
	Flags     uint8
	Credits   uint16 // receive credits: the peer's receive queue size
	IOMapSize uint8  // scaled target iomap size (valid with connFlagIOMap)
	// TargetSGL names the sender's target SGL: Len is its number of
	// entries. The peer writes receive-buffer descriptors there.
	TargetSGL sge
	// DataBuf is the first receive buffer the peer may write into.
	DataBuf sge
}

// marshal appends the wire form of d to b.
func (d *connData) marshal(b []byte) []byte {
	b = append(b, d.Version, d.Flags)
	b = binary.BigEndian.AppendUint16(b, d.Credits)
	b = append(b, 0, 0, 0, d.IOMapSize)
	for _, s := range []*sge{&d.TargetSGL, &d.DataBuf} {
		b = binary.BigEndian.AppendUint64(b, s.Addr)
		b = binary.BigEndian.AppendUint32(b, s.Key)
		b = binary.BigEndian.AppendUint32(b, s.Len)
	}
	return b
}

// errBadConnData is the error for private data that is not a usable
// rs_conn_data.
var errBadConnData = fmt.Errorf("rsocket: bad connection data: %w", syscall.EPROTO)

// parseConnData decodes the private data of a request or reply. Extra
// bytes after the structure are ignored (the transport may pad); a short
// buffer, another version, or a peer that offers no receive buffer, no
// target SGL or no credits is an error wrapping EPROTO (rsockets rejects
// any version but 1 with ENOTSUP; the rest would make the connection
// unusable).
func parseConnData(b []byte) (connData, error) {
	var d connData
	if len(b) < connDataLen {
		return d, fmt.Errorf("%w: %d bytes, want %d", errBadConnData, len(b), connDataLen)
	}
	d.Version, d.Flags = b[0], b[1]
	d.Credits = binary.BigEndian.Uint16(b[2:])
	d.IOMapSize = b[7]
	for k, s := range []*sge{&d.TargetSGL, &d.DataBuf} {
		o := 8 + k*sgeLen
		s.Addr = binary.BigEndian.Uint64(b[o:])
		s.Key = binary.BigEndian.Uint32(b[o+8:])
		s.Len = binary.BigEndian.Uint32(b[o+12:])
	}
	switch {
	case d.Version != connVersion:
		return d, fmt.Errorf("%w: version %d", errBadConnData, d.Version)
	case d.Credits == 0:
		return d, fmt.Errorf("%w: no credits", errBadConnData)
	case d.TargetSGL.Len == 0 || d.TargetSGL.Len > maxTargetSGL:
		return d, fmt.Errorf("%w: target SGL of %d entries", errBadConnData, d.TargetSGL.Len)
	case d.DataBuf.Len == 0 || d.DataBuf.Len > msgDataMask:
		return d, fmt.Errorf("%w: data buffer of %d bytes", errBadConnData, d.DataBuf.Len)
	}
	return d, nil
}

// maxTargetSGL bounds the target SGL a peer may announce: rsockets uses 2;
// the bound only keeps a hostile peer from making us index far.
const maxTargetSGL = 1 << 10

// byteOrder reads and appends in one byte order.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// peerOrder returns the byte order a peer with these flags uses in its
// memory and message words.
func peerOrder(flags uint8) byteOrder {
	if flags&connFlagNet != 0 {
		return binary.BigEndian
	}
	return binary.LittleEndian
}

// appendSGE appends an rs_sge in byte order o.
func appendSGE(b []byte, o byteOrder, s sge) []byte {
	b = o.AppendUint64(b, s.Addr)
	b = o.AppendUint32(b, s.Key)
	return o.AppendUint32(b, s.Len)
}

// readSGE reads an rs_sge in byte order o; b holds at least sgeLen bytes.
func readSGE(b []byte, o byteOrder) sge {
	return sge{Addr: o.Uint64(b), Key: o.Uint32(b[8:]), Len: o.Uint32(b[12:])}
}

// iomap is struct rs_iomap: a peer's buffer that direct writes at
// [Offset, Offset+SGE.Len) land in.
type iomap struct {
	Offset uint64
	SGE    sge
}

// appendIOMap appends an rs_iomap in byte order o.
func appendIOMap(b []byte, o byteOrder, m iomap) []byte {
	b = o.AppendUint64(b, m.Offset)
	return appendSGE(b, o, m.SGE)
}

// readIOMap reads an rs_iomap in byte order o; b holds at least iomapLen
// bytes.
func readIOMap(b []byte, o byteOrder) iomap {
	return iomap{Offset: o.Uint64(b), SGE: readSGE(b[8:], o)}
}

// scaleOf and valueOf convert an iomap size to the 8-bit scaled form of
// rs_conn_data and back (values above 128 keep their high bits only).
func scaleOf(v int) uint8 {
	if v <= 128 {
		return uint8(v)
	}
	return uint8(128 | (v>>8)&0x7f)
}

func valueOf(s uint8) int {
	if s <= 128 {
		return int(s)
	}
	return int(s&^128) << 8
}
