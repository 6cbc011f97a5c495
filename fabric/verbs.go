package fabric

import (
	"context"
	"net/netip"
	"strconv"
)

// Access says what a memory region may be used for, as ibv_access_flags.
type Access uint32

// Access flags.
const (
	AccessLocalWrite  Access = 1 << 0
	AccessRemoteWrite Access = 1 << 1
	AccessRemoteRead  Access = 1 << 2
)

// MR is a registered memory region: a Go byte slice the data path may read
// and write, with the keys peers and work requests name it by.
type MR interface {
	// Bytes returns the registered memory.
	Bytes() []byte
	// LKey names the region in local work requests.
	LKey() uint32
	// RKey names the region in a peer's RDMA Read or Write.
	RKey() uint32
	// Addr is the address of Bytes()[0] as peers see it (the tagged offset
	// base on iWARP).
	Addr() uint64
	// Access returns the region's access flags.
	Access() Access
}

// PD is a protection domain, as struct ibv_pd: memory regions registered
// in it serve the QPs of the same domain, and outlive any one of them.
type PD interface {
	// RegMR registers buf, as ibv_reg_mr.
	RegMR(buf []byte, access Access) (MR, error)
	// DeregMR releases a region, as ibv_dereg_mr; work requests still
	// using it fail. Once it returns no peer reads or writes the region.
	DeregMR(mr MR) error
}

// PDEndpoint is implemented by endpoints of fabrics with a data path: the
// protection domain of the id, once it is bound to a device (EINVAL
// before).
type PDEndpoint interface {
	PD() (PD, error)
}

// WROpcode is the operation of a send work request.
type WROpcode uint8

// Send work request opcodes.
const (
	WRSend WROpcode = iota
	WRWrite
	WRRead
	// WRSendWithInv is a Send that also invalidates the peer's region
	// InvalidateRKey once the message is placed (iWARP Send with
	// Invalidate, IBV_WR_SEND_WITH_INV).
	WRSendWithInv
	// WRSendWithImm is a Send carrying ImmData (IBV_WR_SEND_WITH_IMM),
	// and WRWriteWithImm an RDMA Write that also consumes a receive at the
	// peer to deliver ImmData (IBV_WR_RDMA_WRITE_WITH_IMM). Fabrics and
	// devices without immediate data (iWARP) refuse them with EINVAL.
	WRSendWithImm
	WRWriteWithImm
)

var wrOpcodeNames = [...]string{WRSend: "IBV_WR_SEND", WRWrite: "IBV_WR_RDMA_WRITE", WRRead: "IBV_WR_RDMA_READ",
	WRSendWithInv: "IBV_WR_SEND_WITH_INV", WRSendWithImm: "IBV_WR_SEND_WITH_IMM", WRWriteWithImm: "IBV_WR_RDMA_WRITE_WITH_IMM"}

// String returns the name of the ibv_wr_opcode the operation is.
func (o WROpcode) String() string {
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return "IBV_WR_OPCODE(" + strconv.Itoa(int(o)) + ")"
}

// SendFlags modify a send work request, as ibv_send_flags.
type SendFlags uint32

// Send flags.
const (
	// SendSignaled asks for a completion (always given when the QP has
	// SigAll).
	SendSignaled SendFlags = 1 << 1
	// SendSolicited sets the solicited event bit (Send with SE).
	SendSolicited SendFlags = 1 << 2
	// SendInline copies the data at post time, so the buffer can be reused
	// at once.
	SendInline SendFlags = 1 << 3
)

// SendWR is a send-queue work request.
type SendWR struct {
	// WRID is returned in the completion.
	WRID   uint64
	Opcode WROpcode
	Flags  SendFlags
	// Buf is the local data (within MR, unless SendInline).
	Buf []byte
	MR  MR
	// RemoteAddr and RKey name the peer's memory for WRWrite and WRRead.
	RemoteAddr uint64
	RKey       uint32
	// InvalidateRKey is the peer's region a WRSendWithInv invalidates.
	InvalidateRKey uint32
	// ImmData is the immediate data of WRSendWithImm and WRWriteWithImm,
	// a host value (it travels big-endian, as imm_data in verbs).
	ImmData uint32
	// AH, RemoteQPN and RemoteQKey address a UD send.
	AH         *AHAttr
	RemoteQPN  uint32
	RemoteQKey uint32
}

// RecvWR is a receive-queue work request.
type RecvWR struct {
	WRID uint64
	// Buf receives the data (within MR). UD receives start with a 40-byte
	// GRH, as on RoCE.
	Buf []byte
	MR  MR
}

// WCStatus is the status of a work completion, as enum ibv_wc_status.
type WCStatus uint8

// Work completion statuses (the subset the fabrics report).
const (
	WCSuccess        WCStatus = 0
	WCLocLenErr      WCStatus = 1
	WCLocProtErr     WCStatus = 4
	WCWRFlushErr     WCStatus = 5
	WCRemInvReqErr   WCStatus = 9
	WCRemAccessErr   WCStatus = 10
	WCRemOpErr       WCStatus = 11
	WCRetryExcErr    WCStatus = 12
	WCRNRRetryExcErr WCStatus = 13
	WCGeneralErr     WCStatus = 21
)

