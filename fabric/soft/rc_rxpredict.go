package soft

// Predicted placement: while a Send's FPDU is placed directly (rc_rx.go),
// one readv(2) reads the rest of its payload and also the FPDUs expected
// after it, each predicted to be as long as this one and to land right
// after it in the same posted receive: its pad and CRC and the next
// FPDU's length field and header into a small buffer (rxDirect.tb), its
// payload straight into the receive, and so on, then a lookahead into the
// deframer. A stream of long messages is then read about predictMax bytes
// a system call instead of one FPDU (finding 23 in BENCHMARKS.md).
//
// Each predicted header is checked, once read, as the deframed path
// checks a header (sendDst: MSN, offset, the receive's length, its region
// valid), and against the prediction (length, opcode, MSN, offset, and
// no message ended before it). A header that says otherwise (the message
// ended, a shorter FPDU, another opcode or message) makes everything read
// from it on go to the deframer, in stream order, as if read there: the
// deframed path then judges it as it would have. The predicted payload
// spans lie within the posted receive whose message is being placed (its
// region checked valid under c.mu right before the read), so a peer's
// bytes never land outside it; a wrong prediction leaves stream bytes in
// that receive past the end of its message, before its completion is
// reported (the receive is the provider's until then, and only ByteLen
// of it is defined), and pauses prediction for predictPause messages.

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/internal/iwarp"
)

const (
	// predictFPDUs bounds the FPDUs predicted per read: a 1 MiB message
	// in loopback's FPDUs (about 32 KiB) fits one read.
	predictFPDUs = 32
	// predictMax bounds the bytes one predicted read asks for: a 1 MiB
	// message, as the streaming bench's TCP baseline reads it (its
	// bufio.Reader hands a read of 1 MiB straight to read(2)). At 256
	// KiB a read, a stream of 1 MiB messages took 4-5 readv(2) a MiB to
	// TCP's 2 read(2), and the waiter parked and woke more often
	// (finding 34 in BENCHMARKS.md).
	predictMax = 1 << 20
	// predictTB is rxDirect.tb's size: the previous FPDU's pad (up to
	// 3) and CRC, then the length field and an untagged header.
	predictTB = 3 + iwarp.CRCLen + iwarp.LengthFieldLen + iwarp.UntaggedHeaderLen
	// predictPause is how many messages go unpredicted after a wrong
	// prediction (receives larger than the messages sent into them).
	predictPause = 16
)

// isSend reports whether op is one of the Send opcodes.
func isSend(op iwarp.Opcode) bool {
	switch op {
	case iwarp.OpSend, iwarp.OpSendInv, iwarp.OpSendSE, iwarp.OpSendSEInv:
		return true
	}
	return false
}

// predict lays out the FPDUs expected after the direct FPDU, a Send's
// that is not its message's last, in the posted receive's room after it,
// and reports whether it predicted any.
func (p *rcPath) predict() bool {
	d := p.dx
	d.np = 0
	if d.miss > 0 || d.h.Last || !isSend(d.h.Op) || p.in == nil {
		return false
	}
	r := &p.in.rcv
	if !r.active || r.m != d.m {
		return false
	}
	full, hl := len(d.dst), d.h.Len()
	pos, pad := r.placed+full, d.pad
	total := full - d.off
	for d.np < predictFPDUs && total < predictMax {
		room := len(r.wr.Buf) - pos
		if room <= 0 {
			break
		}
		n := min(full, room)
		tn := pad + iwarp.CRCLen + iwarp.LengthFieldLen + hl
		d.tn[d.np] = uint8(tn)
		d.span[d.np] = r.wr.Buf[pos : pos+n]
		d.np++
		pad = iwarp.Pad(hl + n)
		pos += n
		total += tn + n
	}
	return d.np > 0
}

// setIov points v at b.
func setIov(v *unix.Iovec, b []byte) {
	v.Base = &b[0]
	v.SetLen(len(b))
}

// readPredicted reads the rest of the direct FPDU's payload and the FPDUs
// predict laid out after it, with a lookahead into the deframer, in one
// readv, and places what it read (landPredicted).
func (p *rcPath) readPredicted() (int, error) {
	d := p.dx
	np := d.np
	d.np = 0
	k := 0
	setIov(&d.iov[k], d.dst[d.off:])
	k++
	for j := 0; j < np; j++ {
		setIov(&d.iov[k], d.tb[j][:d.tn[j]])
		setIov(&d.iov[k+1], d.span[j])
		k += 2
	}
	space := p.df.WriteSpace(directLookahead)
	tail := space[:min(len(space), directLookahead)]
	if len(tail) > 0 {
		setIov(&d.iov[k], tail)
		k++
	}
	r, _, e := unix.Syscall(unix.SYS_READV, uintptr(p.c.fd), uintptr(unsafe.Pointer(&d.iov[0])), uintptr(k))
	for j := range d.iov[:k] {
		d.iov[j].Base = nil
	}
	if e != 0 {
		clear(d.span[:np])
		return 0, e
	}
	n := int(r)
	if n > 0 {
		p.landPredicted(n, np, tail)
	}
	clear(d.span[:np])
	return n, nil
}

