package soft_test

import (
	"encoding/binary"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// ibPath returns one struct ibv_path_data with the given flags and a
// zeroed path record.
func ibPath(flags uint32) []byte {
	b := make([]byte, 72)
	binary.NativeEndian.PutUint32(b, flags)
	return b
}

// TestSetIBPath: RDMA_OPTION_IB_PATH as the kernel's ucma_set_ib_path and
// rdma_set_ib_path take it: without a record flagged GMP, PRIMARY and
// BIDIRECTIONAL it is EINVAL (diff-kernel on siw0 and rxe0, a zeroed
// record: EINVAL there, 0 and a ROUTE_RESOLVED here); with one, only in
// ADDR_RESOLVED, where it reports ROUTE_RESOLVED; elsewhere EINVAL, with
// nothing reported.
func TestSetIBPath(t *testing.T) {
	const good = 1 | 2 | 8 | 32 // GMP | PRIMARY | OUTBOUND | INBOUND_REVERSE
	f := soft.New(soft.WithName("ibpath"))
	defer f.Quiesce()
	ch := newChannel(t, f)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	set := func(v []byte) error { return cm.SetOption(id.OptionLevelIB, id.OptionIBPath, v) }

	mustErrno(t, set(ibPath(good)), syscall.EINVAL) // IDLE
	if err := cm.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(lo4, 7471), time.Second); err != nil {
		t.Fatal(err)
	}
	_ = next(t, ch, id.EventAddrResolved).Ack()
	for _, flags := range []uint32{0, 1 | 2, good | 4} {
		mustErrno(t, set(ibPath(flags)), syscall.EINVAL)
	}
	if ev, err := nextWithin(ch, 50*time.Millisecond); err == nil {
		t.Fatalf("%s after a refused IB path", ev.Type)
	}
	if err := set(append(ibPath(0), ibPath(good)...)); err != nil {
		t.Fatalf("IB path in ADDR_RESOLVED: %v", err)
	}
	_ = next(t, ch, id.EventRouteResolved).Ack()
	if st := cm.State(); st != id.StateRouteResolved {
		t.Fatalf("state %s after the IB path, want ROUTE_RESOLVED", st)
	}
	mustErrno(t, set(ibPath(good)), syscall.EINVAL) // ROUTE_RESOLVED
	if ev, err := nextWithin(ch, 50*time.Millisecond); err == nil {
		t.Fatalf("%s after a refused IB path", ev.Type)
	}
}