var wcStatusNames = map[WCStatus]string{
	WCSuccess: "success", WCLocLenErr: "local length error", WCLocProtErr: "local protection error",
	WCWRFlushErr: "Work Request Flushed Error", WCRemAccessErr: "remote access error",
	WCRemInvReqErr: "remote invalid request error", WCRemOpErr: "remote operation error", WCRetryExcErr: "transport retry counter exceeded",
	WCRNRRetryExcErr: "RNR retry counter exceeded", WCGeneralErr: "general error",
}

// String returns the name ibv_wc_status_str gives.
func (s WCStatus) String() string {
	if n, ok := wcStatusNames[s]; ok {
		return n
	}
	return "unknown"
}

// WCOpcode is the operation a completion reports, as enum ibv_wc_opcode.
type WCOpcode uint8

// Work completion opcodes.
const (
	WCSend      WCOpcode = 0
	WCRDMAWrite WCOpcode = 1
	WCRDMARead  WCOpcode = 2
	WCRecv      WCOpcode = 128
	// WCRecvRDMAWithImm completes a receive consumed by the peer's
	// WRWriteWithImm.
	WCRecvRDMAWithImm WCOpcode = 129
)

// String returns the name of the ibv_wc_opcode the opcode is, as the
// ibv_wc_opcode_str helpers of verbs programs print it ("IBV_WC_RECV").
func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "IBV_WC_SEND"
	case WCRDMAWrite:
		return "IBV_WC_RDMA_WRITE"
	case WCRDMARead:
		return "IBV_WC_RDMA_READ"
	case WCRecv:
		return "IBV_WC_RECV"
	case WCRecvRDMAWithImm:
		return "IBV_WC_RECV_RDMA_WITH_IMM"
	}
	return "IBV_WC_OPCODE(" + strconv.Itoa(int(o)) + ")"
}

// WC is a work completion, as struct ibv_wc.
type WC struct {
	WRID    uint64
	Status  WCStatus
	Opcode  WCOpcode
	ByteLen uint32
	QPNum   uint32
	// SrcQP and Src identify the sender of a UD receive.
	SrcQP uint32
	Src   netip.AddrPort
	// GRH says a UD receive starts with a 40-byte GRH.
	GRH bool
	// Solicited says the peer set the solicited event bit.
	Solicited bool
	// Invalidated says the peer's Send with Invalidate invalidated the
	// local region InvalidatedRKey (IBV_WC_WITH_INV): it no longer serves
	// remote or local access.
	Invalidated     bool
	InvalidatedRKey uint32
	// WithImm says the peer sent immediate data, ImmData (a host value).
	WithImm bool
	ImmData uint32
}

// CQ is a completion queue with its completion channel: Fd is readable while
// completions are queued, so a reactor can multiplex it.
type CQ interface {
	// Fd is readable while the queue holds completions. Once the queue is
	// destroyed (with its QP) Fd returns -1, and the descriptor it returned
	// before is made readable before it is closed, so that a poller holding
	// a duplicate of it (a reactor does) wakes, sees Fd() < 0 and lets it go.
	// A queue that cannot make its descriptor readable on close implements
	// OnClose(f func()) (stop func() bool) instead: it calls every f still
	// registered (stop unregisters one and reports whether it was) after Fd
	// returns -1 and before the descriptor is closed.
	Fd() int
	// Poll moves up to len(wcs) completions into wcs, oldest first.
	Poll(wcs []WC) int
	// Wait blocks until a completion is queued or ctx ends.
	Wait(ctx context.Context) error
}

// QPCap sizes a queue pair, as struct ibv_qp_cap. Zero fields take the
// fabric's defaults; on the soft fabric MaxSendWR and MaxRecvWR default to
// 256 and may be at most 32768 (EINVAL above), and MaxInlineData is at
// least 256 and at most 65536.
type QPCap struct {
	MaxSendWR, MaxRecvWR   int
	MaxSendSGE, MaxRecvSGE int
	MaxInlineData          int
}

// QPInitAttr describes a queue pair, as struct ibv_qp_init_attr.
type QPInitAttr struct {
	Cap QPCap
	// SigAll makes every send work request signaled.
	SigAll bool
	// SendCQ and RecvCQ, as ibv_qp_init_attr's send_cq and recv_cq, are
	// completion queues the caller made (CQCreator.CreateCQ, on an
	// endpoint of the same fabric and device) for the QP's send and
	// receive completions, which other QPs may share; the QP's
	// completions carry its number (WC.QPNum). A nil one is the QP's own
	// queue, made with it and destroyed with it. A queue from another
	// fabric or device is EINVAL.
	SendCQ, RecvCQ SharedCQ
}

// CQCreator is implemented by endpoints of fabrics whose completion queues
// can be made apart from any QP and shared among QPs, as ibv_create_cq on
// the id's device.
type CQCreator interface {
	// CreateCQ makes a completion queue of at least depth entries (at
	// least 1) on the endpoint's device.
	CreateCQ(depth int) (SharedCQ, error)
}

