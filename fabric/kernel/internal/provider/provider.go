// Package provider defines what a user-space verbs provider implements for
// the kernel fabric: the device-specific half of libibverbs (rdma-core's
// providers/*). The generic half, the write(2) commands every device
// shares, is package uverbs; a provider adds the driver's bytes to those
// commands and owns the queues the driver shares with user space:
//
//   - the driver request and response bytes of GET_CONTEXT, CREATE_CQ,
//     CREATE_QP, REG_MR and CREATE_AH (Driver's *DriverOut methods and
//     RegMRDriver);
//   - a completion queue over the memory the kernel maps for it (CQ):
//     Poll reads completions there with no system call, and Arm asks for a
//     completion-channel notification, either in that memory (siw) or by
//     telling the caller to write REQ_NOTIFY_CQ (rxe);
//   - a queue pair's send and receive queues over their mappings (QP):
//     PostSend writes a work queue entry and says whether the caller must
//     ring the doorbell (a POST_SEND without work requests, as rxe and siw
//     use); PostRecv writes a receive entry, which needs no doorbell on
//     these drivers.
//
// Providers know nothing of ids or of the fabric's locking: every method
// of a CQ or QP is called with the owner's lock for that queue held. See
// fabric/kernel/PROVIDERS.md for how to add one (mlx5, ...).
package provider

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// WC is a work completion in the kernel's ib_uverbs_wc form, whatever the
// driver's own completion format: providers translate theirs.
type WC = uverbs.WC

// Work request opcodes (enum ib_uverbs_wr_opcode, the ibv_wr_opcode values).
const (
	OpRDMAWrite        = 0
	OpRDMAWriteWithImm = 1
	OpSend             = 2
	OpSendWithImm      = 3
	OpRDMARead         = 4
	OpSendWithInv      = 9
)

// Send flags (enum ibv_send_flags, the kernel's ib_send_flags).
const (
	SendFence     = 1 << 0
	SendSignaled  = 1 << 1
	SendSolicited = 1 << 2
	SendInline    = 1 << 3
)

// Work completion statuses (enum ibv_wc_status) the providers produce.
const (
	StatusSuccess      = 0
	StatusLocLenErr    = 1
	StatusLocQPOpErr   = 2
	StatusLocProtErr   = 4
	StatusWRFlushErr   = 5
	StatusBadRespErr   = 7
	StatusLocAccessErr = 8
	StatusRemInvReqErr = 9
	StatusRemAccessErr = 10
	StatusRemOpErr     = 11
	StatusGeneralErr   = 21
)

// SGE is one scatter/gather element (struct ibv_sge).
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send work request with at most one scatter/gather element,
// or inline bytes.
type SendWR struct {
	WRID   uint64
	Opcode uint32 // Op*
	Flags  uint32 // Send*
	// SGE is the local buffer; NumSGE 0 sends nothing (a zero-length
	// message). With SendInline, Inline holds the bytes instead and SGE
	// is ignored.
	SGE    SGE
	NumSGE int
	Inline []byte
	// RemoteAddr and RKey name the peer's memory of RDMA Write and Read.
	RemoteAddr uint64
	RKey       uint32
	// Ex is the immediate data (big-endian bytes as a host u32) of the
	// *WithImm opcodes, or the rkey OpSendWithInv invalidates.
	Ex uint32
	// AHNum, RemoteQPN and RemoteQKey address a UD send (AHNum is the
	// driver's number for the address handle).
	AHNum      uint32
	RemoteQPN  uint32
	RemoteQKey uint32
}

// RecvWR is a receive work request with at most one element.
type RecvWR struct {
	WRID   uint64
	SGE    SGE
	NumSGE int
}

// Mapper maps the queues a driver shares (uverbs.Context).
type Mapper interface {
	Mmap(offset uint64, length int) ([]byte, error)
	Munmap(b []byte) error
}

