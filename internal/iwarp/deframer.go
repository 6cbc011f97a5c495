package iwarp

import "slices"

// Deframer cuts a TCP byte stream into FPDUs and hands out their ULPDUs in
// order. Feed it chunks of any size, split anywhere (one byte at a time
// works), with Write, or read from the socket straight into its buffer
// with WriteSpace and Commit; then call Next until it returns ErrShort.
//
// The Deframer copies incoming bytes into one internal buffer that it
// reuses, so once that buffer has grown to the largest FPDU plus the
// largest chunk, it does not allocate. The buffer holds at most one partial
// FPDU plus whatever was written since the last Next returned ErrShort.
//
// The zero value is ready to use with CRC checking off. A Deframer is not
// safe for concurrent use.
type Deframer struct {
	buf   []byte // buf[off:] holds the bytes not yet consumed
	off   int
	space int // free bytes handed out by WriteSpace and not yet committed
	crc   bool
	err   error
}

// NewDeframer returns a Deframer that checks the CRC of every FPDU when
// crc is set (MPA negotiated C=1).
func NewDeframer(crc bool) *Deframer { return &Deframer{crc: crc} }

// SetCRC turns CRC checking on or off for the FPDUs not yet returned.
func (d *Deframer) SetCRC(on bool) { d.crc = on }

// CRC reports whether CRC checking is on.
func (d *Deframer) CRC() bool { return d.crc }

// Buffered returns the number of bytes written and not yet consumed.
func (d *Deframer) Buffered() int { return len(d.buf) - d.off }

// Err returns the error that stopped the Deframer, or nil.
func (d *Deframer) Err() error { return d.err }

// Reset discards all buffered bytes and any error, keeping the buffer and
// the CRC setting.
func (d *Deframer) Reset() {
	d.buf, d.off, d.space, d.err = d.buf[:0], 0, 0, nil
}

// compact moves the unconsumed bytes to the front of the buffer.
func (d *Deframer) compact() {
	d.space = 0
	if d.off == 0 {
		return
	}
	n := copy(d.buf, d.buf[d.off:])
	d.buf, d.off = d.buf[:n], 0
}

// Write appends p to the stream. It always takes all of p unless the
// Deframer has stopped on an error, which it then returns. It invalidates
// the ULPDUs returned so far.
func (d *Deframer) Write(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	d.compact()
	d.buf = append(d.buf, p...)
	return len(p), nil
}

// WriteSpace returns free space at the end of the buffer, at least min
// bytes long, for the caller to read socket data into; Commit then adds
// the bytes read to the stream. No other call may come between the two.
// WriteSpace invalidates the ULPDUs returned so far.
func (d *Deframer) WriteSpace(min int) []byte {
	d.compact()
	if min > 0 {
		d.buf = slices.Grow(d.buf, min)
	}
	free := d.buf[len(d.buf):cap(d.buf)]
	d.space = len(free)
	return free
}

// Commit adds n bytes, just written into the slice from the preceding
// WriteSpace, to the stream. It returns ErrCommit, adding nothing, if n is
// negative or larger than that slice, or if another call came in between;
// it returns the stopping error if the Deframer has stopped.
func (d *Deframer) Commit(n int) error {
	if d.err != nil {
		return d.err
	}
	if n < 0 || n > d.space {
		return ErrCommit
	}
	d.buf = d.buf[:len(d.buf)+n]
	d.space -= n
	return nil
}

// Peek returns the bytes written and not yet consumed, starting with the
// next FPDU's length field: a caller that places a long FPDU's payload
// itself reads its header here (see Discard). The slice aliases the
// internal buffer and stays valid until the next Write, WriteSpace,
// Discard or Reset.
func (d *Deframer) Peek() []byte { return d.buf[d.off:] }

// Discard consumes the first n buffered bytes, as if they had been parsed:
// a caller that took over an FPDU from its header on (Peek) discards what
// it took, and later the pad and CRC that end the FPDU. It returns
// ErrCommit, consuming nothing, if fewer than n bytes are buffered, and
// the stopping error if the Deframer has stopped.
func (d *Deframer) Discard(n int) error {
	d.space = 0
	if d.err != nil {
		return d.err
	}
	if n < 0 || n > len(d.buf)-d.off {
		return ErrCommit
	}
	d.off += n
	return nil
}

// Next returns the ULPDU of the next complete FPDU, or ErrShort if no
// complete FPDU is buffered. The ULPDU aliases the internal buffer and
// stays valid until the next Write, WriteSpace or Reset, so a caller may
// collect several ULPDUs with Next before processing them.
//
// A CRC mismatch returns ErrCRC and stops the Deframer: the stream cannot
// be trusted after it, and every later call returns ErrCRC until Reset.
func (d *Deframer) Next() ([]byte, error) {
	d.space = 0
	if d.err != nil {
		return nil, d.err
	}
	u, n, err := ParseFPDU(d.buf[d.off:], d.crc)
	if err == ErrShort {
		return nil, err
	}
	d.off += n
	if err != nil {
		d.err = err
		return nil, err
	}
	return u, nil
}
