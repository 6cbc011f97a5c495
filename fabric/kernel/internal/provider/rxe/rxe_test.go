package rxe

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

// The kernel side of the rings is simulated here from rdma_user_rxe.h and
// rxe_queue.h, independently of the provider: struct rxe_queue_buf with
// log2_elem_size at 0, index_mask at 4, producer_index at 128,
// consumer_index at 256, data at 384; full when prod+1 == cons (masked).

func h32(b []byte, off int, v uint32) { binary.NativeEndian.PutUint32(b[off:], v) }
func g32(b []byte, off int) uint32    { return binary.NativeEndian.Uint32(b[off:]) }
func g64(b []byte, off int) uint64    { return binary.NativeEndian.Uint64(b[off:]) }

func ld(b []byte, off int) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off]))) }
func st(b []byte, off int, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&b[off])), v)
}

// kring is a queue as rxe's kernel side sees it.
type kring struct {
	mem  []byte
	mask uint32
	log2 uint32
}

func newKRing(m *providertest.Mapper, key uint64, slots, elem int) (*kring, []byte) {
	log2 := uint32(0)
	for 1<<log2 < elem {
		log2++
	}
	size := 384 + slots<<log2
	mem := m.Add(key, size)
	h32(mem, 0, log2)
	h32(mem, 4, uint32(slots-1))
	mi := make([]byte, 16)
	binary.NativeEndian.PutUint64(mi, key)
	h32(mi, 8, uint32(size))
	return &kring{mem: mem, mask: uint32(slots - 1), log2: log2}, mi
}

func (k *kring) slot(i uint32) []byte {
	off := 384 + int(i&k.mask)<<k.log2
	return k.mem[off : off+1<<k.log2]
}

// produce adds a completion as rxe's kernel does; false when full.
func (k *kring) produce(wc *uverbs.WC) bool {
	prod, cons := ld(k.mem, 128), ld(k.mem, 256)
	if (prod+1)&k.mask == cons {
		return false
	}
	_ = wc.Encode(k.slot(prod))
	st(k.mem, 128, (prod+1)&k.mask)
	return true
}

// consume takes the oldest entry a user produced; nil when empty.
func (k *kring) consume() []byte {
	prod, cons := ld(k.mem, 128), ld(k.mem, 256)
	if prod == cons {
		return nil
	}
	e := append([]byte(nil), k.slot(cons)...)
	st(k.mem, 256, (cons+1)&k.mask)
	return e
}

type fixture struct {
	m      *providertest.Mapper
	cq     provider.CQ
	kcq    *kring
	qp     provider.QP
	ksq    *kring
	krq    *kring
	closed bool
}

func newFixture(t testing.TB, qpType uint8, sqSlots, rqSlots, cqSlots int) *fixture {
	t.Helper()
	m := providertest.NewMapper()
	t.Cleanup(m.Release)
	kcq, cqmi := newKRing(m, 0x1000, cqSlots, 128)
	cq, err := Driver{}.NewCQ(m, uverbs.CreateCQResp{}, cqmi)
	if err != nil {
		t.Fatal(err)
	}
	ksq, sqmi := newKRing(m, 0x2000, sqSlots, sendWQESize+64) // 4 elements or 64 inline bytes: 512-byte slots
	krq, rqmi := newKRing(m, 0x3000, rqSlots, recvWQESize+16)
	drv := append(append([]byte(nil), rqmi...), sqmi...)
	qp, err := Driver{}.NewQP(m, provider.QPInit{Type: qpType, Resp: uverbs.CreateQPResp{MaxInline: 64}}, drv)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{m: m, cq: cq, kcq: kcq, qp: qp, ksq: ksq, krq: krq}
	t.Cleanup(func() {
		if !f.closed {
			f.close(t)
		}
	})
	return f
}

func (f *fixture) close(t testing.TB) {
	t.Helper()
	f.closed = true
	if err := f.qp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.cq.Close(); err != nil {
		t.Fatal(err)
	}
	if n := f.m.Mapped(); n != 0 {
		t.Fatalf("%d mappings left", n)
	}
}