// QPInit is what a provider learns of a QP at creation.
type QPInit struct {
	Type   uint8 // uverbs.QPTypeRC or QPTypeUD
	SigAll bool
	// Resp is the core CREATE_QP response (the capacities the driver gave
	// the QP).
	Resp uverbs.CreateQPResp
}

// Driver is a provider for one kernel driver.
type Driver interface {
	// Name is the driver's name (rxe, siw).
	Name() string
	// ContextDriverOut is the driver response length of GET_CONTEXT.
	ContextDriverOut() int
	// CQDriverOut and QPDriverOut are the driver response lengths of
	// CREATE_CQ and CREATE_QP; AHDriverOut of CREATE_AH.
	CQDriverOut() int
	QPDriverOut() int
	AHDriverOut() int
	// RegMRDriver returns the driver request bytes of REG_MR (key is a
	// random byte a driver may fold into the keys) and the driver
	// response length.
	RegMRDriver(key byte) (in []byte, outLen int)
	// MaxInline clamps a requested inline size to what the driver takes
	// at QP creation (and picks its default for 0).
	MaxInline(requested int) int
	// UD reports whether the driver has UD QPs.
	UD() bool
	// NewCQ maps the completion queue CREATE_CQ made, from its driver
	// response.
	NewCQ(m Mapper, resp uverbs.CreateCQResp, driverResp []byte) (CQ, error)
	// NewQP maps the queues CREATE_QP made, from its driver response.
	NewQP(m Mapper, init QPInit, driverResp []byte) (QP, error)
	// AHNum returns the driver's number for an address handle from the
	// CREATE_AH driver response (what UD work requests name).
	AHNum(driverResp []byte) (uint32, error)
}

// CQ is a completion queue in shared memory.
type CQ interface {
	// Poll moves up to len(out) completions into out, oldest first, and
	// frees their slots. It makes no system call and does not allocate.
	Poll(out []WC) int
	// Empty reports whether no completion is ready.
	Empty() bool
	// Arm asks for a notification on the completion channel at the next
	// completion (or next solicited one). It reports whether the caller
	// must write REQ_NOTIFY_CQ for that; drivers that arm in shared memory
	// do it here and report false.
	Arm(solicitedOnly bool) (needCmd bool)
	// Depth is the number of completions the queue holds.
	Depth() int
	// Close unmaps the queue. The CQ must not be used afterwards.
	Close() error
}

// QP is the send and receive queues of a queue pair in shared memory.
type QP interface {
	// PostSend writes one send work request into the send queue. It
	// reports whether the caller must ring the doorbell (POST_SEND without
	// work requests) for the driver to see it. A full queue gives ENOMEM;
	// a request the driver cannot carry EINVAL. It makes no system call
	// and does not allocate.
	PostSend(wr *SendWR) (doorbell bool, err error)
	// PostRecv writes one receive work request; a full queue gives ENOMEM.
	PostRecv(wr *RecvWR) error
	// SendDepth and RecvDepth are the queue sizes.
	SendDepth() int
	RecvDepth() int
	// MaxInline is the largest inline send.
	MaxInline() int
	// Close unmaps the queues.
	Close() error
}

// Sentinel errors.
var (
	// ErrQueueFull: no free slot in a send or receive queue (ENOMEM, as
	// libibverbs reports it).
	ErrQueueFull = fmt.Errorf("provider: work queue full: %w", syscall.ENOMEM)
	// ErrBadWR: a work request the driver cannot carry (EINVAL).
	ErrBadWR = fmt.Errorf("provider: work request not supported by the driver: %w", syscall.EINVAL)
	// ErrBadResp: a driver response that does not describe a queue this
	// provider can use (EPROTO).
	ErrBadResp = fmt.Errorf("provider: unexpected driver response: %w", syscall.EPROTO)
)

// IsFull reports whether err is ErrQueueFull.
func IsFull(err error) bool { return errors.Is(err, ErrQueueFull) }