// SharedCQ is a completion queue made apart from any QP (CQCreator), for
// QPs to use as their send or receive queue (QPInitAttr.SendCQ, RecvCQ).
// It outlives them: the completions a QP queued stay in it after the QP
// is destroyed, and none is queued for the QP once its Destroy returns.
type SharedCQ interface {
	CQ
	// Destroy releases the queue, as ibv_destroy_cq: EBUSY while a QP
	// uses it, EINVAL once destroyed. Its Fd then follows CQ's rule for a
	// destroyed queue.
	Destroy() error
}

// QP is a queue pair bound to an id: the data path after connection set-up.
// PostSend and PostRecv must copy what they need from the work request
// before returning: the caller reuses it (ID's Post methods recycle theirs,
// so posting allocates nothing).
type QP interface {
	// Num is the QP number.
	Num() uint32
	// RegMR registers buf in the QP's protection domain (the id's, where
	// the fabric has one: the region outlives the QP).
	RegMR(buf []byte, access Access) (MR, error)
	// DeregMR releases a region; work requests still using it fail.
	DeregMR(mr MR) error
	// PostSend queues a send work request. Before the QP can send (RTS:
	// on the passive side once Accept returns, on the active side once
	// the connection is established) it is EINVAL, as with verbs.
	PostSend(wr *SendWR) error
	// PostRecv queues a receive work request.
	PostRecv(wr *RecvWR) error
	// SendCQ and RecvCQ are the QP's completion queues.
	SendCQ() CQ
	RecvCQ() CQ
	// Destroy flushes outstanding work requests and releases the QP.
	Destroy() error
}

// SendListPoster is implemented by queue pairs that post a list of send
// work requests at once, as ibv_post_send posts a chained list: the
// requests are taken in order, each validated as PostSend validates it,
// and queued in one go, so that a fabric may put them on the wire
// together (the software fabric writes the FPDUs of a list with one
// system call when the connection is idle). It returns how many requests
// were posted: all of them, or, with the error of the first request that
// could not be posted (malformed: EINVAL; no room left in the send queue:
// ENOMEM), the index of that request, as ibv_post_send's bad_wr. The
// requests before it stay posted and complete as usual; the ones from it
// on are not posted. A QP not in RTS refuses the first request (EINVAL),
// so nothing is posted. The work requests are copied before it returns.
// Fabrics need not implement it: PostSendList falls back to PostSend.
type SendListPoster interface {
	PostSendList(wrs []SendWR) (int, error)
}

// PostSendList posts wrs on qp in order, as one ibv_post_send of a
// chained list: with qp's own PostSendList where it implements
// SendListPoster, else with one PostSend per request, stopping at the
// first that fails. Either way it returns how many were posted, and with
// an error the index of the request that failed (see SendListPoster).
func PostSendList(qp QP, wrs []SendWR) (int, error) {
	if lp, ok := qp.(SendListPoster); ok {
		return lp.PostSendList(wrs)
	}
	for k := range wrs {
		if err := qp.PostSend(&wrs[k]); err != nil {
			return k, err
		}
	}
	return len(wrs), nil
}

// InProcessCompleter is implemented by fabrics that say where their work
// completions are made. A fabric whose completions are made by goroutines
// of this process (the software fabric) reports true: the goroutine that
// queues a completion wakes a CQ.Wait at once, so a caller waiting for a
// completion should block in Wait rather than spin on Poll first (a
// spinning caller keeps the Go scheduler busy and delays the very
// goroutine that would make the completion), and a consumer may poll the
// queues itself instead of registering them with a reactor. A fabric that
// does not implement it, or reports false, is taken to make them outside
// the process (a device, the kernel: the kernel fabric), where spinning
// before blocking pays. A fabric that reports true has also read a send
// request's bytes by the time it completes that request or any later
// one on the queue, so an unsignaled request's buffer is free once a
// later one completes; elsewhere (siw sends an unsignaled request of a
// page or more by reference, read while TCP holds it) only the request's
// own completion frees it.
type InProcessCompleter interface {
	CompletesInProcess() bool
}

// CompletesInProcess reports whether fabric f declares that its
// completions are made by goroutines of this process (InProcessCompleter).
func CompletesInProcess(f Fabric) bool {
	c, ok := f.(InProcessCompleter)
	return ok && c.CompletesInProcess()
}

// QPCreator is implemented by endpoints of fabrics with a data path.
type QPCreator interface {
	// CreateQP creates the endpoint's queue pair.
	CreateQP(attr *QPInitAttr) (QP, error)
}

// GRHLen is the size of the Global Route Header a UD receive buffer starts
// with.
const GRHLen = 40

// AsyncEvent is a verbs asynchronous event type (enum ibv_event_type), the
// argument of Endpoint.Notify (rdma_notify).
type AsyncEvent uint32

// AsyncCommEst is IBV_EVENT_COMM_EST: the QP received its first message
// before the CM saw the connection established.
const AsyncCommEst AsyncEvent = 4
