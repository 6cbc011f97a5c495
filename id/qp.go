package id

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
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
	WRSendWithInv: "IBV_WR_SEND_WITH_INV"}

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

// QPCreator is implemented by endpoints of fabrics with a data path.
type QPCreator interface {
	// CreateQP creates the endpoint's queue pair.
	CreateQP(attr *QPInitAttr) (QP, error)
}

// CreateQP creates the id's queue pair, as rdma_create_qp with its own
// completion queues, in the id's protection domain. The id must be bound
// to a device (by Bind to an address that is not a wildcard, ResolveAddr,
// or a connection request), as librdmacm needs id->verbs: EINVAL before,
// and for an id that has a QP already. Fabrics without a data path give
// ENOSYS. A nil attr (or zero fields) takes the fabric's defaults: on the
// soft fabric 256 send and 256 receive work requests and 256 bytes of
// inline data (see QPCap for the limits). Destroy destroys the QP too;
// DestroyQP destroys it alone, keeping the id's memory regions.
func (i *ID) CreateQP(attr *QPInitAttr) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.state == StateDestroyed || i.state == StateCanceled {
		return errorf("create_qp", syscall.EINVAL, "id %d is %s", i.uid, i.state)
	}
	if i.state == StateIdle {
		return errorf("create_qp", syscall.EINVAL, "id %d is not bound to a device", i.uid)
	}
	if i.qp != nil {
		return errorf("create_qp", syscall.EINVAL, "id %d has a QP", i.uid)
	}
	c, ok := i.ep.(QPCreator)
	if !ok {
		return errorf("create_qp", syscall.ENOSYS, "the %s fabric has no data path", i.fabric.Name())
	}
	if attr == nil {
		attr = &QPInitAttr{}
	}
	qp, err := c.CreateQP(attr)
	if err != nil {
		return wrap("create_qp", err)
	}
	i.qp = qp
	return nil
}

// QP returns the id's queue pair, or nil.
func (i *ID) QP() QP {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.qp
}

// DestroyQP destroys the id's queue pair, as rdma_destroy_qp. Memory
// regions stay registered in the id's protection domain and serve the next
// QP; once DestroyQP returns no peer reads or writes them through the
// destroyed QP (see the fabric for what happens to a connection with work
// in flight).
func (i *ID) DestroyQP() error {
	i.mu.Lock()
	qp := i.qp
	i.qp = nil
	i.mu.Unlock()
	if qp == nil {
		return errorf("destroy_qp", syscall.EINVAL, "id %d has no QP", i.uid)
	}
	return wrap("destroy_qp", qp.Destroy())
}

func (i *ID) needQP(op string) (QP, error) {
	if qp := i.QP(); qp != nil {
		return qp, nil
	}
	return nil, errorf(op, syscall.EINVAL, "id %d has no QP", i.uid)
}

// PD returns the id's protection domain, as id->pd: one per id, made when
// first asked for once the id is bound to a device (EINVAL before, and
// after Destroy; ENOSYS on fabrics without a data path). Its regions serve
// every QP the id has, and a peer reaches only the regions of the id its
// connection belongs to. librdmacm shares one PD per device among all ids;
// cmrt gives each id its own, so that one connection's peer can never name
// another connection's memory.
func (i *ID) PD() (PD, error) { return i.pd("pd") }

func (i *ID) pd(op string) (PD, error) {
	i.mu.Lock()
	ep, st := i.ep, i.state
	i.mu.Unlock()
	if st == StateDestroyed {
		return nil, errorf(op, syscall.EINVAL, "id %d is destroyed", i.uid)
	}
	pe, ok := ep.(PDEndpoint)
	if !ok {
		return nil, errorf(op, syscall.ENOSYS, "the %s fabric has no protection domains", i.fabric.Name())
	}
	pd, err := pe.PD()
	return pd, wrap(op, err)
}

// reg registers in the id's protection domain, or on the QP where the
// fabric has no protection domain of its own.
func (i *ID) reg(op string, buf []byte, a Access) (MR, error) {
	pd, err := i.pd(op)
	if errors.Is(err, syscall.ENOSYS) {
		qp, qerr := i.needQP(op)
		if qerr != nil {
			return nil, qerr
		}
		mr, err := qp.RegMR(buf, a)
		return mr, wrap(op, err)
	}
	if err != nil {
		return nil, err
	}
	mr, err := pd.RegMR(buf, a)
	return mr, wrap(op, err)
}

