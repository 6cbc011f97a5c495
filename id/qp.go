package id

import (
	"context"
	"errors"
	"sync"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
)

// CreateQP creates the id's queue pair, as rdma_create_qp, in the id's
// protection domain: with its own completion queues, or with the shared
// ones attr names (SendCQ, RecvCQ: see CreateCQ), as librdmacm takes
// qp_init_attr's send_cq and recv_cq. The id must be bound
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
	c, ok := i.ep.(fabric.QPCreator)
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

// CreateCQ creates a completion queue of at least depth entries on the
// id's device, as ibv_create_cq(id->verbs, depth, ...), for QPs to share:
// pass it as QPInitAttr.SendCQ or RecvCQ to CreateQP of this id or of any
// id on the same fabric and device, and poll or register it (a reactor's
// RegisterCQ) once for all of them; each completion names its QP
// (WC.QPNum). It outlives its QPs: destroy it with its Destroy once no QP
// uses it (EBUSY before). The id must be bound to a device, as for
// CreateQP (EINVAL before, and after Destroy); depth below 1 is EINVAL;
// fabrics whose queues belong to their QPs give ENOSYS. The queue is the
// caller's: destroying the id leaves it.
func (i *ID) CreateCQ(depth int) (SharedCQ, error) {
	i.mu.Lock()
	st, ep := i.state, i.ep
	i.mu.Unlock()
	switch {
	case st == StateDestroyed || st == StateCanceled:
		return nil, errorf("create_cq", syscall.EINVAL, "id %d is %s", i.uid, st)
	case st == StateIdle:
		return nil, errorf("create_cq", syscall.EINVAL, "id %d is not bound to a device", i.uid)
	case depth < 1:
		return nil, errorf("create_cq", syscall.EINVAL, "depth %d", depth)
	}
	c, ok := ep.(fabric.CQCreator)
	if !ok {
		return nil, errorf("create_cq", syscall.ENOSYS, "the %s fabric has no completion queues apart from QPs", i.fabric.Name())
	}
	cq, err := c.CreateCQ(depth)
	if err != nil {
		return nil, wrap("create_cq", err)
	}
	return cq, nil
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
	pe, ok := ep.(fabric.PDEndpoint)
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
	sendWRs = sync.Pool{New: func() any { return new(fabric.SendWR) }}
	recvWRs = sync.Pool{New: func() any { return new(fabric.RecvWR) }}
)

// PostRecv posts a receive of buf (within mr), as rdma_post_recv.
func (i *ID) PostRecv(wrID uint64, buf []byte, mr MR) error {
	qp, err := i.needQP("post_recv")
	if err != nil {
		return err
	}
	wr := recvWRs.Get().(*fabric.RecvWR)
	*wr = fabric.RecvWR{WRID: wrID, Buf: buf, MR: mr}
	err = qp.PostRecv(wr)
	*wr = fabric.RecvWR{}
	recvWRs.Put(wr)
	return wrap("post_recv", err)
}

// PostSend posts a Send of buf, as rdma_post_send.
func (i *ID) PostSend(wrID uint64, buf []byte, mr MR, flags SendFlags) error {
	return i.post("post_send", fabric.SendWR{WRID: wrID, Opcode: fabric.WRSend, Flags: flags, Buf: buf, MR: mr})
}

// PostSendWithInv posts a Send of buf that also invalidates the peer's
// region rkey once the message is placed there (iWARP Send with
// Invalidate). The peer's receive completion reports the invalidation.
func (i *ID) PostSendWithInv(wrID uint64, buf []byte, mr MR, flags SendFlags, rkey uint32) error {
	return i.post("post_send", fabric.SendWR{WRID: wrID, Opcode: fabric.WRSendWithInv, Flags: flags, Buf: buf, MR: mr,
		InvalidateRKey: rkey})
}

// PostUDSend posts a datagram to the peer ah/qpn with the UD Q_Key, as
// rdma_post_ud_send.
func (i *ID) PostUDSend(wrID uint64, buf []byte, mr MR, flags SendFlags, ah *AHAttr, remoteQPN uint32) error {
	return i.post("post_ud_send", fabric.SendWR{WRID: wrID, Opcode: fabric.WRSend, Flags: flags, Buf: buf, MR: mr,
		AH: ah, RemoteQPN: remoteQPN, RemoteQKey: UDPQKey})
}

// PostWrite posts an RDMA Write of buf to the peer's remoteAddr/rkey, as
// rdma_post_write. On iWARP (the soft fabric) the Write completes once its
// bytes are handed to the transport, before the peer has placed them: a
// completion does not mean the remote memory holds them. To tell the peer
// the data is there, follow the Write with a Send (they are placed in
// order), or Read back from the peer.
func (i *ID) PostWrite(wrID uint64, buf []byte, mr MR, flags SendFlags, remoteAddr uint64, rkey uint32) error {
	return i.post("post_write", fabric.SendWR{WRID: wrID, Opcode: fabric.WRWrite, Flags: flags, Buf: buf, MR: mr,
		RemoteAddr: remoteAddr, RKey: rkey})
}

// PostRead posts an RDMA Read from the peer's remoteAddr/rkey into buf, as
// rdma_post_read.
func (i *ID) PostRead(wrID uint64, buf []byte, mr MR, flags SendFlags, remoteAddr uint64, rkey uint32) error {
	return i.post("post_read", fabric.SendWR{WRID: wrID, Opcode: fabric.WRRead, Flags: flags, Buf: buf, MR: mr,
		RemoteAddr: remoteAddr, RKey: rkey})
}

func (i *ID) post(op string, w fabric.SendWR) error {
	qp, err := i.needQP(op)
	if err != nil {
		return err
	}
	wr := sendWRs.Get().(*fabric.SendWR)
	*wr = w
	err = qp.PostSend(wr)
	*wr = fabric.SendWR{}
	sendWRs.Put(wr)
	return wrap(op, err)
}

// PostSendList posts the send work requests wrs in order, as one
// ibv_post_send of a chained list (see fabric.SendListPoster): on fabrics
// whose QPs take a list (the software fabric) they are queued in one go
// and may leave in one write, elsewhere they are posted one by one. It
// returns how many were posted: all of them, or the index of the first
// request that could not be (ibv_post_send's bad_wr) with its error, the
// ones before it posted. The requests are copied: wrs may be reused at
// once.
func (i *ID) PostSendList(wrs []SendWR) (int, error) {
	qp, err := i.needQP("post_send")
	if err != nil {
		return 0, err
	}
	n, err := fabric.PostSendList(qp, wrs)
	return n, wrap("post_send", err)
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
	if wc.GRH && len(grh) >= fabric.GRHLen {
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