func TestSendWQEImage(t *testing.T) {
	f := newFixture(t, uverbs.QPTypeRC, 8, 8, 16)
	wr := provider.SendWR{WRID: 0x1122334455667788, Opcode: provider.OpRDMAWrite,
		Flags: provider.SendSignaled | provider.SendSolicited, SGE: provider.SGE{Addr: 0x7f00aa000000, Length: 4096, LKey: 0x1234},
		NumSGE: 1, RemoteAddr: 0x7f00bb000010, RKey: 0x5678}
	// Dirty the slot: every byte of the header must be written or cleared.
	copy(f.ksq.slot(0), bytes.Repeat([]byte{0xA5}, 512))
	db, err := f.qp.PostSend(&wr)
	if err != nil || !db {
		t.Fatalf("post: %v, doorbell %v", err, db)
	}
	e := f.ksq.consume()
	if e == nil {
		t.Fatal("producer index not advanced")
	}
	want := make([]byte, 224)
	binary.NativeEndian.PutUint64(want[0:], 0x1122334455667788)
	h32(want, 12, 0)                                          // IB_WR_RDMA_WRITE
	h32(want, 16, 2|4)                                        // signaled|solicited
	binary.NativeEndian.PutUint64(want[24:], 0x7f00bb000010)  // wr.rdma.remote_addr
	h32(want, 32, 0x5678)                                     // wr.rdma.rkey
	binary.NativeEndian.PutUint64(want[152:], 0x7f00bb000010) // iova
	h32(want, 176, 0)                                         // ssn
	h32(want, 184, 4096)                                      // dma.length
	h32(want, 188, 4096)                                      // dma.resid
	h32(want, 196, 1)                                         // dma.num_sge
	binary.NativeEndian.PutUint64(want[208:], 0x7f00aa000000)
	h32(want, 216, 4096)
	h32(want, 220, 0x1234)
	if !bytes.Equal(e[:224], want) {
		t.Fatalf("wqe\n got  %x\n want %x", e[:224], want)
	}
	// The next send gets the next ssn.
	wr.Opcode = provider.OpSend
	if _, err := f.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	e = f.ksq.consume()
	if g32(e, 176) != 1 || g32(e, 12) != provider.OpSend || g64(e, 24) != 0 || g64(e, 152) != 0 {
		t.Fatalf("send: ssn %d opcode %d remote %x iova %x", g32(e, 176), g32(e, 12), g64(e, 24), g64(e, 152))
	}
}

func TestInlineAndUDWQE(t *testing.T) {
	f := newFixture(t, uverbs.QPTypeUD, 8, 8, 16)
	data := []byte("inline payload")
	wr := provider.SendWR{WRID: 7, Opcode: provider.OpSend, Flags: provider.SendInline, Inline: data,
		AHNum: 3, RemoteQPN: 0x11, RemoteQKey: 0x01234567}
	if _, err := f.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	e := f.ksq.consume()
	if g32(e, 24) != 0x11 || g32(e, 28) != 0x01234567 || g32(e, 36) != 3 || g32(e, 16) != 8 {
		t.Fatalf("ud fields: qpn %x qkey %x ah %d flags %d", g32(e, 24), g32(e, 28), g32(e, 36), g32(e, 16))
	}
	if g32(e, 184) != uint32(len(data)) || g32(e, 196) != 0 || !bytes.Equal(e[208:208+len(data)], data) {
		t.Fatalf("inline: length %d num_sge %d data %q", g32(e, 184), g32(e, 196), e[208:208+len(data)])
	}
	// UD QPs carry Sends only; inline beyond the cap and RDMA Reads inline are refused.
	for _, bad := range []provider.SendWR{
		{Opcode: provider.OpRDMAWrite, NumSGE: 1},
		{Opcode: provider.OpSend, Flags: provider.SendInline, Inline: make([]byte, 65)},
		{Opcode: provider.OpSend, NumSGE: 2},
		{Opcode: 77},
	} {
		if _, err := f.qp.PostSend(&bad); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("%+v: %v, want EINVAL", bad, err)
		}
	}
	if f.ksq.consume() != nil {
		t.Fatal("a refused request reached the queue")
	}
}

