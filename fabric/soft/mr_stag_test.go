package soft_test

import (
	"testing"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestSTagNotCountable: the region registered right after an advertised
// one cannot be found by counting from the advertised STag. The old scheme
// gave it index+1 and key+1 (STag +0x101) and base address index<<32.
func TestSTagNotCountable(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.disconnect = true
	defer p.close()
	for run := 0; run < 8; run++ {
		a, err := p.srv.qp.RegMR(make([]byte, 64), id.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		secret, err := p.srv.qp.RegMR(make([]byte, 64), id.AccessRemoteRead|id.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		ai, si := a.RKey()>>8, secret.RKey()>>8
		if secret.Addr() == uint64(si)<<32 || a.Addr() == uint64(ai)<<32 {
			t.Errorf("base addresses %#x, %#x derived from the indices %#x, %#x", a.Addr(), secret.Addr(), ai, si)
		}
		// Within 16 indices either side, any key: the STags an adversary
		// counting from the advertised one would try first.
		if d := int64(si) - int64(ai); d >= -16 && d <= 16 {
			t.Fatalf("secret region %#x is %d indices from the advertised %#x", secret.RKey(), d, a.RKey())
		}
	}
}

// TestSTagNoRecurrence: within 10 000 registrations on one id, each
// deregistered before the next (so an index is always free for reuse), no
// STag recurs, so a stale STag never names a new region. The old scheme
// reused the freed index at once with the key counting up: the same STag
// came back after 256 registrations. STag 0 and the RTR STag are never
// given out.
func TestSTagNoRecurrence(t *testing.T) {
	p := newPair(t, pairOpts{})
	p.disconnect = true
	defer p.close()
	const n = 10000
	seen := make(map[uint32]int, n)
	buf := make([]byte, 4096)
	for k := 0; k < n; k++ {
		m, err := p.srv.qp.RegMR(buf, id.AccessRemoteRead|id.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		s := m.RKey()
		if prev, ok := seen[s]; ok {
			t.Fatalf("registration %d: STag %#x given out before, at registration %d", k, s, prev)
		}
		if s == 0 || s == soft.RTRSTag || s>>8 == 0 {
			t.Fatalf("registration %d: reserved STag %#x", k, s)
		}
		if a := m.Addr(); a == 0 || a+uint64(len(buf)) < a {
			t.Fatalf("base address %#x", a)
		}
		seen[s] = k
		if err := p.srv.qp.DeregMR(m); err != nil {
			t.Fatal(err)
		}
	}
}
