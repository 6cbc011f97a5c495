package soft

import (
	"crypto/aes"
	"encoding/binary"
	"errors"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
)

// unpermute inverts mrTable.permute: the registration number whose index
// is idx.
func (t *mrTable) unpermute(idx uint32) uint64 {
	l, r := idx>>12&0xfff, idx&0xfff
	var out [aes.BlockSize]byte
	for round := byte(4); round >= 1; round-- {
		// Forward: (l, r) -> (r, l ^ F(round, r)).
		t.keyed(&out, round, uint64(l))
		l, r = r^uint32(binary.BigEndian.Uint16(out[:]))&0xfff, l
	}
	return uint64(l)<<12 | uint64(r)
}

func newTestPD(tb testing.TB) *pd {
	tb.Helper()
	return &pd{ep: &endpoint{}}
}

func mustReg(tb testing.TB, p interface {
	RegMR([]byte, fabric.Access) (fabric.MR, error)
}, buf []byte, a fabric.Access) *mr {
	tb.Helper()
	x, err := p.RegMR(buf, a)
	if err != nil {
		tb.Fatal(err)
	}
	return x.(*mr)
}

// TestSTagReserved: index 0 (STag 0 and the RTR STag) is never given out,
// even when the permutation lands on it; an index in use is skipped.
func TestSTagReserved(t *testing.T) {
	p := newTestPD(t)
	first := mustReg(t, p, make([]byte, 8), 0) // keys the table
	p.mrs.mu.Lock()
	p.mrs.n = p.mrs.unpermute(0)
	if p.mrs.permute(p.mrs.n) != 0 {
		p.mrs.mu.Unlock()
		t.Fatal("unpermute does not invert permute")
	}
	p.mrs.mu.Unlock()
	m := mustReg(t, p, make([]byte, 8), 0)
	if m.stag>>8 == 0 || m.stag == 0 || m.stag == rtrSTag {
		t.Fatalf("STag %#x has index 0", m.stag)
	}
	// Land on the index of a live region: it is skipped.
	p.mrs.mu.Lock()
	p.mrs.n = p.mrs.unpermute(first.stag >> 8)
	p.mrs.mu.Unlock()
	m2 := mustReg(t, p, make([]byte, 8), 0)
	if m2.stag>>8 == first.stag>>8 {
		t.Fatalf("index %#x of a live region given out again", first.stag>>8)
	}
	if p.mrs.lookup(first.stag) != first {
		t.Fatal("live region lost")
	}
}

// TestPDRegions: a region belongs to one protection domain; deregistering
// it twice, or in another domain, is EINVAL; a released domain refuses
// registrations and its regions are invalid.
func TestPDRegions(t *testing.T) {
	p, q := newTestPD(t), newTestPD(t)
	m := mustReg(t, p, make([]byte, 8), fabric.AccessRemoteRead)
	if _, err := q.region(m); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("region of another domain: %v", err)
	}
	if err := q.DeregMR(m); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("dereg in another domain: %v", err)
	}
	if q.mrs.lookup(m.stag) != nil {
		t.Fatal("STag found in another domain")
	}
	if _, err := p.RegMR(nil, 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("empty buffer: %v", err)
	}
	if err := p.DeregMR(m); err != nil {
		t.Fatal(err)
	}
	if err := p.DeregMR(m); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("second dereg: %v", err)
	}
	m = mustReg(t, p, make([]byte, 8), fabric.AccessRemoteRead)
	p.mrs.close()
	if m.valid.Load() || p.mrs.lookup(m.stag) != nil {
		t.Fatal("region valid after its domain was released")
	}
	if _, err := p.RegMR(make([]byte, 8), 0); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("registration in a released domain: %v", err)
	}
}
