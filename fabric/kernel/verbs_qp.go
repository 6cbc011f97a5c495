package kernel

// The data path (verbs_*.go). Each id's QP gets its own protection domain,
// its own two completion queues with their completion channels (as
// rdma_create_qp makes them) and the driver's queues mapped into the
// process. The QP moves as librdmacm moves it, with the attributes the CM
// computes (INIT_QP_ATTR): to INIT at creation (UD QPs on to RTR and RTS);
// a passive RC QP to RTR and RTS before ACCEPT; an active one on
// CONNECT_RESPONSE, before the RTU, the event then reported as ESTABLISHED.
// On iWARP the kernel's CM moves the QP to RTS itself, and the fabric
// learns it from ESTABLISHED. After the connection ends (DISCONNECTED,
// REJECTED, UNREACHABLE, CONNECT_ERROR, a local Disconnect, a fatal async
// event) the QP goes to the error state: the driver flushes what it holds
// (WCWRFlushErr completions) and later work requests complete at once the
// same way, as on the software fabric. Sends posted before RTS wait in the
// send queue; the doorbell is rung when the QP gets there.

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"runtime"
	"sync"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/ucma"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// Queue sizes.
const (
	defaultQueueDepth = 256     // MaxSendWR / MaxRecvWR of 0, as the software fabric
	maxQueueDepth     = 1 << 15 // above: EINVAL
)

// qpState is where a QP is, as far as posting is concerned.
type qpState uint8

const (
	qpInit qpState = iota // sends wait for RTS; receives are taken
	qpRTS                 // sends go out
	qpErr                 // the connection is gone: work requests flush
)

// vqp is a queue pair of the kernel fabric.
type vqp struct {
	ep       *endpoint
	vd       *verbsDev
	uhandle  uint64
	handle   uint32
	num      uint32
	pd       uint32
	ud       bool
	port     uint8
	sigAll   bool
	scq, rcq *vcq
	local    netip.Addr // the id's address (UD address handles)
	sgid     uint8      // its RoCE v2 GID index
	sgidOK   bool
	maxMsg   int

	db     [uverbs.PostSendSize]byte // the doorbell: POST_SEND without work requests
	dbResp [4]byte                   // its response
	pin    runtime.Pinner            // keeps dbResp in place for the kernel

	sqMu      sync.Mutex
	prov      provider.QP // send side under sqMu, receive side under rqMu
	state     qpState     // written under sqMu and rqMu
	inErr     bool        // a MODIFY_QP to ERR succeeded (under sqMu and rqMu)
	pendingDB bool
	destroyed bool
	bells     sync.WaitGroup // doorbells being rung (added to under sqMu while not destroyed)
	swr       provider.SendWR
	ahs       map[fabric.AHAttr]udAH

	rqMu  sync.Mutex
	rwr   provider.RecvWR
	rbufs [][]byte // UD: buffers of posted receives, oldest at rhead
	rhead int
	rlen  int

	mrMu sync.Mutex
	mrs  map[*vmr]struct{} // nil once destroyed
}

var _ fabric.QP = (*vqp)(nil)

func queueDepth(n int) (int, error) {
	switch {
	case n == 0:
		return defaultQueueDepth, nil
	case n < 0 || n > maxQueueDepth:
		return 0, einval("queue depth %d out of range 1..%d", n, maxQueueDepth)
	}
	return n, nil
}