// RegMsgs registers buf for sends and receives, as rdma_reg_msgs, in the
// id's protection domain: it works before CreateQP once the id is bound to
// a device, and the region survives DestroyQP.
func (i *ID) RegMsgs(buf []byte) (MR, error) { return i.reg("reg_msgs", buf, AccessLocalWrite) }

// RegRead registers buf as the target of the peer's RDMA Reads, as
// rdma_reg_read.
func (i *ID) RegRead(buf []byte) (MR, error) {
	return i.reg("reg_read", buf, AccessLocalWrite|AccessRemoteRead)
}

// RegWrite registers buf as the target of the peer's RDMA Writes, as
// rdma_reg_write.
func (i *ID) RegWrite(buf []byte) (MR, error) {
	return i.reg("reg_write", buf, AccessLocalWrite|AccessRemoteWrite)
}

// DeregMR releases a region, as rdma_dereg_mr. Work requests still using
// it fail with WCLocProtErr; once it returns no peer reads or writes a byte
// of it (an RDMA Read or message it cuts short ends the connection).
func (i *ID) DeregMR(mr MR) error {
	pd, err := i.pd("dereg_mr")
	if errors.Is(err, syscall.ENOSYS) {
		qp, qerr := i.needQP("dereg_mr")
		if qerr != nil {
			return qerr
		}
		return wrap("dereg_mr", qp.DeregMR(mr))
	}
	if err != nil {
		return err
	}
	return wrap("dereg_mr", pd.DeregMR(mr))
}

// Work requests handed to a QP are recycled: QP implementations copy them.
var (
	sendWRs = sync.Pool{New: func() any { return new(SendWR) }}
	recvWRs = sync.Pool{New: func() any { return new(RecvWR) }}
)

// PostRecv posts a receive of buf (within mr), as rdma_post_recv.
func (i *ID) PostRecv(wrID uint64, buf []byte, mr MR) error {
	qp, err := i.needQP("post_recv")
	if err != nil {
		return err
	}
	wr := recvWRs.Get().(*RecvWR)
	*wr = RecvWR{WRID: wrID, Buf: buf, MR: mr}
	err = qp.PostRecv(wr)
	*wr = RecvWR{}
	recvWRs.Put(wr)
	return wrap("post_recv", err)
}

// PostSend posts a Send of buf, as rdma_post_send.
func (i *ID) PostSend(wrID uint64, buf []byte, mr MR, flags SendFlags) error {
	return i.post("post_send", SendWR{WRID: wrID, Opcode: WRSend, Flags: flags, Buf: buf, MR: mr})
}

// PostSendWithInv posts a Send of buf that also invalidates the peer's
// region rkey once the message is placed there (iWARP Send with
// Invalidate). The peer's receive completion reports the invalidation.
func (i *ID) PostSendWithInv(wrID uint64, buf []byte, mr MR, flags SendFlags, rkey uint32) error {
	return i.post("post_send", SendWR{WRID: wrID, Opcode: WRSendWithInv, Flags: flags, Buf: buf, MR: mr,
		InvalidateRKey: rkey})
}

// PostUDSend posts a datagram to the peer ah/qpn with the UD Q_Key, as
// rdma_post_ud_send.
func (i *ID) PostUDSend(wrID uint64, buf []byte, mr MR, flags SendFlags, ah *AHAttr, remoteQPN uint32) error {
	return i.post("post_ud_send", SendWR{WRID: wrID, Opcode: WRSend, Flags: flags, Buf: buf, MR: mr,
		AH: ah, RemoteQPN: remoteQPN, RemoteQKey: UDPQKey})
}

