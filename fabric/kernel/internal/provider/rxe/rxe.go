// Package rxe is the user-space provider of the kernel's soft-RoCE driver
// (drivers/infiniband/sw/rxe; uapi rdma_user_rxe.h), what rdma-core's
// providers/rxe does, in pure Go.
//
// rxe shares every queue with user space as one vmalloc'ed buffer, struct
// rxe_queue_buf: a header (log2 of the element size, the index mask, and the
// producer and consumer indices, each in its own cache line) followed by
// 2^n slots. Indices are masked slot numbers; a queue is full when the
// producer is one slot behind the consumer. User space produces send and
// receive entries and consumes completions; the kernel does the opposite.
// CREATE_CQ and CREATE_QP return struct mminfo {offset, size} per queue,
// the mmap offset and length of its buffer on the device file.
//
// A send is a struct rxe_send_wqe in the send queue, followed by its
// scatter/gather list or inline data; POST_SEND without work requests then
// makes rxe process the queue (in the caller's context). Receives need no
// doorbell: rxe takes them from the queue as messages arrive. Completions
// are struct ib_uverbs_wc. Notification requests are REQ_NOTIFY_CQ
// commands. UD sends name an address handle by the number CREATE_AH
// returned in struct rxe_create_ah_resp.
package rxe

import (
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
)

var ne = binary.NativeEndian

// Driver is the rxe provider.
type Driver struct{}

var _ provider.Driver = Driver{}

// Layout of struct rxe_queue_buf.
const (
	hdrLog2Elem  = 0
	hdrIndexMask = 4
	hdrProducer  = 128
	hdrConsumer  = 256
	hdrSize      = 384 // data[]
)

// Sizes of the driver structures.
const (
	mminfoSize    = 16  // struct mminfo {u64 offset; u32 size; u32 pad}
	sendWQESize   = 208 // struct rxe_send_wqe, without its dma.sge[]
	recvWQESize   = 40  // struct rxe_recv_wqe, without its dma.sge[]
	sgeSize       = 16  // struct rxe_sge
	ahRespSize    = 8   // struct rxe_create_ah_resp
	maxInline     = 512 // RXE_MAX_INLINE_DATA
	defaultInline = 256 // the software fabric's default too
)

// Name implements provider.Driver.
func (Driver) Name() string { return "rxe" }

// ContextDriverOut implements provider.Driver: rxe has no context data.
func (Driver) ContextDriverOut() int { return 0 }

// CQDriverOut implements provider.Driver: struct rxe_create_cq_resp.
func (Driver) CQDriverOut() int { return mminfoSize }

// QPDriverOut implements provider.Driver: struct rxe_create_qp_resp
// {rq_mi, sq_mi}.
func (Driver) QPDriverOut() int { return 2 * mminfoSize }

// AHDriverOut implements provider.Driver.
func (Driver) AHDriverOut() int { return ahRespSize }

// RegMRDriver implements provider.Driver: no driver data.
func (Driver) RegMRDriver(byte) ([]byte, int) { return nil, 0 }

// MaxInline implements provider.Driver.
func (Driver) MaxInline(n int) int {
	switch {
	case n <= 0:
		return defaultInline
	case n > maxInline:
		return maxInline
	}
	return n
}

// UD implements provider.Driver.
func (Driver) UD() bool { return true }

// AHNum implements provider.Driver.
func (Driver) AHNum(resp []byte) (uint32, error) {
	if len(resp) < ahRespSize {
		return 0, provider.ErrBadResp
	}
	n := ne.Uint32(resp)
	if n == 0 {
		// Kernels before 5.11 give no number; their providers copy the
		// address vector into each send instead, which this one does not.
		return 0, fmt.Errorf("rxe: kernel gave no address handle number (kernel older than 5.11): %w", syscall.EOPNOTSUPP)
	}
	return n, nil
}

// MMInfo is struct mminfo: where a queue's buffer is mapped.
type MMInfo struct {
	Offset uint64
	Size   uint32
}

// DecodeMMInfo decodes a struct mminfo.
func DecodeMMInfo(b []byte) (MMInfo, error) {
	if len(b) < mminfoSize {
		return MMInfo{}, provider.ErrBadResp
	}
	return MMInfo{Offset: ne.Uint64(b), Size: ne.Uint32(b[8:])}, nil
}

// ring is one struct rxe_queue_buf.
type ring struct {
	mem  []byte // the whole mapping
	data []byte // the slots
	mask uint32
	log2 uint32
}

// newRing checks a mapped queue buffer against its header: the slot count
// a power of two, and every slot of at least minElem bytes inside the
// mapping.
func newRing(mem []byte, minElem int) (ring, error) {
	if len(mem) < hdrSize || !provider.Aligned(mem, 0, 8) {
		return ring{}, fmt.Errorf("rxe: queue mapping of %d bytes: %w", len(mem), provider.ErrBadResp)
	}
	log2 := ne.Uint32(mem[hdrLog2Elem:])
	mask := ne.Uint32(mem[hdrIndexMask:])
	if log2 > 16 || 1<<log2 < minElem || mask&(mask+1) != 0 || mask >= 1<<24 {
		return ring{}, fmt.Errorf("rxe: queue header log2 %d mask %#x: %w", log2, mask, provider.ErrBadResp)
	}
	need := (uint64(mask) + 1) << log2
	if uint64(len(mem)-hdrSize) < need {
		return ring{}, fmt.Errorf("rxe: queue of %d slots of %d bytes in %d bytes: %w", mask+1, 1<<log2, len(mem), provider.ErrBadResp)
	}
	return ring{mem: mem, data: mem[hdrSize : hdrSize+int(need)], mask: mask, log2: log2}, nil
}

func (r *ring) producer() uint32     { return provider.LoadU32(r.mem, hdrProducer) & r.mask }
func (r *ring) consumer() uint32     { return provider.LoadU32(r.mem, hdrConsumer) & r.mask }
func (r *ring) setProducer(v uint32) { provider.StoreU32(r.mem, hdrProducer, v) }
func (r *ring) setConsumer(v uint32) { provider.StoreU32(r.mem, hdrConsumer, v) }
func (r *ring) elem() int            { return 1 << r.log2 }
func (r *ring) slots() int           { return int(r.mask) + 1 }

// slot returns slot i's bytes.
func (r *ring) slot(i uint32) []byte {
	off := int(i&r.mask) << r.log2
	return r.data[off : off+1<<r.log2 : off+1<<r.log2]
}

// mapRing maps and checks one queue.
func mapRing(m provider.Mapper, mi MMInfo, minElem int) (ring, error) {
	if mi.Size < hdrSize {
		return ring{}, fmt.Errorf("rxe: queue size %d: %w", mi.Size, provider.ErrBadResp)
	}
	mem, err := m.Mmap(mi.Offset, int(mi.Size))
	if err != nil {
		return ring{}, err
	}
	r, err := newRing(mem, minElem)
	if err != nil {
		_ = m.Munmap(mem)
		return ring{}, err
	}
	return r, nil
}
