package siw

import (
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// The flags word: the 32-bit word at offset 8 of every entry. In a send or
// receive entry it holds flags (u16), num_sge (u8) and opcode (u8), stored
// together in one atomic store that publishes the entry; in a completion
// it holds flags (u8), opcode (u8) and status (u16).
const flagsWord = 8

// cq is a siw completion queue.
type cq struct {
	m    provider.Mapper
	mem  []byte
	num  uint32
	get  uint32
	ctrl int // offset of struct siw_cq_ctrl
	cqe  CQE
}

// NewCQ implements provider.Driver. struct siw_uresp_create_cq: 0 cq_id, 4
// num_cqe, 8 cq_key.
func (Driver) NewCQ(m provider.Mapper, _ uverbs.CreateCQResp, drv []byte) (provider.CQ, error) {
	if len(drv) < cqRespSize {
		return nil, provider.ErrBadResp
	}
	num := ne.Uint32(drv[4:])
	key := ne.Uint64(drv[8:])
	// The key is valid whatever its value: siw fails the create when it
	// cannot make one. (Its SIW_INVAL_UOBJ_KEY, 0x90000, is also the key of
	// the 145th page of a context's mappings, which rdma-core's provider
	// then refuses: about 36 QPs per process.)
	if num == 0 || num&(num-1) != 0 || num > maxQueue {
		return nil, badResp("completion queue of %d entries at key %#x", num, key)
	}
	size := int(num)*cqeSize + ctrlSize
	mem, err := m.Mmap(key, size)
	if err != nil {
		return nil, err
	}
	if len(mem) < size || !provider.Aligned(mem, 0, 8) {
		_ = m.Munmap(mem)
		return nil, badResp("completion queue mapping of %d bytes", len(mem))
	}
	c := &cq{m: m, mem: mem, num: num, ctrl: int(num) * cqeSize}
	provider.StoreU32(mem, c.ctrl, 0) // SIW_NOTIFY_NOT
	return c, nil
}

func (c *cq) slot(i uint32) []byte {
	off := int(i%c.num) * cqeSize
	return c.mem[off : off+cqeSize : off+cqeSize]
}

// Poll implements provider.CQ: an entry is ours while its flags have VALID;
// clearing them hands the slot back to the kernel.
func (c *cq) Poll(out []provider.WC) int {
	n := 0
	for n < len(out) {
		e := c.slot(c.get)
		if provider.LoadU32(e, flagsWord)&flagValid == 0 {
			break
		}
		_ = DecodeCQE(e, &c.cqe)
		c.cqe.ToWC(&out[n])
		provider.StoreU32(e, flagsWord, 0)
		c.get++
		n++
	}
	return n
}

// Empty implements provider.CQ.
func (c *cq) Empty() bool { return provider.LoadU32(c.slot(c.get), flagsWord)&flagValid == 0 }

// Arm implements provider.CQ: the request goes into the shared control
// word, which siw reads (and clears) when it adds a completion.
func (c *cq) Arm(solicitedOnly bool) bool {
	v := uint32(notifySolicited | notifyNext)
	if solicitedOnly {
		v = notifySolicited
	}
	provider.StoreU32(c.mem, c.ctrl, v)
	return false
}

// Depth implements provider.CQ.
func (c *cq) Depth() int { return int(c.num) }

// Close implements provider.CQ.
func (c *cq) Close() error {
	mem := c.mem
	c.mem = nil
	return c.m.Munmap(mem)
}

// qp is a siw queue pair's send and receive queues.
type qp struct {
	m         provider.Mapper
	sq, rq    []byte
	nsq, nrq  uint32
	sqPut     uint32
	rqPut     uint32
	sigAll    bool
	maxInline int
}

// Offsets in struct siw_sqe and struct siw_rqe.
const (
	sqeID    = 0
	sqeRKey  = 12
	sqeRAddr = 16
	sqeSGE   = 24 // sge[0]: laddr, length, lkey
	rqeID    = 0
	rqeSGE   = 16
)

// NewQP implements provider.Driver. struct siw_uresp_create_qp: 0 qp_id, 4
// num_sqe, 8 num_rqe, 12 pad, 16 sq_key, 24 rq_key.
func (Driver) NewQP(m provider.Mapper, init provider.QPInit, drv []byte) (provider.QP, error) {
	if init.Type != uverbs.QPTypeRC {
		return nil, provider.ErrBadWR
	}
	if len(drv) < qpRespSize {
		return nil, provider.ErrBadResp
	}
	nsq, nrq := ne.Uint32(drv[4:]), ne.Uint32(drv[8:])
	sqKey, rqKey := ne.Uint64(drv[16:]), ne.Uint64(drv[24:])
	for _, n := range []uint32{nsq, nrq} {
		if n == 0 || n&(n-1) != 0 || n > maxQueue {
			return nil, badResp("queue of %d entries", n)
		}
	}
	sq, err := mapQueue(m, sqKey, int(nsq)*sqeSize)
	if err != nil {
		return nil, err
	}
	rq, err := mapQueue(m, rqKey, int(nrq)*rqeSize)
	if err != nil {
		_ = m.Munmap(sq)
		return nil, err
	}
	return &qp{m: m, sq: sq, rq: rq, nsq: nsq, nrq: nrq, sigAll: init.SigAll,
		maxInline: min(maxInline, int(init.Resp.MaxInline))}, nil
}

func mapQueue(m provider.Mapper, key uint64, size int) ([]byte, error) {
	mem, err := m.Mmap(key, size)
	if err != nil {
		return nil, err
	}
	if len(mem) < size || !provider.Aligned(mem, 0, 8) {
		_ = m.Munmap(mem)
		return nil, badResp("queue mapping of %d bytes", len(mem))
	}
	return mem, nil
}

func (q *qp) SendDepth() int { return int(q.nsq) }
func (q *qp) RecvDepth() int { return int(q.nrq) }
func (q *qp) MaxInline() int { return q.maxInline }

func (q *qp) sqe(i uint32) []byte {
	off := int(i%q.nsq) * sqeSize
	return q.sq[off : off+sqeSize : off+sqeSize]
}

func (q *qp) rqe(i uint32) []byte {
	off := int(i%q.nrq) * rqeSize
	return q.rq[off : off+rqeSize : off+rqeSize]
}

// PostSend implements provider.QP. The doorbell is needed only when the
// entry before this one is no longer valid: the kernel is then idle, or it
// finishes that entry after this one is published and takes this one next.
func (q *qp) PostSend(wr *provider.SendWR) (bool, error) {
	var op uint8
	switch wr.Opcode {
	case provider.OpSend:
		op = opSend
	case provider.OpSendWithInv:
		op = opSendRemInv
	case provider.OpRDMAWrite:
		op = opWrite
	case provider.OpRDMARead:
		op = opRead
	default:
		return false, provider.ErrBadWR // no immediate data on siw
	}
	inline := wr.Flags&provider.SendInline != 0
	switch {
	case inline && (len(wr.Inline) > q.maxInline || op == opRead):
		return false, provider.ErrBadWR
	case !inline && (wr.NumSGE < 0 || wr.NumSGE > 1):
		return false, provider.ErrBadWR
	case op == opRead && wr.NumSGE != 1:
		return false, provider.ErrBadWR // iWARP: one sink element
	}
	e := q.sqe(q.sqPut)
	if provider.LoadU32(e, flagsWord)&flagValid != 0 {
		return false, provider.ErrQueueFull
	}
	flags := uint32(flagValid)
	if wr.Flags&provider.SendSignaled != 0 || q.sigAll {
		flags |= flagSignalled
	}
	if wr.Flags&provider.SendSolicited != 0 {
		flags |= flagSolicited
	}
	if wr.Flags&provider.SendFence != 0 {
		flags |= flagReadFence
	}
	clear(e[sqeSGE:])
	ne.PutUint64(e[sqeID:], wr.WRID)
	rkey := wr.RKey
	if op == opSendRemInv {
		rkey = wr.Ex // siw sends the STag to invalidate from the rkey field
	}
	ne.PutUint32(e[sqeRKey:], rkey)
	ne.PutUint64(e[sqeRAddr:], wr.RemoteAddr)
	var nsge uint32
	if inline {
		flags |= flagInline
		nsge = 1
		n := copy(e[sqeSGE+16:], wr.Inline) // data from sge[1] on
		ne.PutUint32(e[sqeSGE+8:], uint32(n))
	} else if wr.NumSGE == 1 {
		nsge = 1
		ne.PutUint64(e[sqeSGE:], wr.SGE.Addr)
		ne.PutUint32(e[sqeSGE+8:], wr.SGE.Length)
		ne.PutUint32(e[sqeSGE+12:], wr.SGE.LKey)
	}
	provider.StoreU32(e, flagsWord, flags|nsge<<16|uint32(op)<<24)
	prev := q.sqe(q.sqPut - 1)
	q.sqPut++
	return q.nsq == 1 || provider.LoadU32(prev, flagsWord)&flagValid == 0, nil
}

// PostRecv implements provider.QP.
func (q *qp) PostRecv(wr *provider.RecvWR) error {
	if wr.NumSGE < 0 || wr.NumSGE > 1 {
		return provider.ErrBadWR
	}
	e := q.rqe(q.rqPut)
	if provider.LoadU32(e, flagsWord)&flagValid != 0 {
		return provider.ErrQueueFull
	}
	clear(e[rqeSGE:])
	ne.PutUint64(e[rqeID:], wr.WRID)
	ne.PutUint32(e[12:], 0)
	var nsge uint32
	if wr.NumSGE == 1 {
		nsge = 1
		ne.PutUint64(e[rqeSGE:], wr.SGE.Addr)
		ne.PutUint32(e[rqeSGE+8:], wr.SGE.Length)
		ne.PutUint32(e[rqeSGE+12:], wr.SGE.LKey)
	}
	provider.StoreU32(e, flagsWord, flagValid|nsge<<16)
	q.rqPut++
	return nil
}

// Close implements provider.QP.
func (q *qp) Close() error {
	err1 := q.m.Munmap(q.sq)
	err2 := q.m.Munmap(q.rq)
	q.sq, q.rq = nil, nil
	if err1 != nil {
		return err1
	}
	return err2
}
