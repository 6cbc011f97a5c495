package soft

// Memory regions and protection domains.
//
// Every endpoint has one protection domain (pd), made when first asked for:
// the regions registered on the id or on any of its QPs live there, survive
// DestroyQP and serve the next QP the id creates. A peer reaches only the
// regions of the pd of the id its connection belongs to: librdmacm shares one
// PD per device among all ids, which would let any peer of the process name
// any region; one per id keeps connections from reaching each other's memory.
//
// STags are formed as siw forms them, a 24-bit index and an 8-bit key, but
// neither can be guessed or counted: the index is a keyed pseudo-random
// permutation of a per-pd registration counter (so an index recurs only
// after 2^24 registrations in the pd), the key and the region's base address
// come from the same keyed function. STag 0 and rtrSTag (index 0) are never
// given out.
//
// Deregistration is ordered with the data path: once DeregMR returns, no
// peer reads or writes a byte of the region (see pd.DeregMR).

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/cmrt/cmrt/fabric"
)

// mr is a registered memory region. Tagged offsets from a peer are checked
// against [addr, addr+len).
type mr struct {
	buf    []byte
	pd     *pd
	stag   uint32
	addr   uint64
	access fabric.Access
	// valid: usable for local and remote access (registered and not
	// invalidated). registered: in its pd's table, valid or invalidated.
	valid      atomic.Bool
	registered atomic.Bool
}

func (m *mr) Bytes() []byte         { return m.buf }
func (m *mr) LKey() uint32          { return m.stag }
func (m *mr) RKey() uint32          { return m.stag }
func (m *mr) Addr() uint64          { return m.addr }
func (m *mr) Access() fabric.Access { return m.access }

// contains reports whether b lies within the region.
func (m *mr) contains(b []byte) bool {
	if len(b) == 0 {
		return true
	}
	return sliceWithin(b, m.buf)
}

// remote reports whether the region grants a peer any access.
func (m *mr) remote() bool { return m.access&(fabric.AccessRemoteRead|fabric.AccessRemoteWrite) != 0 }

// maxRegions is how many regions a pd holds: every index but 0.
const maxRegions = 1<<24 - 1

// mrTable maps STags to the regions of one pd. Lookups take its read lock:
// tables are per endpoint, so no lock is shared between connections.
type mrTable struct {
	mu     sync.RWMutex
	regs   map[uint32]*mr // by index (stag >> 8)
	n      uint64         // registrations so far: the permutation's input
	prf    cipher.Block   // keyed function behind indices, keys and addresses
	closed bool
}

// keyed returns the keyed function's 16 output bytes for (domain, x).
func (t *mrTable) keyed(out *[aes.BlockSize]byte, domain byte, x uint64) {
	var in [aes.BlockSize]byte
	in[0] = domain
	binary.BigEndian.PutUint64(in[8:], x)
	t.prf.Encrypt(out[:], in[:])
}

// permute maps a registration number to a 24-bit index: a four-round
// Feistel network on two 12-bit halves, each round's function the keyed
// function of the round number and the right half. It is a bijection on
// [0, 2^24) whatever the function, so indices recur only when n wraps.
func (t *mrTable) permute(n uint64) uint32 {
	l, r := uint32(n>>12)&0xfff, uint32(n)&0xfff
	var out [aes.BlockSize]byte
	for round := byte(1); round <= 4; round++ {
		t.keyed(&out, round, uint64(r))
		l, r = r, l^uint32(binary.BigEndian.Uint16(out[:]))&0xfff
	}
	return l<<12 | r
}

// seedLocked keys the table with key, or with a random key when key is nil.
// Called with mu held.
func (t *mrTable) seedLocked(key []byte) error {
	if key == nil {
		key = make([]byte, 16)
		if _, err := rand.Read(key); err != nil {
			return fmt.Errorf("soft: STag key: %w", err)
		}
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return err
	}
	t.prf, t.regs = b, make(map[uint32]*mr)
	return nil
}

// reg registers buf with the given access in pd p.
func (t *mrTable) reg(p *pd, buf []byte, access fabric.Access) (*mr, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("soft: register an empty buffer: %w", syscall.EINVAL)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.closed:
		return nil, einval("reg_mr: protection domain released (id destroyed)")
	case len(t.regs) >= maxRegions:
		return nil, fmt.Errorf("soft: too many memory regions: %w", syscall.ENOMEM)
	case t.prf == nil:
		if err := t.seedLocked(nil); err != nil {
			return nil, err
		}
	}
	var idx uint32
	for {
		// At most len(t.regs)+1 turns: the permutation visits each index
		// once per 2^24 registrations.
		idx = t.permute(t.n % (1 << 24))
		t.n++
		if _, used := t.regs[idx]; idx != 0 && !used {
			break
		}
	}
	var out [aes.BlockSize]byte
	t.keyed(&out, 0, t.n)
	// The base address: any 64-bit value with room for the region above it
	// (bit 63 clear), never 0, unrelated to the index.
	addr := binary.BigEndian.Uint64(out[:8]) &^ (1 << 63)
	if addr == 0 {
		addr = 1 << 12
	}
	m := &mr{buf: buf, pd: p, stag: idx<<8 | uint32(out[8]), addr: addr, access: access}
	m.valid.Store(true)
	m.registered.Store(true)
	t.regs[idx] = m
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
	t.mu.RLock()
	m := t.regs[stag>>8]
	t.mu.RUnlock()
	if m != nil && m.stag == stag {
		return m
	}
	return nil
}

