package id_test

import (
	"net/netip"
	"testing"

	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/fakefab"
)

// TestCountLive checks that live ids are counted by port space and state,
// multicast joins and destroyed ids not. No test of the package runs in
// parallel, so the counts are those of this test's ids.
func TestCountLive(t *testing.T) {
	if n := len(id.CountLive()); n != 0 {
		t.Fatalf("%d keys before the test: %v", n, id.CountLive())
	}
	ch := newChan(t, fakefab.New("fake", true))
	a, b, u := newID(t, ch, id.PSTCP), newID(t, ch, id.PSTCP), newID(t, ch, id.PSUDP)
	defer func() {
		for _, i := range []*id.ID{a, b, u} {
			_ = i.Destroy()
		}
		if n := len(id.CountLive()); n != 0 {
			t.Errorf("%d keys after destroy: %v", n, id.CountLive())
		}
	}()
	if err := a.ResolveAddr(anyAddr, dst, 0); err != nil {
		t.Fatal(err)
	}
	if err := u.Bind(netip.MustParseAddrPort("127.0.0.1:0")); err != nil {
		t.Fatal(err)
	}
	gone, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := gone.Destroy(); err != nil {
		t.Fatal(err)
	}
	want := map[id.LiveKey]int{
		{PortSpace: id.PSTCP, State: id.StateIdle}:      1,
		{PortSpace: id.PSTCP, State: id.StateAddrQuery}: 1,
		{PortSpace: id.PSUDP, State: id.StateAddrBound}: 1,
	}
	got := id.CountLive()
	if len(got) != len(want) {
		t.Errorf("CountLive = %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Errorf("%s %s: %d, want %d (all: %v)", k.PortSpace, k.State, got[k], n, got)
		}
	}
}
