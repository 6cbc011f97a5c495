package kernel

import (
	"crypto/rand"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// vmr is a memory region registered on a QP's protection domain. The
// buffer is pinned (runtime.Pinner) and referenced from registration to
// DeregMR: the device reads and writes it by address.
type vmr struct {
	q      *vqp
	buf    []byte
	handle uint32
	lkey   uint32
	rkey   uint32
	access fabric.Access
	pin    runtime.Pinner
	live   atomic.Bool
}

var _ fabric.MR = (*vmr)(nil)

// Bytes implements fabric.MR.
func (m *vmr) Bytes() []byte { return m.buf }

// LKey implements fabric.MR.
func (m *vmr) LKey() uint32 { return m.lkey }

// RKey implements fabric.MR.
func (m *vmr) RKey() uint32 { return m.rkey }

// Addr implements fabric.MR: the buffer's virtual address, which is what the
// region is registered at (hca_va), so peers name it directly.
func (m *vmr) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(m.buf)))) }

// Access implements fabric.MR.
func (m *vmr) Access() fabric.Access { return m.access }

// contains reports whether b lies within the region.
func (m *vmr) contains(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(m.buf)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= base && p-base <= uintptr(len(m.buf)) && uintptr(len(b)) <= uintptr(len(m.buf))-(p-base)
}

// RegMR implements fabric.QP: REG_MR on the QP's protection domain, with the
// access flags as ibv_access_flags.
func (q *vqp) RegMR(buf []byte, access fabric.Access) (fabric.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("kernel: register an empty buffer: %w", syscall.EINVAL)
	}
	if access&^(fabric.AccessLocalWrite|fabric.AccessRemoteWrite|fabric.AccessRemoteRead) != 0 {
		return nil, fmt.Errorf("kernel: access flags %#x: %w", uint32(access), syscall.EINVAL)
	}
	q.mrMu.Lock()
	defer q.mrMu.Unlock()
	if q.mrs == nil {
		return nil, fmt.Errorf("kernel: reg_mr: QP destroyed: %w", syscall.EINVAL)
	}
	m := &vmr{q: q, buf: buf, access: access}
	m.pin.Pin(unsafe.SliceData(buf))
	var key [1]byte
	_, _ = rand.Read(key[:])
	in, outLen := q.vd.drv.RegMRDriver(key[0])
	addr := m.Addr()
	resp, err := q.vd.ctx.Exec(&uverbs.RegMR{Start: addr, Length: uint64(len(buf)), HCAVA: addr, PD: q.pd,
		Access: uint32(access), Driver: in, DriverOut: outLen})
	if err != nil {
		m.pin.Unpin()
		return nil, fmt.Errorf("kernel: reg_mr of %d bytes: %w", len(buf), err)
	}
	var r uverbs.RegMRResp
	_ = r.Decode(resp)
	m.handle, m.lkey, m.rkey = r.Handle, r.LKey, r.RKey
	m.live.Store(true)
	q.mrs[m] = struct{}{}
	return m, nil
}

// DeregMR implements fabric.QP: once it returns the device no longer reaches
// the memory; work requests still naming the region fail.
func (q *vqp) DeregMR(x fabric.MR) error {
	m, ok := x.(*vmr)
	if !ok || m == nil || m.q != q {
		return fmt.Errorf("kernel: dereg_mr: region not registered on this QP: %w", syscall.EINVAL)
	}
	q.mrMu.Lock()
	defer q.mrMu.Unlock()
	if _, ok := q.mrs[m]; !ok {
		return fmt.Errorf("kernel: dereg_mr: region not registered: %w", syscall.EINVAL)
	}
	delete(q.mrs, m)
	return m.dereg()
}

// dereg releases the region. q.mrMu is held.
func (m *vmr) dereg() error {
	m.live.Store(false)
	_, err := m.q.vd.ctx.Exec(uverbs.DeregMR(m.handle))
	m.pin.Unpin()
	if err != nil {
		return fmt.Errorf("kernel: dereg_mr: %w", err)
	}
	return nil
}

// region returns the live region of this QP that x is and that holds b.
func (q *vqp) region(x fabric.MR, b []byte) (*vmr, error) {
	m, ok := x.(*vmr)
	switch {
	case !ok || m == nil || m.q != q:
		return nil, einval("memory region not registered on this QP")
	case !m.live.Load():
		return nil, einval("memory region deregistered")
	case !m.contains(b):
		return nil, einval("buffer outside its memory region")
	}
	return m, nil
}