// landPredicted accounts for the n bytes readPredicted read: the direct
// FPDU's payload, then each predicted FPDU whose header proves the
// prediction right, placed as startDirect and endDirect would have; from
// the first header that does not, everything goes to the deframer.
func (p *rcPath) landPredicted(n, np int, tail []byte) {
	d := p.dx
	rest := d.dst[d.off:]
	k := min(n, len(rest))
	if p.crc {
		d.crc = iwarp.CRC32cUpdate(d.crc, rest[:k])
	}
	d.off += k
	n -= k
	for j := 0; j < np && n > 0; j++ {
		t := d.tb[j][:d.tn[j]]
		if n < len(t) {
			// The deframer is empty while a direct FPDU is due: the
			// trailer and header so far go there, for endDirect.
			_, _ = p.df.Write(t[:n])
			return
		}
		n -= len(t)
		if p.crc && iwarp.CRC32cUpdate(d.crc, t[:d.pad]) != binary.LittleEndian.Uint32(t[d.pad:]) {
			d.on = false
			p.terminate(iwarp.TerminateFor(iwarp.ErrCRC, nil), nil, iwarp.ErrCRC)
			return
		}
		prev, prevLen := d.h, len(d.dst)
		d.on, d.streak = false, true
		p.sendDone(&d.h, prevLen, d.hdr[iwarp.LengthFieldLen:d.hl])
		d.dst, d.m = nil, nil
		if p.dead || p.c.state != csRTS {
			return
		}
		hb := t[d.pad+iwarp.CRCLen:]
		span := d.span[j]
		switch p.takePredicted(&prev, prevLen, hb, span) {
		case predictWrong:
			p.mispredicted(j, np, hb, n, tail)
			return
		case predictFailed:
			return
		}
		got := min(n, len(span))
		d.off = got
		if p.crc {
			d.crc = iwarp.CRC32cUpdate(iwarp.CRC32cUpdate(0, hb), span[:got])
		}
		n -= got
	}
	if n > 0 {
		_ = p.df.Commit(n) // the lookahead, after every predicted FPDU
	}
}

// What takePredicted found.
const (
	predictRight  = iota // the FPDU is the one predicted: it is direct now
	predictWrong         // it is not: the deframer takes it from its header on
	predictFailed        // it is, and failed the receive's checks: terminated
)

// takePredicted checks the header hb (length field on) read where the FPDU
// after prev (whose payload was prevLen bytes) was predicted, with its
// payload predicted at span, and makes it the direct FPDU if it is the one
// predicted.
func (p *rcPath) takePredicted(prev *iwarp.Header, prevLen int, hb, span []byte) int {
	hl := prev.Len()
	if prev.Last || int(binary.BigEndian.Uint16(hb)) != hl+len(span) {
		return predictWrong
	}
	var h iwarp.Header
	u := hb[iwarp.LengthFieldLen:]
	if _, err := iwarp.ParseULPDU(u, &h); err != nil || h.Op != prev.Op || h.InvalSTag != prev.InvalSTag ||
		h.MSN != prev.MSN || h.MO != prev.MO+uint32(prevLen) {
		return predictWrong
	}
	dst, ok := p.sendDst(&h, len(span), u)
	if !ok {
		return predictFailed
	}
	if unsafe.SliceData(dst) != unsafe.SliceData(span) {
		return predictWrong // not where it was predicted (never: both come from r.placed)
	}
	countReceivedMessage(p.c.fd, h.Last)
	d := p.dx
	d.on, d.h, d.m, d.dst, d.pad = true, h, p.in.rcv.m, dst, iwarp.Pad(hl+len(span))
	d.hl = copy(d.hdr[:], hb)
	return predictRight
}

// mispredicted hands the deframer, in stream order, the n bytes read after
// predicted FPDU j's trailer that the header hb at its start disproved:
// hb, what landed in the predicted spans from j on with the predicted
// trailers and headers between them, and the lookahead. The deframed path
// then places them as if read there.
//
//go:noinline
func (p *rcPath) mispredicted(j, np int, hb []byte, n int, tail []byte) {
	d := p.dx
	d.miss = predictPause
	pieces := len(d.span[j])
	for i := j + 1; i < np; i++ {
		pieces += int(d.tn[i]) + len(d.span[i])
	}
	// The lookahead lies in the deframer's spare room, which its Write
	// reuses: keep it aside first.
	var save [directLookahead]byte
	saved := copy(save[:], tail[:max(0, n-pieces)])
	df := &p.df
	_, _ = df.Write(hb)
	for i := j; i < np && n > 0; i++ {
		if i > j {
			t := d.tb[i][:d.tn[i]]
			k := min(n, len(t))
			_, _ = df.Write(t[:k])
			n -= k
		}
		k := min(n, len(d.span[i]))
		_, _ = df.Write(d.span[i][:k])
		n -= k
	}
	_, _ = df.Write(save[:saved])
}
