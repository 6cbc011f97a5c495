package siw

import (
	"bytes"
	"encoding/binary"
	"errors"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider/providertest"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// The kernel side is simulated from siw-abi.h and siw_qp.c/siw_verbs.c,
// independently of the provider: struct siw_sqe (120 bytes: 0 id, 8 flags
// u16, 10 num_sge, 11 opcode, 12 rkey, 16 raddr, 24 sge[6]), struct
// siw_rqe (112: 0 id, 8 flags, 10 num_sge, 16 sge[6]), struct siw_cqe (32:
// 0 id, 8 flags u8, 9 opcode, 10 status u16, 12 bytes, 16 imm, 24 qp_id),
// struct siw_cq_ctrl after the completions.

func h16(b []byte, off int, v uint16) { binary.NativeEndian.PutUint16(b[off:], v) }
func h32(b []byte, off int, v uint32) { binary.NativeEndian.PutUint32(b[off:], v) }
func h64(b []byte, off int, v uint64) { binary.NativeEndian.PutUint64(b[off:], v) }
func g32(b []byte, off int) uint32    { return binary.NativeEndian.Uint32(b[off:]) }
func g64(b []byte, off int) uint64    { return binary.NativeEndian.Uint64(b[off:]) }

func ld(b []byte, off int) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off]))) }
func st(b []byte, off int, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

// kernel is siw's side of one QP and its CQ.
type kernel struct {
	sq, rq, cq    []byte
	nsq, nrq, ncq uint32
	sqGet, rqGet  uint32
	cqPut         uint32
	notified      int
}

func (k *kernel) sqe(i uint32) []byte { o := int(i%k.nsq) * 120; return k.sq[o : o+120] }
func (k *kernel) rqe(i uint32) []byte { o := int(i%k.nrq) * 112; return k.rq[o : o+112] }
func (k *kernel) cqe(i uint32) []byte { o := int(i%k.ncq) * 32; return k.cq[o : o+32] }

// takeSend returns a copy of the next valid send entry and recycles it,
// as siw does after completing it; nil if none is valid.
func (k *kernel) takeSend() []byte {
	e := k.sqe(k.sqGet)
	if ld(e, 8)&1 == 0 {
		return nil
	}
	c := append([]byte(nil), e...)
	st(e, 8, 0)
	k.sqGet++
	return c
}

func (k *kernel) takeRecv() []byte {
	e := k.rqe(k.rqGet)
	if ld(e, 8)&1 == 0 {
		return nil
	}
	c := append([]byte(nil), e...)
	st(e, 8, 0)
	k.rqGet++
	return c
}

// complete writes a completion as siw_sqe_complete does, honouring the
// control word's notification request; false when the slot is still the
// user's (siw's CQ overflow).
func (k *kernel) complete(id uint64, op uint8, status uint16, n uint32, solicited bool) bool {
	e := k.cqe(k.cqPut)
	if ld(e, 8)&0xFF != 0 {
		return false
	}
	h64(e, 0, id)
	h16(e, 10, status)
	e[9] = op
	h32(e, 12, n)
	h64(e, 16, 0)
	h64(e, 24, 77)
	st(e, 8, ld(e, 8)&^0xFF|1)
	k.cqPut++
	ctrl := int(k.ncq) * 32
	if f := ld(k.cq, ctrl); f&2 != 0 || (f&1 != 0 && solicited) {
		st(k.cq, ctrl, 0)
		k.notified++
	}
	return true
}

type fixture struct {
	m  *providertest.Mapper
	k  *kernel
	cq provider.CQ
	qp provider.QP
}

func newFixture(t testing.TB, nsq, nrq, ncq uint32, sigAll bool) *fixture {
	t.Helper()
	m := providertest.NewMapper()
	t.Cleanup(m.Release)
	k := &kernel{nsq: nsq, nrq: nrq, ncq: ncq}
	k.cq = m.Add(0x1000, int(ncq)*32+8)
	k.sq = m.Add(0x2000, int(nsq)*120)
	k.rq = m.Add(0x3000, int(nrq)*112)
	cqr := make([]byte, 16)
	h32(cqr, 0, 0xabc)
	h32(cqr, 4, ncq)
	h64(cqr, 8, 0x1000)
	cq, err := Driver{}.NewCQ(m, uverbs.CreateCQResp{}, cqr)
	if err != nil {
		t.Fatal(err)
	}
	qpr := make([]byte, 32)
	h32(qpr, 0, 5)
	h32(qpr, 4, nsq)
	h32(qpr, 8, nrq)
	h64(qpr, 16, 0x2000)
	h64(qpr, 24, 0x3000)
	qp, err := Driver{}.NewQP(m, provider.QPInit{Type: uverbs.QPTypeRC, SigAll: sigAll, Resp: uverbs.CreateQPResp{MaxInline: 80}}, qpr)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{m: m, k: k, cq: cq, qp: qp}
	t.Cleanup(func() {
		_ = f.qp.Close()
		_ = f.cq.Close()
		if n := m.Mapped(); n != 0 {
			t.Errorf("%d mappings left", n)
		}
	})
	return f
}

func TestSQEImage(t *testing.T) {
	f := newFixture(t, 4, 4, 8, false)
	copy(f.k.sqe(0), bytes.Repeat([]byte{0xA5}, 120))
	h32(f.k.sqe(0), 8, 0) // free slot
	wr := provider.SendWR{WRID: 0x0102030405060708, Opcode: provider.OpRDMARead, Flags: provider.SendSignaled,
		SGE: provider.SGE{Addr: 0x7f0000100000, Length: 65536, LKey: 0x2201}, NumSGE: 1,
		RemoteAddr: 0x7f0000200000, RKey: 0x3302}
	db, err := f.qp.PostSend(&wr)
	if err != nil || !db {
		t.Fatalf("post: %v doorbell %v", err, db)
	}
	e := f.k.takeSend()
	want := make([]byte, 120)
	h64(want, 0, 0x0102030405060708)
	h16(want, 8, 1|4) // VALID|SIGNALLED
	want[10] = 1      // num_sge
	want[11] = 1      // SIW_OP_READ
	h32(want, 12, 0x3302)
	h64(want, 16, 0x7f0000200000)
	h64(want, 24, 0x7f0000100000)
	h32(want, 32, 65536)
	h32(want, 36, 0x2201)
	if !bytes.Equal(e, want) {
		t.Fatalf("sqe\n got  %x\n want %x", e, want)
	}
}

func TestSQEInlineAndSendWithInv(t *testing.T) {
	f := newFixture(t, 4, 4, 8, true)
	data := bytes.Repeat([]byte{'x'}, 80)
	if _, err := f.qp.PostSend(&provider.SendWR{WRID: 1, Opcode: provider.OpSend, Flags: provider.SendInline | provider.SendSolicited, Inline: data}); err != nil {
		t.Fatal(err)
	}
	e := f.k.takeSend()
	if binary.NativeEndian.Uint16(e[8:]) != 1|2|4|8 || e[10] != 1 || e[11] != 3 || g32(e, 32) != 80 || !bytes.Equal(e[40:120], data) {
		t.Fatalf("inline sqe: flags %#x nsge %d op %d len %d", binary.NativeEndian.Uint16(e[8:]), e[10], e[11], g32(e, 32))
	}
	if _, err := f.qp.PostSend(&provider.SendWR{Opcode: provider.OpSendWithInv, Ex: 0xABCD01, NumSGE: 1}); err != nil {
		t.Fatal(err)
	}
	if e := f.k.takeSend(); e[11] != 5 || g32(e, 12) != 0xABCD01 {
		t.Fatalf("send with invalidate: op %d rkey %#x", e[11], g32(e, 12))
	}
	for _, bad := range []provider.SendWR{
		{Opcode: provider.OpSend, Flags: provider.SendInline, Inline: make([]byte, 81)},
		{Opcode: provider.OpSendWithImm},
		{Opcode: provider.OpRDMAWriteWithImm},
		{Opcode: provider.OpRDMARead, NumSGE: 0},
		{Opcode: provider.OpSend, NumSGE: 2},
	} {
		if _, err := f.qp.PostSend(&bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
}

func TestDoorbellOnlyWhenIdle(t *testing.T) {
	f := newFixture(t, 4, 4, 8, false)
	wr := provider.SendWR{Opcode: provider.OpSend}
	if db, _ := f.qp.PostSend(&wr); !db {
		t.Fatal("first send: no doorbell")
	}
	// The kernel still holds the first: no doorbell for the second.
	if db, _ := f.qp.PostSend(&wr); db {
		t.Fatal("doorbell while the previous entry is valid")
	}
	f.k.takeSend()
	f.k.takeSend()
	if db, _ := f.qp.PostSend(&wr); !db {
		t.Fatal("no doorbell on an idle queue")
	}
	f.k.takeSend()
	for k := 0; k < 4; k++ {
		if _, err := f.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.qp.PostSend(&wr); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("full: %v", err)
	}
}

func TestRecvAndCompletions(t *testing.T) {
	f := newFixture(t, 4, 4, 4, false)
	for k := 0; k < 4; k++ {
		if err := f.qp.PostRecv(&provider.RecvWR{WRID: uint64(k), SGE: provider.SGE{Addr: 0x1000, Length: 64, LKey: 3}, NumSGE: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.qp.PostRecv(&provider.RecvWR{}); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("full: %v", err)
	}
	e := f.k.takeRecv()
	if g64(e, 0) != 0 || binary.NativeEndian.Uint16(e[8:]) != 1 || e[10] != 1 || g64(e, 16) != 0x1000 || g32(e, 24) != 64 || g32(e, 28) != 3 {
		t.Fatalf("rqe %x", e)
	}
	// Completions, with the notification armed and one-shot.
	if !f.cq.Empty() || f.cq.Arm(false) {
		t.Fatal("empty queue or Arm wants a command")
	}
	f.k.complete(0, 8, 0, 40, false)  // receive, success
	f.k.complete(9, 0, 7, 0, false)   // write, remote access error
	f.k.complete(10, 1, 4, 0, false)  // read, flushed
	f.k.complete(11, 99, 0, 0, false) // unknown opcode
	if f.k.complete(12, 3, 0, 0, false) {
		t.Fatal("kernel overwrote a valid completion")
	}
	if f.k.notified != 1 {
		t.Fatalf("%d notifications", f.k.notified)
	}
	out := make([]provider.WC, 8)
	n := f.cq.Poll(out)
	want := []provider.WC{
		{WRID: 0, Opcode: uverbs.WCOpRecv, Status: provider.StatusSuccess, ByteLen: 40, QPNum: 77},
		{WRID: 9, Opcode: uverbs.WCOpRDMAWrite, Status: provider.StatusRemAccessErr, QPNum: 77},
		{WRID: 10, Opcode: uverbs.WCOpRDMARead, Status: provider.StatusWRFlushErr, QPNum: 77},
		{WRID: 11, Status: provider.StatusGeneralErr, QPNum: 77},
	}
	if n != 4 {
		t.Fatalf("polled %d", n)
	}
	for k := range want {
		if out[k] != want[k] {
			t.Errorf("wc %d: %+v, want %+v", k, out[k], want[k])
		}
	}
	if !f.cq.Empty() {
		t.Fatal("not empty after poll")
	}
	// Solicited-only arming ignores plain completions.
	f.cq.Arm(true)
	f.k.complete(13, 3, 0, 0, false)
	f.k.complete(14, 3, 0, 0, true)
	if f.k.notified != 2 {
		t.Fatalf("%d notifications after a solicited completion", f.k.notified)
	}
}

func TestBadResponses(t *testing.T) {
	m := providertest.NewMapper()
	defer m.Release()
	cqr := make([]byte, 16)
	for _, c := range []struct {
		n   uint32
		key uint64
	}{{0, 0x1000}, {3, 0x1000}, {1 << 21, 0x1000}} {
		h32(cqr, 4, c.n)
		h64(cqr, 8, c.key)
		if _, err := (Driver{}).NewCQ(m, uverbs.CreateCQResp{}, cqr); !errors.Is(err, provider.ErrBadResp) {
			t.Errorf("%+v: %v", c, err)
		}
	}
	if _, err := (Driver{}).NewQP(m, provider.QPInit{Type: uverbs.QPTypeUD}, make([]byte, 32)); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("UD QP: %v", err)
	}
	// 0x90000, siw's "invalid key", is a valid key in a successful response.
	m.Add(0x90000, 4*32+8)
	h32(cqr, 4, 4)
	h64(cqr, 8, 0x90000)
	c, err := (Driver{}).NewCQ(m, uverbs.CreateCQResp{}, cqr)
	if err != nil {
		t.Fatalf("CQ at key 0x90000: %v", err)
	}
	_ = c.Close()
}

func TestNoAllocation(t *testing.T) {
	f := newFixture(t, 64, 64, 64, false)
	wr := provider.SendWR{Opcode: provider.OpSend, NumSGE: 1, Flags: provider.SendSignaled}
	rwr := provider.RecvWR{NumSGE: 1}
	out := make([]provider.WC, 4)
	allocs := testing.AllocsPerRun(200, func() {
		_, _ = f.qp.PostSend(&wr)
		_ = f.qp.PostRecv(&rwr)
		f.k.takeSend()
		f.k.takeRecv()
		f.k.complete(1, 3, 0, 0, false)
		f.cq.Poll(out)
	})
	// takeSend/takeRecv copy (test-side); the provider itself adds nothing.
	if allocs > 2 {
		t.Fatalf("%v allocations per message", allocs)
	}
}

// FuzzCQE translates arbitrary completion entries: never a panic, and
// always a status libibverbs knows.
func FuzzCQE(f *testing.F) {
	f.Add(make([]byte, 32))
	f.Add(bytes.Repeat([]byte{0xFF}, 40))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e CQE
		if err := DecodeCQE(b, &e); err != nil {
			if len(b) >= 32 {
				t.Fatal(err)
			}
			return
		}
		var w provider.WC
		e.ToWC(&w)
		switch w.Status {
		case provider.StatusSuccess, provider.StatusLocLenErr, provider.StatusLocProtErr, provider.StatusLocQPOpErr,
			provider.StatusWRFlushErr, provider.StatusBadRespErr, provider.StatusLocAccessErr,
			provider.StatusRemAccessErr, provider.StatusRemInvReqErr, provider.StatusGeneralErr:
		default:
			t.Fatalf("status %d", w.Status)
		}
	})
}

// FuzzCQ polls a queue of arbitrary memory.
func FuzzCQ(f *testing.F) {
	f.Add(bytes.Repeat([]byte{1}, 300))
	f.Fuzz(func(t *testing.T, data []byte) {
		m := providertest.NewMapper()
		defer m.Release()
		mem := m.Add(0x1000, 8*32+8)
		copy(mem, data)
		cqr := make([]byte, 16)
		h32(cqr, 4, 8)
		h64(cqr, 8, 0x1000)
		c, err := Driver{}.NewCQ(m, uverbs.CreateCQResp{}, cqr)
		if err != nil {
			t.Fatal(err)
		}
		n := c.Poll(make([]provider.WC, 16))
		if n > 16 || (n < 8 && !c.Empty()) {
			t.Fatalf("polled %d, empty %v", n, c.Empty())
		}
		_ = c.Close()
	})
}
