package soft

import (
	"net/netip"
	"testing"
)

// TestPortBindAllocs: reserving a port costs the binding and nothing else
// once the table has held a port (the table keeps each port's bindings in
// a list through the bindings; a slice per port was one allocation more
// per bound id, on every resolve of an unbound id).
func TestPortBindAllocs(t *testing.T) {
	var pt portTable
	lo := netip.MustParseAddrPort("127.0.0.1:0")
	cycle := func() {
		b, err := pt.bind(protoTCP, lo, false, false)
		if err != nil {
			t.Fatal(err)
		}
		pt.remove(b)
	}
	cycle() // the table's map
	if n := testing.AllocsPerRun(200, cycle); n != 1 {
		t.Errorf("bind and remove of an automatic TCP port: %v allocations, want 1 (the binding)", n)
	}
	if len(pt.m) != 0 {
		t.Errorf("%d ports still held", len(pt.m))
	}
}

// TestPortListOrder: the bindings that share a port stay in the order they
// were added, whichever is removed, so that the conflict found first (and
// its errno) and the UDP socket shared are the earliest binding's, as
// before; a binding removed twice, or never added, changes nothing.
func TestPortListOrder(t *testing.T) {
	var pt portTable
	ap := netip.MustParseAddrPort("127.0.0.1:7")
	bs := make([]*binding, 4)
	for i := range bs {
		bs[i] = &binding{tr: protoTCP, addr: ap, fd: -1}
		pt.addLocked(bs[i])
	}
	list := func() []*binding {
		var l []*binding
		for cur := pt.m[portKey{protoTCP, 7}]; cur != nil; cur = cur.next {
			l = append(l, cur)
		}
		return l
	}
	check := func(step string, want ...*binding) {
		t.Helper()
		got := list()
		if len(got) != len(want) {
			t.Fatalf("%s: %d bindings, want %d", step, len(got), len(want))
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("%s: binding %d is not the %d-th added", step, i, i)
			}
		}
	}
	check("added", bs...)
	pt.remove(bs[2]) // the middle
	check("middle removed", bs[0], bs[1], bs[3])
	pt.remove(bs[2]) // again
	pt.remove(&binding{tr: protoTCP, addr: ap, fd: -1})
	check("removed again, and one never added", bs[0], bs[1], bs[3])
	pt.remove(bs[0]) // the head
	check("head removed", bs[1], bs[3])
	pt.addLocked(bs[0]) // back, now last
	check("re-added", bs[1], bs[3], bs[0])
	pt.remove(bs[0]) // the tail
	pt.remove(bs[1])
	pt.remove(bs[3])
	if len(pt.m) != 0 {
		t.Fatalf("%d ports still held after all removed", len(pt.m))
	}
}
