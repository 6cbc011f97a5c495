// Package siw is the user-space provider of the kernel's soft-iWARP driver
// (drivers/infiniband/sw/siw; uapi siw-abi.h), what rdma-core's
// providers/siw does, in pure Go.
//
// siw shares its queues as plain arrays of fixed-size entries whose flags
// field passes ownership: an entry with SIW_WQE_VALID set belongs to the
// consumer, which clears the flags when done. Send queue entries are struct
// siw_sqe (120 bytes), receive entries struct siw_rqe (112), completions
// struct siw_cqe (32), each array mapped at the key CREATE_QP or CREATE_CQ
// returned. A completion queue is followed by struct siw_cq_ctrl, whose
// flags word user space sets to arm the completion channel (no system
// call); the kernel clears it when it notifies.
//
// A send is published by storing its flags (with VALID) last; POST_SEND
// without work requests starts the kernel's transmit processing, which is
// needed only when the queue was idle: siw keeps processing entries it
// finds valid. Receives need no doorbell. siw has RC QPs only, no
// immediate data, and inline data of at most 80 bytes, kept in the entry
// from sge[1] on.
package siw

import (
	"encoding/binary"
	"fmt"

	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

var ne = binary.NativeEndian

// Driver is the siw provider.
type Driver struct{}

var _ provider.Driver = Driver{}

// Sizes and limits of the driver structures.
const (
	sqeSize       = 120 // struct siw_sqe
	rqeSize       = 112 // struct siw_rqe
	cqeSize       = 32  // struct siw_cqe
	ctrlSize      = 8   // struct siw_cq_ctrl
	cqRespSize    = 16  // struct siw_uresp_create_cq
	qpRespSize    = 32  // struct siw_uresp_create_qp
	ctxRespSize   = 8   // struct siw_uresp_alloc_ctx
	regMRReqSize  = 8   // struct siw_ureq_reg_mr
	regMRRespSize = 8   // struct siw_uresp_reg_mr
	maxSGE        = 6   // SIW_MAX_SGE
	maxInline     = 80  // SIW_MAX_INLINE: sge[1..5]
	maxQueue      = 1 << 20
)

// WQE flags (enum siw_wqe_flags) and CQ notification flags.
const (
	flagValid     = 1 << 0
	flagInline    = 1 << 1
	flagSignalled = 1 << 2
	flagSolicited = 1 << 3
	flagReadFence = 1 << 4

	notifySolicited = 1 << 0
	notifyNext      = 1 << 1
)

// siw opcodes (enum siw_opcode).
const (
	opWrite       = 0
	opRead        = 1
	opReadLocInv  = 2
	opSend        = 3
	opSendImm     = 4
	opSendRemInv  = 5
	opFetchAdd    = 6
	opCompSwap    = 7
	opReceive     = 8
	numSIWOpcodes = 12
)

// Name implements provider.Driver.
func (Driver) Name() string { return "siw" }

// ContextDriverOut implements provider.Driver: struct siw_uresp_alloc_ctx.
func (Driver) ContextDriverOut() int { return ctxRespSize }

// CQDriverOut implements provider.Driver.
func (Driver) CQDriverOut() int { return cqRespSize }

// QPDriverOut implements provider.Driver.
func (Driver) QPDriverOut() int { return qpRespSize }

// AHDriverOut implements provider.Driver: siw has no address handles.
func (Driver) AHDriverOut() int { return 0 }

// RegMRDriver implements provider.Driver: struct siw_ureq_reg_mr carries
// the key byte siw puts in the low byte of the STag (the kernel picks the
// index above it at random).
func (Driver) RegMRDriver(key byte) ([]byte, int) {
	in := make([]byte, regMRReqSize)
	in[0] = key
	return in, regMRRespSize
}

// MaxInline implements provider.Driver.
func (Driver) MaxInline(n int) int {
	if n <= 0 || n > maxInline {
		return maxInline
	}
	return n
}

// UD implements provider.Driver.
func (Driver) UD() bool { return false }

// AHNum implements provider.Driver.
func (Driver) AHNum([]byte) (uint32, error) { return 0, provider.ErrBadWR }

// statusMap translates enum siw_wc_status to enum ibv_wc_status.
var statusMap = [...]uint32{
	provider.StatusSuccess,      // SIW_WC_SUCCESS
	provider.StatusLocLenErr,    // SIW_WC_LOC_LEN_ERR
	provider.StatusLocProtErr,   // SIW_WC_LOC_PROT_ERR
	provider.StatusLocQPOpErr,   // SIW_WC_LOC_QP_OP_ERR
	provider.StatusWRFlushErr,   // SIW_WC_WR_FLUSH_ERR
	provider.StatusBadRespErr,   // SIW_WC_BAD_RESP_ERR
	provider.StatusLocAccessErr, // SIW_WC_LOC_ACCESS_ERR
	provider.StatusRemAccessErr, // SIW_WC_REM_ACCESS_ERR
	provider.StatusRemInvReqErr, // SIW_WC_REM_INV_REQ_ERR
	provider.StatusGeneralErr,   // SIW_WC_GENERAL_ERR
}

// opcodeMap translates a siw opcode in a completion to enum ibv_wc_opcode;
// ok is false for opcodes that never complete to user space.
func opcodeMap(op uint8) (uint32, bool) {
	switch op {
	case opWrite:
		return uverbs.WCOpRDMAWrite, true
	case opRead, opReadLocInv:
		return uverbs.WCOpRDMARead, true
	case opSend, opSendImm, opSendRemInv:
		return uverbs.WCOpSend, true
	case opFetchAdd:
		return uverbs.WCOpFetchAdd, true
	case opCompSwap:
		return uverbs.WCOpCompSwap, true
	case opReceive:
		return uverbs.WCOpRecv, true
	}
	return 0, false
}

// CQE is a decoded struct siw_cqe: 0 id, 8 flags (u8), 9 opcode (u8), 10
// status (u16), 12 bytes, 16 imm_data / inval_stag, 24 qp_id.
type CQE struct {
	ID     uint64
	Flags  uint8
	Opcode uint8
	Status uint16
	Bytes  uint32
	Imm    uint64
	QPID   uint64
}

// DecodeCQE decodes a struct siw_cqe.
func DecodeCQE(b []byte, e *CQE) error {
	if len(b) < cqeSize {
		return provider.ErrBadResp
	}
	e.ID = ne.Uint64(b[0:])
	e.Flags = b[8]
	e.Opcode = b[9]
	e.Status = ne.Uint16(b[10:])
	e.Bytes = ne.Uint32(b[12:])
	e.Imm = ne.Uint64(b[16:])
	e.QPID = ne.Uint64(b[24:])
	return nil
}

// ToWC translates a completion to the ib_uverbs_wc form. An opcode or a
// status siw does not define becomes a general error (a driver never
// writes one; a fuzzer does).
func (e *CQE) ToWC(w *provider.WC) {
	*w = provider.WC{WRID: e.ID, ByteLen: e.Bytes, QPNum: uint32(e.QPID)}
	op, ok := opcodeMap(e.Opcode)
	w.Opcode = op
	switch {
	case !ok || int(e.Status) >= len(statusMap):
		w.Status = provider.StatusGeneralErr
	default:
		w.Status = statusMap[e.Status]
	}
}

func badResp(what string, args ...any) error {
	return fmt.Errorf("siw: "+what+": %w", append(args, provider.ErrBadResp)...)
}