func TestRecvWQEImage(t *testing.T) {
	f := newFixture(t, uverbs.QPTypeRC, 8, 8, 16)
	copy(f.krq.slot(0), bytes.Repeat([]byte{0xA5}, 64))
	if err := f.qp.PostRecv(&provider.RecvWR{WRID: 99, SGE: provider.SGE{Addr: 0x1000, Length: 256, LKey: 5}, NumSGE: 1}); err != nil {
		t.Fatal(err)
	}
	e := f.krq.consume()
	want := make([]byte, 56)
	binary.NativeEndian.PutUint64(want[0:], 99)
	h32(want, 16, 256) // dma.length
	h32(want, 20, 256) // dma.resid
	h32(want, 28, 1)   // dma.num_sge
	binary.NativeEndian.PutUint64(want[40:], 0x1000)
	h32(want, 48, 256)
	h32(want, 52, 5)
	if !bytes.Equal(e[:56], want) {
		t.Fatalf("rqe\n got  %x\n want %x", e[:56], want)
	}
}

func TestQueuesFull(t *testing.T) {
	f := newFixture(t, uverbs.QPTypeRC, 4, 4, 16)
	if f.qp.SendDepth() != 3 || f.qp.RecvDepth() != 3 {
		t.Fatalf("depths %d %d", f.qp.SendDepth(), f.qp.RecvDepth())
	}
	wr := provider.SendWR{Opcode: provider.OpSend}
	for k := 0; k < 3; k++ {
		if _, err := f.qp.PostSend(&wr); err != nil {
			t.Fatalf("send %d: %v", k, err)
		}
		if err := f.qp.PostRecv(&provider.RecvWR{}); err != nil {
			t.Fatalf("recv %d: %v", k, err)
		}
	}
	if _, err := f.qp.PostSend(&wr); !errors.Is(err, provider.ErrQueueFull) || !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("full send queue: %v", err)
	}
	if err := f.qp.PostRecv(&provider.RecvWR{}); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("full receive queue: %v", err)
	}
	// The kernel takes one of each: one more fits, around the ring.
	f.ksq.consume()
	f.krq.consume()
	if _, err := f.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	if err := f.qp.PostRecv(&provider.RecvWR{WRID: 42}); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 2; k++ {
		f.krq.consume()
	}
	if e := f.krq.consume(); g64(e, 0) != 42 {
		t.Fatalf("wrapped receive: wr_id %d", g64(e, 0))
	}
}

func TestCQPollOrderAndWrap(t *testing.T) {
	f := newFixture(t, uverbs.QPTypeRC, 4, 4, 8) // 7 usable slots
	if f.cq.Depth() != 7 || !f.cq.Empty() || !f.cq.Arm(false) {
		t.Fatalf("depth %d empty %v", f.cq.Depth(), f.cq.Empty())
	}
	out := make([]provider.WC, 5)
	next, seen := uint64(0), uint64(0)
	for round := 0; round < 20; round++ {
		for k := 0; k < 1+round%7; k++ {
			wc := uverbs.WC{WRID: next, Status: uint32(next % 3), Opcode: uverbs.WCOpRecv, ByteLen: uint32(next), QPNum: 9}
			if !f.kcq.produce(&wc) {
				break
			}
			next++
		}
		for !f.cq.Empty() {
			n := f.cq.Poll(out[:1+round%5])
			if n == 0 {
				t.Fatal("Poll found nothing in a non-empty queue")
			}
			for _, wc := range out[:n] {
				if wc.WRID != seen || wc.ByteLen != uint32(seen) || wc.Opcode != uverbs.WCOpRecv || wc.QPNum != 9 {
					t.Fatalf("completion %+v, want wr_id %d", wc, seen)
				}
				seen++
			}
		}
	}
	if seen != next || seen < 40 {
		t.Fatalf("polled %d of %d", seen, next)
	}
	// A full queue takes exactly Depth completions.
	k := 0
	for f.kcq.produce(&uverbs.WC{WRID: uint64(k)}) {
		k++
	}
	if k != 7 {
		t.Fatalf("queue took %d", k)
	}
	if n := f.cq.Poll(make([]provider.WC, 16)); n != 7 {
		t.Fatalf("polled %d", n)
	}
}

