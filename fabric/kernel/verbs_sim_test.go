package kernel

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider/providertest"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider/rxe"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// A simulated rxe device for the data path's glue: the rxe provider over
// anonymous memory, and a "kernel" goroutine that reads the commands the
// glue writes (doorbells, REQ_NOTIFY_CQ) from a socket standing in for the
// device file, completes sends, and raises notifications on pipes standing
// in for the completion channels, late when asked (as rxe's tasklet).
// Received messages are delivered by the test goroutine itself.

const (
	simSendCQ = 1
	simRecvCQ = 2
	simQP     = 3
)

func ld32(b []byte, off int) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off]))) }
func st32(b []byte, off int, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

// simRing is an rxe_queue_buf as the kernel side sees it.
type simRing struct {
	mem  []byte
	mask uint32
	log2 uint32
	mi   []byte // struct mminfo for the create response
}

func newSimRing(m *providertest.Mapper, key uint64, slots, elem int) *simRing {
	log2 := uint32(0)
	for 1<<log2 < elem {
		log2++
	}
	size := 384 + slots<<log2
	mem := m.Add(key, size)
	binary.NativeEndian.PutUint32(mem[0:], log2)
	binary.NativeEndian.PutUint32(mem[4:], uint32(slots-1))
	mi := make([]byte, 16)
	binary.NativeEndian.PutUint64(mi, key)
	binary.NativeEndian.PutUint32(mi[8:], uint32(size))
	return &simRing{mem: mem, mask: uint32(slots - 1), log2: log2, mi: mi}
}

func (r *simRing) slot(i uint32) []byte {
	off := 384 + int(i&r.mask)<<r.log2
	return r.mem[off : off+1<<r.log2]
}

// take returns the next entry user space produced, or nil.
func (r *simRing) take() []byte {
	prod, cons := ld32(r.mem, 128), ld32(r.mem, 256)
	if prod == cons {
		return nil
	}
	e := r.slot(cons)
	st32(r.mem, 256, (cons+1)&r.mask)
	return e
}

// put adds a completion; false when full.
func (r *simRing) put(wc *uverbs.WC) bool {
	prod, cons := ld32(r.mem, 128), ld32(r.mem, 256)
	if (prod+1)&r.mask == cons {
		return false
	}
	_ = wc.Encode(r.slot(prod))
	st32(r.mem, 128, (prod+1)&r.mask)
	return true
}

type simKernel struct {
	t       testing.TB
	m       *providertest.Mapper
	pipes   map[uint32][2]int // CQ handle -> its channel's pipe
	cqs     map[uint32]*simRing
	sq, rq  *simRing
	vd      *verbsDev
	q       *vqp
	late    atomic.Int64 // notification delay, nanoseconds
	mu      sync.Mutex
	armed   map[uint32]bool
	doorbel atomic.Int64
	cmds    atomic.Int64 // commands written, doorbells included
	mods    []uint8      // the states of the MODIFY_QPs written, under mu
	modErr  error        // what MODIFY_QP returns, under mu
	// onDoorbell, when set, runs within each doorbell's write, as the
	// driver's requester runs within it.
	onDoorbell func()
	async      int // the write end of the async event descriptor
}

// newSim builds a QP of the given type on a simulated rxe device, in
// state st.
func newSim(t testing.TB, ud bool, st qpState) *simKernel {
	t.Helper()
	s := &simKernel{t: t, m: providertest.NewMapper(), pipes: make(map[uint32][2]int),
		cqs: make(map[uint32]*simRing), armed: make(map[uint32]bool)}
	var ap [2]int
	if err := unix.Pipe2(ap[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	s.async = ap[1]
	s.vd = &verbsDev{name: "sim", drv: rxe.Driver{}, ctx: uverbs.NewFakeContext(s.command, ap[0]), qps: map[uint64]*vqp{},
		port: uverbs.PortAttr{LinkLayer: uverbs.LinkLayerEthernet, ActiveMTU: 3}}
	cq := func(h uint32, key uint64) *vcq {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		s.pipes[h] = p
		ch, err := uverbs.NewCompChannel(p[0])
		if err != nil {
			t.Fatal(err)
		}
		r := newSimRing(s.m, key, 64, 128)
		s.cqs[h] = r
		prov, err := rxe.Driver{}.NewCQ(s.m, uverbs.CreateCQResp{}, r.mi)
		if err != nil {
			t.Fatal(err)
		}
		c := &vcq{vd: s.vd, handle: h, ch: ch, prov: prov}
		_, _ = (&uverbs.ReqNotifyCQ{Handle: h}).Encode(c.notify[:], 0)
		return c
	}
	q := &vqp{ep: &endpoint{destroyed: true}, vd: s.vd, handle: simQP, num: 0x11, ud: ud, port: 1, state: st,
		mrs: make(map[*vmr]struct{})}
	q.scq, q.rcq = cq(simSendCQ, 0x1000), cq(simRecvCQ, 0x2000)
	s.sq = newSimRing(s.m, 0x3000, 32, 512)
	s.rq = newSimRing(s.m, 0x4000, 32, 64)
	typ := uint8(uverbs.QPTypeRC)
	if ud {
		typ = uverbs.QPTypeUD
	}
	drv := append(append([]byte(nil), s.rq.mi...), s.sq.mi...)
	var err error
	q.prov, err = rxe.Driver{}.NewQP(s.m, providerQPInit(typ, 64), drv)
	if err != nil {
		t.Fatal(err)
	}
	q.rcq.qp = q
	q.pin.Pin(&q.dbResp)
	_, _ = (&uverbs.PostSend{Handle: simQP}).Encode(q.db[:], uintptrOf(&q.dbResp[0]))
	if ud {
		q.rbufs = make([][]byte, q.prov.RecvDepth()+1)
	}
	s.q = q
	t.Cleanup(s.close)
	return s
}

// command handles one command, within the writer's call as the kernel
// handles it within its write(2).
func (s *simKernel) command(msg []byte) error {
	h, err := uverbs.DecodeHeader(msg)
	if err != nil || int(h.InWords)*4 != len(msg) {
		s.t.Errorf("bad command %x", msg)
		return syscall.EINVAL
	}
	handle := binary.NativeEndian.Uint32(msg[8:])
	s.cmds.Add(1)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch h.Cmd {
	case uverbs.CmdReqNotifyCQ:
		s.armed[handle] = true
	case uverbs.CmdPostSend:
		if handle := binary.NativeEndian.Uint32(msg[16:]); handle != simQP {
			s.t.Errorf("doorbell of QP %d", handle)
		}
		s.doorbel.Add(1)
		if s.onDoorbell != nil {
			s.onDoorbell()
		}
		s.sendAllLocked()
	case uverbs.CmdModifyQP:
		if handle := binary.NativeEndian.Uint32(msg[uverbs.HeaderSize+64:]); handle != simQP {
			s.t.Errorf("MODIFY_QP of QP %d", handle)
		}
		s.mods = append(s.mods, msg[uverbs.HeaderSize+96])
		return s.modErr
	default:
		s.t.Errorf("unexpected command %v", h.Cmd)
	}
	return nil
}

// sendAllLocked completes every queued send: signaled ones get a
// completion.
func (s *simKernel) sendAllLocked() {
	for e := s.sq.take(); e != nil; e = s.sq.take() {
		wrid := binary.NativeEndian.Uint64(e[0:])
		op := binary.NativeEndian.Uint32(e[12:])
		flags := binary.NativeEndian.Uint32(e[16:])
		n := binary.NativeEndian.Uint32(e[184:])
		if flags&2 == 0 && !s.q.sigAll {
			continue
		}
		wcop := uint32(uverbs.WCOpSend)
		switch op {
		case 0, 1:
			wcop = uverbs.WCOpRDMAWrite
		case 4:
			wcop = uverbs.WCOpRDMARead
		}
		s.completeLocked(simSendCQ, &uverbs.WC{WRID: wrid, Opcode: wcop, ByteLen: n, QPNum: 0x11})
	}
}

// completeLocked adds a completion and raises the notification if armed,
// late if asked.
func (s *simKernel) completeLocked(h uint32, wc *uverbs.WC) {
	if !s.cqs[h].put(wc) {
		s.t.Errorf("completion queue %d overflow", h)
		return
	}
	fire := s.armed[h]
	s.armed[h] = false
	if !fire {
		return
	}
	notify := func() { _, _ = unix.Write(s.pipes[h][1], make([]byte, 8)) }
	if d := time.Duration(s.late.Load()); d > 0 {
		time.AfterFunc(d, notify)
		return
	}
	notify()
}

// deliver places a message in the oldest posted receive, as the kernel
// does with an arriving Send (called from the test goroutine: it writes
// the receive buffer). ud prefixes a RoCE v2/IPv4 GRH naming src.
func (s *simKernel) deliver(msg []byte, src [4]byte, srcQP uint32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.rq.take()
	if e == nil {
		return false
	}
	wrid := binary.NativeEndian.Uint64(e[0:])
	addr := binary.NativeEndian.Uint64(e[40:])
	length := binary.NativeEndian.Uint32(e[48:])
	lkey := binary.NativeEndian.Uint32(e[52:])
	var dst []byte
	if binary.NativeEndian.Uint32(e[28:]) == 1 {
		// The kernel finds the region by key and checks the range.
		for m := range s.q.mrs {
			if m.lkey == lkey && addr >= m.Addr() && addr+uint64(length) <= m.Addr()+uint64(len(m.buf)) {
				off := addr - m.Addr()
				dst = m.buf[off : off+uint64(length)]
			}
		}
		if dst == nil {
			s.t.Errorf("receive names no region: addr %#x lkey %#x", addr, lkey)
			return false
		}
	}
	wc := uverbs.WC{WRID: wrid, Opcode: uverbs.WCOpRecv, QPNum: 0x11}
	if s.q.ud {
		grh := make([]byte, 40)
		grh[20] = 0x45
		copy(grh[32:36], src[:])
		msg = append(grh, msg...)
		wc.Flags, wc.SrcQP = uverbs.WCFlagGRH, srcQP
	}
	if len(msg) > len(dst) {
		wc.Status = 1 // IBV_WC_LOC_LEN_ERR
	} else {
		wc.ByteLen = uint32(copy(dst, msg))
	}
	s.completeLocked(simRecvCQ, &wc)
	return true
}

func (s *simKernel) close() {
	s.q.scq.close()
	s.q.rcq.close()
	_ = s.q.prov.Close()
	s.q.pin.Unpin()
	_ = s.vd.ctx.Close()
	_ = unix.Close(s.async)
	for _, p := range s.pipes {
		_ = unix.Close(p[1])
	}
	s.m.Release()
}

// region registers buf on the simulated QP without a kernel: the key is
// what matters to the provider.
func (s *simKernel) region(buf []byte, a fabric.Access) *vmr {
	m := &vmr{q: s.q, buf: buf, handle: 1, lkey: 0x100 + uint32(len(s.q.mrs)), rkey: 0x200, access: a}
	m.live.Store(true)
	s.q.mrs[m] = struct{}{}
	return m
}

func providerQPInit(typ uint8, inline uint32) provider.QPInit {
	return provider.QPInit{Type: typ, Resp: uverbs.CreateQPResp{MaxInline: inline}}
}