// dereg removes region m from the table and invalidates it.
func (t *mrTable) dereg(m *mr) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	idx := m.stag >> 8
	if t.regs[idx] != m {
		return false
	}
	m.valid.Store(false)
	m.registered.Store(false)
	delete(t.regs, idx)
	return true
}

// close invalidates every region and refuses new ones.
func (t *mrTable) close() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	for _, m := range t.regs {
		m.valid.Store(false)
	}
}

// pd is an endpoint's protection domain.
type pd struct {
	ep  *endpoint
	mrs mrTable
}

// RegMR implements fabric.PD.
func (p *pd) RegMR(buf []byte, access fabric.Access) (fabric.MR, error) {
	m, err := p.mrs.reg(p, buf, access)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// DeregMR implements fabric.PD: the region is invalidated, then the loops that
// move the endpoint's data finish what they are doing. When it returns no
// peer reads or writes a byte of the region (a Read Response or a message
// cut short by it ends the connection with a Terminate), and work requests
// posted on it and not yet started complete with WCLocProtErr.
func (p *pd) DeregMR(x fabric.MR) error {
	m, err := p.region(x)
	if err != nil {
		return err
	}
	if !p.mrs.dereg(m) {
		return einval("dereg_mr: region not registered")
	}
	p.ep.fenceDataPath()
	return nil
}

// region returns the region of this pd that x is: valid or invalidated
// (a work request on an invalidated one completes with WCLocProtErr, as
// with verbs), but registered.
func (p *pd) region(x fabric.MR) (*mr, error) {
	m, ok := x.(*mr)
	if !ok || m == nil || m.pd != p || !m.registered.Load() {
		return nil, einval("memory region not registered in this protection domain")
	}
	return m, nil
}

// invalidate makes the region stag names invalid for any further access,
// remote or local, as a peer's Send with Invalidate does; the region stays
// registered until deregistered. Only a region that grants remote access
// may be invalidated by a peer: a local-only one (a receive buffer, say)
// was never the peer's to name. Invalidating an invalid region succeeds,
// as the verbs allow. It reports false when stag names no such region.
// Loop only.
func (p *pd) invalidate(stag uint32) bool {
	m := p.mrs.named(stag)
	if m == nil || !m.remote() {
		return false
	}
	m.valid.Store(false)
	return true
}

// protection returns the endpoint's protection domain, making it on first
// use.
func (ep *endpoint) protection() (*pd, error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.destroyed {
		return nil, einval("protection domain of a destroyed id")
	}
	return ep.pdLocked(), nil
}

// pdLocked returns the endpoint's protection domain, making it on first
// use. ep.mu is held.
func (ep *endpoint) pdLocked() *pd {
	if ep.pd == nil {
		ep.pd = &pd{ep: ep}
	}
	return ep.pd
}

// onDeviceLocked reports whether the endpoint is bound to a device: to a
// local address (not a wildcard), by Bind, ResolveAddr or a request.
func (ep *endpoint) onDeviceLocked() bool {
	return ep.dev != nil || (ep.local.IsValid() && !ep.local.Addr().IsUnspecified())
}

// PD implements fabric.PDEndpoint: the id's protection domain, once the id is
// bound to a device (as librdmacm sets id->pd); EINVAL before.
func (ep *endpoint) PD() (fabric.PD, error) {
	ep.mu.Lock()
	bound := ep.onDeviceLocked()
	ep.mu.Unlock()
	if !bound {
		return nil, einval("id not bound to a device")
	}
	p, err := ep.protection()
	if err != nil {
		return nil, err
	}
	return p, nil
}

// fenceDataPath waits until what copies the endpoint's memory has finished
// its current work: its RC connection (every copy to or from a region,
// on the loop or on a poster's goroutine, holds the connection's lock) and
// its UD QP's loop, recorded when they start and kept after they end. A
// region invalidated before the call is touched by none of them
// afterwards, since they check validity right before each copy. Not on a
// loop goroutine, nor holding a connection's lock.
func (ep *endpoint) fenceDataPath() {
	ep.mu.Lock()
	c, l := ep.copyConn, ep.copyLoop
	ep.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		c.mu.Unlock() // empty: a fence, not a critical section
	}
	if l != nil {
		l.call(func() {})
	}
}

// fenceConn waits until the endpoint's RC connection, if any, has finished
// the copy it is doing: after releasePD it makes none (fenceDataPath
// without the UD loop's round trip, which Destroy does not need).
func (ep *endpoint) fenceConn() {
	ep.mu.Lock()
	c := ep.copyConn
	ep.mu.Unlock()
	if c != nil {
		c.mu.Lock()
		c.mu.Unlock() // empty: a fence, not a critical section
	}
}

// releasePD invalidates the endpoint's regions as it is destroyed.
func (ep *endpoint) releasePD() {
	ep.mu.Lock()
	p := ep.pd
	ep.mu.Unlock()
	if p != nil {
		p.mrs.close()
	}
}

// sliceOffset returns the offset of b within region (b must lie in it).
func sliceOffset(b, region []byte) uint64 {
	if len(b) == 0 || len(region) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))) - uintptr(unsafe.Pointer(unsafe.SliceData(region))))
}

// sliceWithin reports whether b lies inside the memory of region (between
// its first byte and its last), so a work request cannot name memory outside
// the region it cites.
func sliceWithin(b, region []byte) bool {
	if len(b) == 0 {
		return true
	}
	if len(region) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(region)))
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return p >= start && p+uintptr(len(b)) <= start+uintptr(len(region))
}