// CreateQP implements fabric.QPCreator: the id must be bound to a device (by
// Bind to a device's address, address resolution, or a connection
// request). Devices without a provider give EOPNOTSUPP naming the one they
// would need.
func (ep *endpoint) CreateQP(attr *fabric.QPInitAttr) (fabric.QP, error) {
	sd, err := queueDepth(attr.Cap.MaxSendWR)
	if err != nil {
		return nil, err
	}
	rd, err := queueDepth(attr.Cap.MaxRecvWR)
	if err != nil {
		return nil, err
	}
	if attr.Cap.MaxInlineData < 0 {
		return nil, einval("inline size %d", attr.Cap.MaxInlineData)
	}
	d, port, err := ep.boundDevice("create_qp", func() error {
		if ep.vqp != nil {
			return einval("id has a QP")
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var local netip.Addr
	if ep.qp == fabric.UD {
		r, err := ep.Query()
		if err != nil {
			return nil, err
		}
		local = r.Src.Addr()
	}
	vd, err := ep.f.acquireVerbs(d)
	if err != nil {
		return nil, err
	}
	if ep.qp == fabric.UD && !vd.drv.UD() {
		vd.release()
		return nil, fmt.Errorf("kernel: create_qp: %s (%s) has no UD QPs: %w", d.Name, vd.drv.Name(), syscall.EOPNOTSUPP)
	}
	q := &vqp{ep: ep, vd: vd, ud: ep.qp == fabric.UD, port: max(port, 1), sigAll: attr.SigAll, local: local,
		mrs: make(map[*vmr]struct{})}
	if err := q.create(sd, rd, attr); err != nil {
		vd.release()
		return nil, err
	}
	err = ep.do("create_qp", func(_ *source, fd int, b *ucma.Buffers) error {
		if ep.vqp != nil {
			return einval("id has a QP")
		}
		if err := q.init(fd, b); err != nil {
			return err
		}
		ep.vqp = q
		return nil
	})
	if err != nil {
		_ = q.destroy()
		return nil, err
	}
	return q, nil
}

// boundDevice returns the device the id is bound to and its port, for op
// (create_qp, create_cq): EINVAL if the id is bound to none. check, if
// not nil, runs first, on the id's source.
func (ep *endpoint) boundDevice(op string, check func() error) (fabric.Device, uint8, error) {
	var guid uint64
	var index uint32
	var port uint8
	err := ep.do(op, func(_ *source, fd int, b *ucma.Buffers) error {
		if check != nil {
			if err := check(); err != nil {
				return err
			}
		}
		var err error
		guid, index, port, err = ep.queryDevice(fd, b)
		return err
	})
	if err != nil {
		return fabric.Device{}, 0, err
	}
	if guid == 0 {
		return fabric.Device{}, 0, einval("%s: id not bound to a device", op)
	}
	d, ok := ep.f.device(guid, index)
	if !ok {
		return fabric.Device{}, 0, fmt.Errorf("kernel: %s: device of GUID %016x not found: %w", op, guid, syscall.ENODEV)
	}
	return d, port, nil
}

// create makes the PD, the CQs and the QP, and maps the queues.
func (q *vqp) create(sd, rd int, attr *fabric.QPInitAttr) (err error) {
	vd := q.vd
	var undo []func()
	defer func() {
		if err != nil {
			for k := len(undo) - 1; k >= 0; k-- {
				undo[k]()
			}
		}
	}()
	resp, err := vd.ctx.Exec(&uverbs.AllocPD{})
	if err != nil {
		return fmt.Errorf("kernel: alloc_pd: %w", err)
	}
	q.pd, _ = uverbs.DecodeUint32Resp(resp)
	undo = append(undo, func() { _, _ = vd.ctx.Exec(uverbs.DeallocPD(q.pd)) })
	cqDepth := func(n int) int {
		n *= 2 // room for the flushes of a full queue on top of unpolled completions
		if m := int(vd.attr.MaxCQE); m > 0 && n > m {
			n = m
		}
		return n
	}
	if attr.RecvCQ != nil && q.ud {
		// A UD receive's completion is completed from its QP's receive
		// buffers (udRecvDone: the sender's address from the GRH, and
		// the QP's ring of posted buffers advanced), which a queue
		// shared by several QPs has no one of. Finding the QP by the
		// number each completion carries would not do: completions of a
		// destroyed QP stay in a shared queue, and the kernel may give
		// its number to the next QP, whose ring they would then advance
		// (rdma-core's mlx5 provider cleans a destroyed QP's entries
		// from its CQs; cmrt's rxe and siw providers do not).
		return fmt.Errorf("kernel: create_qp: a UD QP's receive completion queue must be its own: %w", syscall.EOPNOTSUPP)
	}
	if q.scq, err = vd.qpCQ(attr.SendCQ, cqDepth(sd)); err != nil {
		return err
	}
	undo = append(undo, q.scq.releaseQP)
	if q.rcq, err = vd.qpCQ(attr.RecvCQ, cqDepth(rd)); err != nil {
		return err
	}
	undo = append(undo, q.rcq.releaseQP)
	q.uhandle = vd.addQP(q)
	undo = append(undo, func() { vd.dropQP(q.uhandle) })
	typ := uint8(uverbs.QPTypeRC)
	if q.ud {
		typ = uverbs.QPTypeUD
	}
	inline := vd.drv.MaxInline(attr.Cap.MaxInlineData)
	if attr.Cap.MaxInlineData > inline {
		return einval("inline size %d above the device's %d", attr.Cap.MaxInlineData, inline)
	}
	c := uverbs.CreateQP{UserHandle: q.uhandle, PD: q.pd, SendCQ: q.scq.handle, RecvCQ: q.rcq.handle,
		MaxSendWR: uint32(sd), MaxRecvWR: uint32(rd), MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: uint32(inline),
		SigAll: q.sigAll, Type: typ, DriverOut: vd.drv.QPDriverOut()}
	resp, err = vd.ctx.Exec(&c)
	if err != nil {
		return fmt.Errorf("kernel: create_qp (%d/%d entries): %w", sd, rd, err)
	}
	var r uverbs.CreateQPResp
	_ = r.Decode(resp)
	q.handle, q.num = r.Handle, r.QPN
	undo = append(undo, func() { _, _ = vd.ctx.Exec(&uverbs.DestroyQP{Handle: q.handle}) })
	q.prov, err = vd.drv.NewQP(vd.ctx, provider.QPInit{Type: typ, SigAll: q.sigAll, Resp: r}, resp[uverbs.CreateQPRespSize:])
	if err != nil {
		return fmt.Errorf("kernel: map the QP's queues: %w", err)
	}
	if !q.rcq.shared {
		q.rcq.qp = q
	}
	q.pin.Pin(&q.dbResp)
	_, _ = (&uverbs.PostSend{Handle: q.handle}).Encode(q.db[:], uintptrOf(&q.dbResp[0]))
	if q.ud {
		q.rbufs = make([][]byte, q.prov.RecvDepth()+1)
		q.sgid, q.sgidOK = vd.sgidIndex(q.local)
		q.maxMsg = vd.mtuBytes()
	}
	return nil
}

// init moves a new QP to INIT with the CM's attributes, and a UD QP on to
// RTR and RTS, as rdma_create_qp does. ep.mu and the source are held.
func (q *vqp) init(fd int, b *ucma.Buffers) error {
	if err := q.modifyCM(fd, b, ucma.QPStateInit, nil); err != nil {
		return fmt.Errorf("kernel: create_qp: to INIT: %w", err)
	}
	if !q.ud {
		return nil
	}
	if err := q.modify(uverbs.QPAttrState, &uverbs.QPAttr{State: uverbs.QPStateRTR}); err != nil {
		return fmt.Errorf("kernel: create_qp: to RTR: %w", err)
	}
	if err := q.modify(uverbs.QPAttrState|uverbs.QPAttrSQPSN, &uverbs.QPAttr{State: uverbs.QPStateRTS}); err != nil {
		return fmt.Errorf("kernel: create_qp: to RTS: %w", err)
	}
	q.state = qpRTS
	return nil
}

// modifyCM moves the QP to state with the attributes INIT_QP_ATTR gives
// (adjust may change them). A transition the CM has nothing for (mask 0,
// RTS on iWARP) is skipped.
func (q *vqp) modifyCM(fd int, b *ucma.Buffers, state uint32, adjust func(*uverbs.QPAttr)) error {
	resp, err := b.Exec(fd, &ucma.InitQPAttr{ID: q.ep.handle, QPState: state})
	if err != nil {
		return err
	}
	var ca ucma.QPAttr
	if err := ca.Decode(resp); err != nil {
		return err
	}
	mask := ca.AttrMask & uverbs.QPAttrStandard
	if mask == 0 {
		return nil
	}
	a := verbsAttr(&ca)
	if adjust != nil {
		adjust(&a)
	}
	return q.modify(mask, &a)
}

// modify runs MODIFY_QP.
func (q *vqp) modify(mask uint32, a *uverbs.QPAttr) error {
	_, err := q.vd.ctx.Exec(&uverbs.ModifyQP{Handle: q.handle, Mask: mask, Attr: *a})
	return err
}

// verbsAttr converts INIT_QP_ATTR's ib_uverbs_qp_attr.
func verbsAttr(c *ucma.QPAttr) uverbs.QPAttr {
	ah := func(a *ucma.AHAttr) uverbs.AHAttr {
		return uverbs.AHAttr{DGID: a.DGID, FlowLabel: a.FlowLabel, SGIDIndex: a.SGIDIndex, HopLimit: a.HopLimit,
			TrafficClass: a.TrafficClass, DLID: a.DLID, SL: a.SL, SrcPathBits: a.SrcPathBits,
			StaticRate: a.StaticRate, IsGlobal: a.IsGlobal, PortNum: a.PortNum}
	}
	return uverbs.QPAttr{State: uint8(c.QPState), CurState: uint8(c.CurQPState), PathMTU: uint8(c.PathMTU),
		PathMigState: uint8(c.PathMigState), QKey: c.QKey, RQPSN: c.RQPSN, SQPSN: c.SQPSN, DestQPN: c.DestQPNum,
		AccessFlags: c.QPAccessFlags, AH: ah(&c.AHAttr), AltAH: ah(&c.AltAHAttr), PKeyIndex: c.PKeyIndex,
		AltPKeyIndex: c.AltPKeyIndex, EnSQDAsyncNotify: c.EnSQDAsyncNotify, MaxRdAtomic: c.MaxRDAtomic,
		MaxDestRdAtomic: c.MaxDestRDAtomic, MinRNRTimer: c.MinRNRTimer, PortNum: c.PortNum, Timeout: c.Timeout,
		RetryCnt: c.RetryCnt, RNRRetry: c.RNRRetry, AltPortNum: c.AltPortNum, AltTimeout: c.AltTimeout}
}

// connect moves an RC QP to RTR and RTS with the CM's attributes (resp and
// depth: the responder resources and initiator depth to use, 0xFF for the
// CM's), as ucma_modify_qp_rtr and ucma_modify_qp_rts do. ep.mu and the
// source are held.
func (q *vqp) connect(fd int, b *ucma.Buffers, resp, depth uint8) error {
	if err := q.modifyCM(fd, b, ucma.QPStateInit, nil); err != nil {
		return fmt.Errorf("to INIT: %w", err)
	}
	err := q.modifyCM(fd, b, ucma.QPStateRTR, func(a *uverbs.QPAttr) {
		if resp != 0xFF {
			a.MaxDestRdAtomic = resp
		}
	})
	if err != nil {
		return fmt.Errorf("to RTR: %w", err)
	}
	err = q.modifyCM(fd, b, ucma.QPStateRTS, func(a *uverbs.QPAttr) {
		if depth != 0xFF {
			a.MaxRdAtomic = depth
		}
	})
	if err != nil {
		return fmt.Errorf("to RTS: %w", err)
	}
	return nil
}

// toRTS records that the QP reached RTS and rings the doorbell for sends
// that waited.
func (q *vqp) toRTS() {
	q.sqMu.Lock()
	if q.state != qpInit || q.destroyed {
		q.sqMu.Unlock()
		return
	}
	q.state = qpRTS
	bell := q.pendingDB
	if bell {
		q.pendingDB = false
		q.bells.Add(1)
	}
	q.sqMu.Unlock()
	if bell {
		q.ring()
	}
}

// ring writes the doorbell, outside sqMu: the system call does the
// driver's sending work (rxe runs its requester in it), which other
// posters need not wait for. The caller did q.bells.Add(1) under sqMu
// while the QP was not destroyed; destroy waits for the doorbells rung
// before it destroys the QP and closes the device file.
func (q *vqp) ring() {
	_ = q.vd.ctx.Doorbell(q.db[:])
	q.bells.Done()
}

// toErr moves the QP to the error state (state is uverbs.QPStateErr, or
// QPStateSQD for an iWARP disconnect, which closes gracefully); either way
// later work requests flush.
func (q *vqp) toErr(state uint8) {
	q.sqMu.Lock()
	q.rqMu.Lock()
	defer q.sqMu.Unlock()
	defer q.rqMu.Unlock()
	if q.destroyed {
		return
	}
	// A QP the fabric moved to ERR stays there (nothing here moves it to
	// RESET), so the second ERR of a disconnect (rdma_disconnect's, then
	// DISCONNECTED's, in either order) needs no MODIFY_QP; after an SQD or
	// a failed modify, ERR is still written.
	if !q.inErr && (q.state != qpErr || state == uverbs.QPStateErr) {
		err := q.modify(uverbs.QPAttrState, &uverbs.QPAttr{State: state})
		q.inErr = err == nil && state == uverbs.QPStateErr
	}
	q.state = qpErr
	q.pendingDB = false
}

// fatal handles an async error event: the QP is in error; the connection
// is disconnected so that both ids learn it (iWARP drivers close it
// themselves).
func (q *vqp) fatal() {
	q.toErr(uverbs.QPStateErr)
	if !q.vd.iwarp {
		_ = q.ep.Disconnect()
	}
}

// Num implements fabric.QP.
func (q *vqp) Num() uint32 { return q.num }

// SendCQ implements fabric.QP.
func (q *vqp) SendCQ() fabric.CQ { return q.scq }

// RecvCQ implements fabric.QP.
func (q *vqp) RecvCQ() fabric.CQ { return q.rcq }

// MaxMessageSize returns the largest UD message (the port's active MTU).
func (q *vqp) MaxMessageSize() int { return q.maxMsg }

func wrOpcode(op fabric.WROpcode) (uint32, fabric.WCOpcode, bool) {
	switch op {
	case fabric.WRSend:
		return provider.OpSend, fabric.WCSend, true
	case fabric.WRSendWithInv:
		return provider.OpSendWithInv, fabric.WCSend, true
	case fabric.WRWrite:
		return provider.OpRDMAWrite, fabric.WCRDMAWrite, true
	case fabric.WRRead:
		return provider.OpRDMARead, fabric.WCRDMARead, true
	case fabric.WRSendWithImm:
		return provider.OpSendWithImm, fabric.WCSend, true
	case fabric.WRWriteWithImm:
		return provider.OpRDMAWriteWithImm, fabric.WCRDMAWrite, true
	}
	return 0, 0, false
}

// PostSend implements fabric.QP. Malformed requests (bad opcode, buffer outside
// a region of this QP, RDMA Read into a region without local write, UD
// addressing on RC, inline data over the QP's limit) give EINVAL; a full
// send queue ENOMEM. Before RTS the request waits in the queue; after the
// connection is gone it completes at once with WCWRFlushErr. It does not
// allocate (a UD send to a new address handle creates it once).
func (q *vqp) PostSend(wr *fabric.SendWR) error {
	if wr == nil {
		return einval("post_send: nil work request")
	}
	op, wcop, ok := wrOpcode(wr.Opcode)
	if !ok {
		return einval("post_send: opcode %d", wr.Opcode)
	}
	if len(wr.Buf) > math.MaxInt32 {
		return einval("post_send: %d bytes", len(wr.Buf))
	}
	if q.ud {
		if (wr.Opcode != fabric.WRSend && wr.Opcode != fabric.WRSendWithImm) || wr.AH == nil {
			return einval("post_send: UD QPs send only Sends, with an address handle")
		}
	} else if wr.AH != nil || wr.RemoteQPN != 0 || wr.RemoteQKey != 0 {
		return einval("post_send: UD addressing on an RC QP")
	}
	inline := wr.Flags&fabric.SendInline != 0
	var m *vmr
	switch {
	case inline && wr.Opcode == fabric.WRRead:
		return einval("post_send: inline RDMA Read")
	case inline:
	case len(wr.Buf) > 0:
		var err error
		if m, err = q.region(wr.MR, wr.Buf); err != nil {
			return fmt.Errorf("post_send: %w", err)
		}
		if wr.Opcode == fabric.WRRead && m.access&fabric.AccessLocalWrite == 0 {
			return einval("post_send: RDMA Read into a region without local write access")
		}
	}

	q.sqMu.Lock()
	if q.destroyed {
		q.sqMu.Unlock()
		return einval("post_send: QP destroyed")
	}
	if q.state == qpErr {
		q.sqMu.Unlock()
		q.scq.push(fabric.WC{WRID: wr.WRID, Status: fabric.WCWRFlushErr, Opcode: wcop, ByteLen: uint32(len(wr.Buf)), QPNum: q.num})
		return nil
	}
	s := &q.swr
	*s = provider.SendWR{WRID: wr.WRID, Opcode: op, Flags: uint32(wr.Flags & (fabric.SendSignaled | fabric.SendSolicited | fabric.SendInline)),
		RemoteAddr: wr.RemoteAddr, RKey: wr.RKey}
	switch {
	case inline:
		s.Inline = wr.Buf
	case m != nil:
		s.SGE = provider.SGE{Addr: uint64(uintptrOf(unsafeData(wr.Buf))), Length: uint32(len(wr.Buf)), LKey: m.lkey}
		s.NumSGE = 1
	}
	switch wr.Opcode {
	case fabric.WRSendWithInv:
		s.Ex = wr.InvalidateRKey
	case fabric.WRSendWithImm, fabric.WRWriteWithImm:
		s.Ex = htobe32(wr.ImmData)
	}
	if q.ud {
		ah, err := q.ahLocked(wr.AH)
		if err != nil {
			q.sqMu.Unlock()
			return err
		}
		s.AHNum, s.RemoteQPN, s.RemoteQKey = ah, wr.RemoteQPN, wr.RemoteQKey
		if s.RemoteQKey&0x80000000 != 0 {
			s.RemoteQKey = fabric.UDPQKey // the controlled Q_Key bit: the QP's own
		}
	}
	db, err := q.prov.PostSend(s)
	s.Inline = nil
	bell := false
	if err == nil && db {
		if q.state == qpRTS {
			bell = true
			q.bells.Add(1)
		} else {
			q.pendingDB = true
		}
	}
	q.sqMu.Unlock()
	if bell {
		q.ring()
	}
	return postErr("post_send", err)
}

// PostRecv implements fabric.QP: receives may be posted from creation on; after
// the connection is gone they complete at once with WCWRFlushErr. A UD
// receive buffer starts with the 40-byte GRH.
func (q *vqp) PostRecv(wr *fabric.RecvWR) error {
	if wr == nil {
		return einval("post_recv: nil work request")
	}
	var m *vmr
	if len(wr.Buf) > 0 || wr.MR != nil {
		var err error
		if m, err = q.region(wr.MR, wr.Buf); err != nil {
			return fmt.Errorf("post_recv: %w", err)
		}
		if m.access&fabric.AccessLocalWrite == 0 {
			return einval("post_recv: region without local write access")
		}
	}
	if len(wr.Buf) > math.MaxInt32 {
		return einval("post_recv: %d bytes", len(wr.Buf))
	}
	q.rqMu.Lock()
	if q.destroyed {
		q.rqMu.Unlock()
		return einval("post_recv: QP destroyed")
	}
	if q.state == qpErr {
		q.rqMu.Unlock()
		q.rcq.push(fabric.WC{WRID: wr.WRID, Status: fabric.WCWRFlushErr, Opcode: fabric.WCRecv, QPNum: q.num})
		return nil
	}
	r := &q.rwr
	*r = provider.RecvWR{WRID: wr.WRID}
	if len(wr.Buf) > 0 {
		r.SGE = provider.SGE{Addr: uint64(uintptrOf(unsafeData(wr.Buf))), Length: uint32(len(wr.Buf)), LKey: m.lkey}
		r.NumSGE = 1
	}
	err := q.prov.PostRecv(r)
	if err == nil && q.ud {
		q.rbufs[(q.rhead+q.rlen)%len(q.rbufs)] = wr.Buf
		q.rlen++
	}
	q.rqMu.Unlock()
	return postErr("post_recv", err)
}

func postErr(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, provider.ErrQueueFull):
		return fmt.Errorf("kernel: %s: queue full: %w", op, syscall.ENOMEM)
	case errors.Is(err, provider.ErrBadWR):
		return fmt.Errorf("kernel: %s: request not supported by the device: %w", op, syscall.EINVAL)
	}
	return fmt.Errorf("kernel: %s: %w", op, err)
}

// Destroy implements fabric.QP: the QP and its queues are destroyed, its
// regions deregistered; the completion queues' waiters return EBADF.
// Destroying twice gives EINVAL.
func (q *vqp) Destroy() error {
	q.ep.mu.Lock()
	if q.ep.vqp == q {
		q.ep.vqp = nil
	}
	q.ep.mu.Unlock()
	return q.destroy()
}

func (q *vqp) destroy() error {
	q.sqMu.Lock()
	q.rqMu.Lock()
	dup := q.destroyed
	q.destroyed = true
	q.rqMu.Unlock()
	q.sqMu.Unlock()
	if dup {
		return einval("destroy_qp: QP destroyed")
	}
	q.bells.Wait() // no doorbell once the QP's handle or the file may be reused
	vd := q.vd
	_, err := vd.ctx.Exec(&uverbs.DestroyQP{Handle: q.handle})
	vd.dropQP(q.uhandle)
	_ = q.prov.Close()
	q.scq.releaseQP()
	q.rcq.releaseQP()
	q.mrMu.Lock()
	for m := range q.mrs {
		_ = m.dereg()
	}
	q.mrs = nil
	q.mrMu.Unlock()
	q.sqMu.Lock()
	q.destroyAHsLocked()
	q.sqMu.Unlock()
	_, _ = vd.ctx.Exec(uverbs.DeallocPD(q.pd))
	q.pin.Unpin()
	vd.release()
	if err != nil {
		return fmt.Errorf("kernel: destroy_qp: %w", err)
	}
	return nil
}
