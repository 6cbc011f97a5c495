package iwarp

import "fmt"

// MaxPayload returns how many payload bytes one FPDU of a message with
// opcode op may carry when FPDUs are sized to TCP segments of segSize
// bytes (the MSS), the way siw does it: the segment size is rounded down
// to a multiple of 8, the FPDU fills it, and the ULPDU stays within
// MaxULPDU. The result is a multiple of 4, so FPDUs before the last one
// need no pad.
//
// It returns 0 when segSize leaves no room for payload, and for Read
// Requests (which carry none) and unassigned opcodes. With the Ethernet
// MSS of 1448 a Send carries 1424 bytes; on loopback (MSS 65483) a Send
// carries 65456 and a Write 65460.
func MaxPayload(segSize int, op Opcode) int {
	hl := op.HeaderLen()
	if hl == 0 || op == OpReadRequest {
		return 0
	}
	p := segSize&^7 - LengthFieldLen - hl - CRCLen
	p = min(p, MaxULPDU-hl) &^ 3
	return max(p, 0)
}

// Segment is one piece of a message, carried by one FPDU.
type Segment struct {
	// Offset is the piece's offset in the message: the DDP MO of an
	// untagged segment, or what to add to the base TO of a tagged one.
	Offset int
	// Payload aliases the message.
	Payload []byte
	// Last is set on the final piece only; it is the DDP L flag.
	Last bool
}

// Segmenter splits a message into pieces of at most a given payload size,
// in order, for the FPDUs of one RDMAP message. An empty message yields
// one empty, last segment (a zero-length Send, Write or Read Response).
// It does not allocate.
type Segmenter struct {
	msg  []byte
	max  int
	off  int
	done bool
}

// NewSegmenter returns a Segmenter over msg that puts at most maxPayload
// bytes in each segment; use MaxPayload to choose it. It returns
// ErrSegmentSize if maxPayload is not positive.
func NewSegmenter(msg []byte, maxPayload int) (Segmenter, error) {
	if maxPayload <= 0 {
		return Segmenter{}, fmt.Errorf("%w: max payload %d", ErrSegmentSize, maxPayload)
	}
	return Segmenter{msg: msg, max: maxPayload}, nil
}

// Next returns the next segment, or ok false after the last one.
func (s *Segmenter) Next() (seg Segment, ok bool) {
	if s.done || s.max <= 0 {
		return Segment{}, false
	}
	end := s.off + min(s.max, len(s.msg)-s.off)
	seg = Segment{Offset: s.off, Payload: s.msg[s.off:end:end], Last: end == len(s.msg)}
	s.off = end
	s.done = seg.Last
	return seg, true
}
