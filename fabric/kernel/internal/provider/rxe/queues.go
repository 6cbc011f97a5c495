package rxe

import (
	"fmt"

	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// cq is an rxe completion queue: struct ib_uverbs_wc entries, produced by
// the kernel.
type cq struct {
	m    provider.Mapper
	r    ring
	cons uint32 // our copy of the consumer index (we own it)
}

// NewCQ implements provider.Driver.
func (Driver) NewCQ(m provider.Mapper, _ uverbs.CreateCQResp, drv []byte) (provider.CQ, error) {
	mi, err := DecodeMMInfo(drv)
	if err != nil {
		return nil, err
	}
	r, err := mapRing(m, mi, uverbs.WCSize)
	if err != nil {
		return nil, err
	}
	return &cq{m: m, r: r, cons: r.consumer()}, nil
}

// Poll implements provider.CQ.
func (c *cq) Poll(out []provider.WC) int {
	if len(out) == 0 {
		return 0
	}
	prod := c.r.producer()
	cons := c.cons
	n := 0
	for cons != prod && n < len(out) {
		_ = out[n].Decode(c.r.slot(cons))
		cons = (cons + 1) & c.r.mask
		n++
	}
	if n > 0 {
		c.cons = cons
		c.r.setConsumer(cons) // frees the slots for the kernel
	}
	return n
}

// Empty implements provider.CQ.
func (c *cq) Empty() bool { return c.r.producer() == c.cons }

// Arm implements provider.CQ: rxe arms with REQ_NOTIFY_CQ.
func (c *cq) Arm(bool) bool { return true }

// Depth implements provider.CQ: one slot always stays free.
func (c *cq) Depth() int { return c.r.slots() - 1 }

// Close implements provider.CQ.
func (c *cq) Close() error {
	mem := c.r.mem
	c.r = ring{}
	return c.m.Munmap(mem)
}

// qp is an rxe queue pair's send and receive queues.
type qp struct {
	m         provider.Mapper
	sq, rq    ring
	sqPut     uint32 // producer indices, ours
	rqPut     uint32
	ssn       uint32
	ud        bool
	maxInline int
	maxSGE    int // send slots' room for elements
	maxRSGE   int
}

// NewQP implements provider.Driver: rxe_create_qp_resp is {rq_mi, sq_mi}.
func (Driver) NewQP(m provider.Mapper, init provider.QPInit, drv []byte) (provider.QP, error) {
	if len(drv) < 2*mminfoSize {
		return nil, provider.ErrBadResp
	}
	rqi, _ := DecodeMMInfo(drv[0:])
	sqi, _ := DecodeMMInfo(drv[mminfoSize:])
	sq, err := mapRing(m, sqi, sendWQESize+sgeSize)
	if err != nil {
		return nil, fmt.Errorf("rxe: send queue: %w", err)
	}
	rq, err := mapRing(m, rqi, recvWQESize+sgeSize)
	if err != nil {
		_ = m.Munmap(sq.mem)
		return nil, fmt.Errorf("rxe: receive queue: %w", err)
	}
	q := &qp{m: m, sq: sq, rq: rq, sqPut: sq.producer(), rqPut: rq.producer(), ud: init.Type == uverbs.QPTypeUD}
	q.maxInline = min(int(init.Resp.MaxInline), sq.elem()-sendWQESize)
	q.maxSGE = (sq.elem() - sendWQESize) / sgeSize
	q.maxRSGE = (rq.elem() - recvWQESize) / sgeSize
	return q, nil
}

// Offsets in struct rxe_send_wqe.
const (
	swWRID       = 0
	swOpcode     = 12
	swSendFlags  = 16
	swEx         = 20
	swRemoteAddr = 24 // wr.rdma.remote_addr
	swRKey       = 32 // wr.rdma.rkey
	swUDQPN      = 24 // wr.ud.remote_qpn
	swUDQKey     = 28 // wr.ud.remote_qkey
	swUDAHNum    = 36 // wr.ud.ah_num
	swIOVA       = 152
	swSSN        = 176
	swDMALength  = 184
	swDMAResid   = 188
	swDMANumSGE  = 196
	swSGE        = 208 // dma.sge[] or dma.inline_data[]
)

// Offsets in struct rxe_recv_wqe.
const (
	rwWRID      = 0
	rwDMALength = 16
	rwDMAResid  = 20
	rwDMANumSGE = 28
	rwSGE       = 40
)

func (q *qp) SendDepth() int { return q.sq.slots() - 1 }
func (q *qp) RecvDepth() int { return q.rq.slots() - 1 }
func (q *qp) MaxInline() int { return q.maxInline }

// PostSend implements provider.QP: the entry is written and published by
// advancing the producer index; rxe looks at the queue on the doorbell.
func (q *qp) PostSend(wr *provider.SendWR) (bool, error) {
	switch wr.Opcode {
	case provider.OpSend, provider.OpSendWithImm:
	case provider.OpRDMAWrite, provider.OpRDMAWriteWithImm, provider.OpRDMARead, provider.OpSendWithInv:
		if q.ud {
			return false, provider.ErrBadWR
		}
	default:
		return false, provider.ErrBadWR
	}
	inline := wr.Flags&provider.SendInline != 0
	switch {
	case inline && (len(wr.Inline) > q.maxInline || wr.Opcode == provider.OpRDMARead):
		return false, provider.ErrBadWR
	case !inline && (wr.NumSGE < 0 || wr.NumSGE > 1 || wr.NumSGE > q.maxSGE):
		return false, provider.ErrBadWR
	}
	put := q.sqPut
	next := (put + 1) & q.sq.mask
	if next == q.sq.consumer() {
		return false, provider.ErrQueueFull
	}
	w := q.sq.slot(put)
	clear(w[:swSGE])
	ne.PutUint64(w[swWRID:], wr.WRID)
	ne.PutUint32(w[swOpcode:], wr.Opcode)
	ne.PutUint32(w[swSendFlags:], wr.Flags&(provider.SendFence|provider.SendSignaled|provider.SendSolicited|provider.SendInline))
	ne.PutUint32(w[swEx:], wr.Ex)
	if q.ud {
		ne.PutUint32(w[swUDQPN:], wr.RemoteQPN)
		ne.PutUint32(w[swUDQKey:], wr.RemoteQKey)
		ne.PutUint32(w[swUDAHNum:], wr.AHNum)
	} else if wr.Opcode != provider.OpSend && wr.Opcode != provider.OpSendWithImm && wr.Opcode != provider.OpSendWithInv {
		ne.PutUint64(w[swRemoteAddr:], wr.RemoteAddr)
		ne.PutUint32(w[swRKey:], wr.RKey)
		ne.PutUint64(w[swIOVA:], wr.RemoteAddr)
	}
	var length uint32
	if inline {
		length = uint32(copy(w[swSGE:], wr.Inline))
	} else if wr.NumSGE == 1 {
		length = wr.SGE.Length
		ne.PutUint64(w[swSGE:], wr.SGE.Addr)
		ne.PutUint32(w[swSGE+8:], wr.SGE.Length)
		ne.PutUint32(w[swSGE+12:], wr.SGE.LKey)
		ne.PutUint32(w[swDMANumSGE:], 1)
	}
	ne.PutUint32(w[swDMALength:], length)
	ne.PutUint32(w[swDMAResid:], length)
	ne.PutUint32(w[swSSN:], q.ssn)
	q.ssn++
	q.sq.setProducer(next)
	q.sqPut = next
	return true, nil
}

// PostRecv implements provider.QP.
func (q *qp) PostRecv(wr *provider.RecvWR) error {
	if wr.NumSGE < 0 || wr.NumSGE > 1 || wr.NumSGE > q.maxRSGE {
		return provider.ErrBadWR
	}
	put := q.rqPut
	next := (put + 1) & q.rq.mask
	if next == q.rq.consumer() {
		return provider.ErrQueueFull
	}
	w := q.rq.slot(put)
	clear(w[:rwSGE])
	ne.PutUint64(w[rwWRID:], wr.WRID)
	var length uint32
	if wr.NumSGE == 1 {
		length = wr.SGE.Length
		ne.PutUint64(w[rwSGE:], wr.SGE.Addr)
		ne.PutUint32(w[rwSGE+8:], wr.SGE.Length)
		ne.PutUint32(w[rwSGE+12:], wr.SGE.LKey)
		ne.PutUint32(w[rwDMANumSGE:], 1)
	}
	ne.PutUint32(w[rwDMALength:], length)
	ne.PutUint32(w[rwDMAResid:], length)
	q.rq.setProducer(next)
	q.rqPut = next
	return nil
}

// Close implements provider.QP.
func (q *qp) Close() error {
	err1 := q.m.Munmap(q.sq.mem)
	err2 := q.m.Munmap(q.rq.mem)
	q.sq, q.rq = ring{}, ring{}
	if err1 != nil {
		return err1
	}
	return err2
}