// PostWrite posts an RDMA Write of buf to the peer's remoteAddr/rkey, as
// rdma_post_write. On iWARP (the soft fabric) the Write completes once its
// bytes are handed to the transport, before the peer has placed them: a
// completion does not mean the remote memory holds them. To tell the peer
// the data is there, follow the Write with a Send (they are placed in
// order), or Read back from the peer.
func (i *ID) PostWrite(wrID uint64, buf []byte, mr MR, flags SendFlags, remoteAddr uint64, rkey uint32) error {
	return i.post("post_write", SendWR{WRID: wrID, Opcode: WRWrite, Flags: flags, Buf: buf, MR: mr,
		RemoteAddr: remoteAddr, RKey: rkey})
}

// PostRead posts an RDMA Read from the peer's remoteAddr/rkey into buf, as
// rdma_post_read.
func (i *ID) PostRead(wrID uint64, buf []byte, mr MR, flags SendFlags, remoteAddr uint64, rkey uint32) error {
	return i.post("post_read", SendWR{WRID: wrID, Opcode: WRRead, Flags: flags, Buf: buf, MR: mr,
		RemoteAddr: remoteAddr, RKey: rkey})
}

func (i *ID) post(op string, w SendWR) error {
	qp, err := i.needQP(op)
	if err != nil {
		return err
	}
	wr := sendWRs.Get().(*SendWR)
	*wr = w
	err = qp.PostSend(wr)
	*wr = SendWR{}
	sendWRs.Put(wr)
	return wrap(op, err)
}

// GetSendComp waits for the next send completion, as rdma_get_send_comp.
// On error there is no completion: the WC returned then has Status
// WCGeneralErr (never WCSuccess) and no other field set.
func (i *ID) GetSendComp(ctx context.Context) (WC, error) {
	return i.comp(ctx, "get_send_comp", func(qp QP) CQ { return qp.SendCQ() })
}

// GetRecvComp waits for the next receive completion, as rdma_get_recv_comp.
// On error the WC returned has Status WCGeneralErr, as for GetSendComp.
func (i *ID) GetRecvComp(ctx context.Context) (WC, error) {
	return i.comp(ctx, "get_recv_comp", func(qp QP) CQ { return qp.RecvCQ() })
}

func (i *ID) comp(ctx context.Context, op string, which func(QP) CQ) (WC, error) {
	qp, err := i.needQP(op)
	if err != nil {
		return noWC, err
	}
	cq := which(qp)
	wc := wcScratch.Get().(*[1]WC) // a local array would escape through cq.Poll
	defer wcScratch.Put(wc)
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return noWC, wrap(op, err)
		}
	}
}

var wcScratch = sync.Pool{New: func() any { return new([1]WC) }}

// noWC is what the completion calls return with an error: a WC that does
// not read as a successful completion.
var noWC = WC{Status: WCGeneralErr}

// AHFromWC builds the address handle that reaches the sender of a UD
// receive completion, as ibv_init_ah_from_wc: a reply sent with it (and
// wc.SrcQP as the remote QP number) goes back to the sender. grh is the
// start of the receive buffer, holding the GRH (nil when not at hand): its
// traffic class and flow label are copied, as verbs copies them. The hop
// limit is 255, as in verbs. EINVAL when wc is not a successful receive
// naming its sender.
func AHFromWC(wc *WC, grh []byte) (AHAttr, error) {
	if wc == nil || wc.Status != WCSuccess || wc.Opcode != WCRecv || !wc.Src.IsValid() {
		return AHAttr{}, errorf("init_ah_from_wc", syscall.EINVAL, "not a successful UD receive with a source")
	}
	ah := AHAttr{DGID: wc.Src.Addr().Unmap().As16(), DLID: wc.Src.Port(), IsGlobal: 1, HopLimit: 0xFF, PortNum: 1}
	if wc.GRH && len(grh) >= GRHLen {
		if wc.Src.Addr().Unmap().Is4() {
			// RoCEv2 over IPv4: 20 bytes of zeros, then the IPv4 header.
			ah.TrafficClass = grh[21]
		} else {
			vtf := uint32(grh[0])<<24 | uint32(grh[1])<<16 | uint32(grh[2])<<8 | uint32(grh[3])
			ah.TrafficClass, ah.FlowLabel = uint8(vtf>>20), vtf&0xFFFFF
		}
	}
	return ah, nil
}

// GRHLen is the size of the Global Route Header a UD receive buffer starts
// with.
const GRHLen = 40