func TestBadMappings(t *testing.T) {
	m := providertest.NewMapper()
	defer m.Release()
	// Header inconsistent with the mapping: more slots than bytes.
	_, mi := newKRing(m, 0x1000, 4, 64)
	mem, _ := m.Mmap(0x1000, 384)
	h32(mem, 4, 1023)
	if _, err := (Driver{}).NewCQ(m, uverbs.CreateCQResp{}, mi); !errors.Is(err, provider.ErrBadResp) {
		t.Fatalf("oversized ring: %v", err)
	}
	h32(mem, 4, 6) // not a power of two minus one
	if _, err := (Driver{}).NewCQ(m, uverbs.CreateCQResp{}, mi); !errors.Is(err, provider.ErrBadResp) {
		t.Fatalf("bad mask: %v", err)
	}
	if _, err := (Driver{}).NewCQ(m, uverbs.CreateCQResp{}, mi[:8]); !errors.Is(err, provider.ErrBadResp) {
		t.Fatalf("short response: %v", err)
	}
	m.FailMmap = syscall.ENOMEM
	h32(mem, 4, 3)
	if _, err := (Driver{}).NewCQ(m, uverbs.CreateCQResp{}, mi); !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("mmap failure: %v", err)
	}
	if m.Mapped() != 0 {
		t.Fatalf("%d mappings leaked", m.Mapped()-0)
	}
}

func TestAHNum(t *testing.T) {
	b := make([]byte, 8)
	h32(b, 0, 12)
	if n, err := (Driver{}).AHNum(b); n != 12 || err != nil {
		t.Fatalf("%d %v", n, err)
	}
	if _, err := (Driver{}).AHNum(make([]byte, 8)); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("old kernel: %v", err)
	}
}

func TestNoAllocation(t *testing.T) {
	f := newFixture(t, uverbs.QPTypeRC, 64, 64, 64)
	wr := provider.SendWR{Opcode: provider.OpSend, NumSGE: 1, SGE: provider.SGE{Length: 8}}
	rwr := provider.RecvWR{NumSGE: 1}
	out := make([]provider.WC, 4)
	wc := uverbs.WC{}
	allocs := testing.AllocsPerRun(200, func() {
		_, _ = f.qp.PostSend(&wr)
		_ = f.qp.PostRecv(&rwr)
		f.ksq.mem[256] = f.ksq.mem[128] // the kernel took them
		copy(f.krq.mem[256:260], f.krq.mem[128:132])
		f.kcq.produce(&wc)
		f.cq.Poll(out)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per message", allocs)
	}
}

// FuzzCQ polls a completion queue whose memory (indices included) is
// arbitrary: Poll must stay inside the ring and never panic.
func FuzzCQ(f *testing.F) {
	f.Add(uint32(3), uint32(0), []byte{1, 2, 3})
	f.Add(uint32(0xFFFFFFFF), uint32(5), bytes.Repeat([]byte{0xFF}, 512))
	f.Fuzz(func(t *testing.T, prod, cons uint32, data []byte) {
		m := providertest.NewMapper()
		defer m.Release()
		k, mi := newKRing(m, 0x1000, 8, 64)
		copy(k.mem[384:], data)
		h32(k.mem, 128, prod)
		h32(k.mem, 256, cons)
		c, err := Driver{}.NewCQ(m, uverbs.CreateCQResp{}, mi)
		if err != nil {
			t.Fatal(err)
		}
		out := make([]provider.WC, 16)
		total := 0
		for i := 0; i < 4 && !c.Empty(); i++ {
			total += c.Poll(out)
		}
		if total > 7*4 {
			t.Fatalf("polled %d", total)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}
