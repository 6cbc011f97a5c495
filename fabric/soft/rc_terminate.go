package soft

// Terminate messages (RFC 5040 section 7): the ones the data path sends for
// protocol and protection errors, and what one from the peer ends.

import (
	"encoding/binary"
	"errors"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// Terminate codes used below.
var (
	termUTNoBuf     = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeUntaggedBuf, ECode: iwarp.DDPECodeUTInvalidMSNNoBuf}
	termUTMSNRange  = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeUntaggedBuf, ECode: iwarp.DDPECodeUTInvalidMSNRange}
	termUTMO        = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeUntaggedBuf, ECode: iwarp.DDPECodeUTInvalidMO}
	termTSTag       = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeTaggedBuf, ECode: iwarp.DDPECodeTInvalidSTag}
	termTBounds     = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeTaggedBuf, ECode: iwarp.DDPECodeTBaseBounds}
	termDDPCatastro = iwarp.Terminate{Layer: iwarp.LayerDDP, EType: iwarp.DDPETypeCatastrophic, ECode: iwarp.DDPECodeCatastrophic}
	termIRD         = iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeRemoteOperation, ECode: iwarp.RDMAPECodeCatastrophicStream}
	// termCannotInvalidate answers a Send with Invalidate naming no region
	// of this side that grants remote access.
	termCannotInvalidate = iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeRemoteOperation, ECode: iwarp.RDMAPECodeCannotInvalidate}
	// termLocal ends the stream for a local reason: a message cut short by
	// its region's deregistration, or the QP destroyed with work in flight.
	termLocal = iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeCatastrophic, ECode: iwarp.RDMAPECodeUnspecified}
)

func termProt(code uint8) iwarp.Terminate {
	return iwarp.Terminate{Layer: iwarp.LayerRDMAP, EType: iwarp.RDMAPETypeRemoteProtection, ECode: code}
}

// Errors behind the Terminates the data path sends, for the debug log.
var (
	errNoRecv           = errors.New("send with no posted receive")
	errRecvTooSmall     = errors.New("send larger than the posted receive")
	errMSN              = errors.New("unexpected MSN")
	errMO               = errors.New("unexpected message offset")
	errSTag             = errors.New("invalid STag or no access")
	errBounds           = errors.New("tagged offset out of bounds")
	errRegionGone       = errors.New("local region deregistered")
	errIRD              = errors.New("more RDMA Reads than the negotiated IRD")
	errNoRead           = errors.New("Read Response with no Read outstanding")
	errInterleaved      = errors.New("messages of one kind interleaved")
	errNotLast          = errors.New("multi-segment Read Request")
	errCannotInvalidate = errors.New("Send with Invalidate names no remotely accessible region")
	errQPDestroyed      = errors.New("QP destroyed with work in flight")
)

// termStatus is the completion status a Terminate from the peer gives the
// Read it answers.
func termStatus(t *iwarp.Terminate) fabric.WCStatus {
	switch {
	case t.Layer == iwarp.LayerRDMAP && t.EType == iwarp.RDMAPETypeRemoteProtection,
		t.Layer == iwarp.LayerDDP && t.EType == iwarp.DDPETypeTaggedBuf:
		return fabric.WCRemAccessErr
	case t.Layer == iwarp.LayerRDMAP && t.EType == iwarp.RDMAPETypeRemoteOperation,
		t.Layer == iwarp.LayerDDP && t.EType == iwarp.DDPETypeUntaggedBuf:
		return fabric.WCRemOpErr
	}
	return fabric.WCGeneralErr
}

// rxTerminate handles the peer's Terminate: the oldest Read in flight gets
// the matching error status (unless the Terminate names another message),
// everything else is flushed, and the connection closes.
func (p *rcPath) rxTerminate(h *iwarp.Header, attached []byte) {
	t := h.Term
	st := fabric.WCWRFlushErr
	if len(attached) < iwarp.LengthFieldLen+iwarp.ControlLen ||
		iwarp.Opcode(attached[3]&0x0f) == iwarp.OpReadRequest {
		st = termStatus(&t)
	}
	p.c.fab().log.Debug().Int("fd", p.c.fd).Str("layer", t.Layer.String()).Uint8("etype", t.EType).
		Uint8("ecode", t.ECode).Msg("Terminate from the peer, closing")
	p.abort(nil, st)
	p.c.closeNow()
}

// terminate sends a Terminate for a protocol or protection error in u (nil
// when there is no ULPDU) and closes the connection.
func (p *rcPath) terminate(t iwarp.Terminate, u []byte, why error) { p.terminateAt(t, u, len(u), why) }

// terminateAt is terminate for a ULPDU of ulen bytes of which u holds the
// start (its header at least): an FPDU placed directly is judged on its
// header, before the rest is in. The Terminate's copy of the header
// carries ulen, the length the peer sent.
func (p *rcPath) terminateAt(t iwarp.Terminate, u []byte, ulen int, why error) {
	var att []byte
	if len(u) >= iwarp.ControlLen {
		if hl := iwarp.Opcode(u[1] & 0x0f).HeaderLen(); hl > 0 && len(u) >= hl {
			// A copy of the offending header, from its MPA length field.
			att = binary.BigEndian.AppendUint16(make([]byte, 0, 2+hl), uint16(ulen))
			att = append(att, u[:hl]...)
			t.M = true
			t.D = t.Layer == iwarp.LayerDDP
			t.R = t.Layer == iwarp.LayerRDMAP
		}
	}
	p.c.fab().log.Debug().Err(why).Int("fd", p.c.fd).Str("layer", t.Layer.String()).Uint8("etype", t.EType).
		Uint8("ecode", t.ECode).Msg("protocol error, sending Terminate and closing")
	// Keep the FPDU being written whole, drop those not started.
	end := 0
	for end < p.txOff {
		end += iwarp.FPDULen(int(binary.BigEndian.Uint16(p.tx[end:])))
	}
	p.tx = p.tx[:end]
	h := iwarp.Header{Op: iwarp.OpTerminate, Last: true, MSN: p.txMSN[iwarp.QNTerminate], Term: t}
	p.txMSN[iwarp.QNTerminate]++
	var scratch [iwarp.ReadRequestLen + iwarp.LengthFieldLen]byte // on the stack: the header is copied into tx
	hdr, _ := iwarp.AppendHeader(scratch[:0], &h)
	p.tx, _ = iwarp.AppendFPDU(p.tx, hdr, att, p.crc)
	out := p.tx[p.txOff:]
	p.abort(why, fabric.WCWRFlushErr)
	c := p.c
	if c.state == csRTS {
		c.write(out)
		c.finishClose()
	}
}
