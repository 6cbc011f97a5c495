package soft

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/id"
)

// mr is a registered memory region. Its STag is index<<8 | key, as siw
// forms them, and its address is a per-region virtual base, so tagged
// offsets from a peer are checked against [addr, addr+len).
type mr struct {
	buf    []byte
	stag   uint32
	addr   uint64
	access id.Access
	valid  atomic.Bool
}

func (m *mr) Bytes() []byte     { return m.buf }
func (m *mr) LKey() uint32      { return m.stag }
func (m *mr) RKey() uint32      { return m.stag }
func (m *mr) Addr() uint64      { return m.addr }
func (m *mr) Access() id.Access { return m.access }

// contains reports whether b lies within the region.
func (m *mr) contains(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	return sliceWithin(b, m.buf)
}

// mrTable maps STags to regions. Regions are addressed by index (stag>>8);
// the low byte is a key that changes each time an index is reused.
type mrTable struct {
	mu   sync.RWMutex
	regs []*mr
	free []uint32
	key  uint8
}

// reg registers buf with the given access.
func (t *mrTable) reg(buf []byte, access id.Access) (*mr, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("soft: register an empty buffer: %w", syscall.EINVAL)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var idx uint32
	if n := len(t.free); n > 0 {
		idx, t.free = t.free[n-1], t.free[:n-1]
	} else {
		t.regs = append(t.regs, nil)
		idx = uint32(len(t.regs)) // index 0 is never used: STag 0 names no region
		if idx >= 1<<24 {
			return nil, fmt.Errorf("soft: too many memory regions: %w", syscall.ENOMEM)
		}
	}
	t.key++
	m := &mr{buf: buf, stag: idx<<8 | uint32(t.key), addr: uint64(idx) << 32, access: access}
	m.valid.Store(true)
	t.regs[idx-1] = m
	return m, nil
}

// lookup returns the live region an STag names.
func (t *mrTable) lookup(stag uint32) *mr {
	if m := t.named(stag); m != nil && m.valid.Load() {
		return m
	}
	return nil
}

// named returns the registered region an STag names, valid or invalidated.
func (t *mrTable) named(stag uint32) *mr {
	idx := stag >> 8
	t.mu.RLock()
	defer t.mu.RUnlock()
	if idx == 0 || int(idx) > len(t.regs) {
		return nil
	}
	if m := t.regs[idx-1]; m != nil && m.stag == stag {
		return m
	}
	return nil
}

// invalidate makes the region stag names invalid for any further access,
// remote or local, as a peer's Send with Invalidate does; the region stays
// registered until dereg. Invalidating an invalid region succeeds, as the
// verbs allow. It reports false when stag names no region.
func (t *mrTable) invalidate(stag uint32) bool {
	m := t.named(stag)
	if m != nil {
		m.valid.Store(false)
	}
	return m != nil
}

// registered reports whether m is registered in t, valid or invalidated.
func (t *mrTable) registered(m *mr) bool { return t.named(m.stag) == m }

// dereg deregisters a region, valid or invalidated.
func (t *mrTable) dereg(x id.MR) error {
	m, ok := x.(*mr)
	if !ok {
		return fmt.Errorf("soft: unknown memory region: %w", syscall.EINVAL)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := m.stag >> 8
	if idx == 0 || int(idx) > len(t.regs) || t.regs[idx-1] != m {
		return fmt.Errorf("soft: unknown memory region: %w", syscall.EINVAL)
	}
	m.valid.Store(false)
	t.regs[idx-1] = nil
	t.free = append(t.free, idx)
	return nil
}
