package soft_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// TestResolveKeepsSpecificBoundAddress: an id bound to 127.0.0.1 keeps that
// source when it resolves an address the route would reach from another.
func TestResolveKeepsSpecificBoundAddress(t *testing.T) {
	devs, _ := soft.Default().Devices()
	var other netip.Addr
	for _, d := range devs {
		for _, a := range d.Addrs {
			if a.Is4() && !a.IsLoopback() {
				other = a
			}
		}
	}
	if !other.IsValid() {
		t.Skip("no IPv4 address besides loopback")
	}
	ch := newChannel(t, nil)
	cm := mkID(t, ch, nil, id.PSTCP)
	defer cm.Destroy()
	if err := cm.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	bound := cm.LocalAddr()
	if err := cm.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(other, 7471), time.Second); err != nil {
		t.Fatal(err)
	}
	_ = next(t, ch, id.EventAddrResolved).Ack()
	if cm.LocalAddr() != bound {
		t.Fatalf("local address moved from %s to %s", bound, cm.LocalAddr())
	}
}

// TestNoRouteFailsResolveAddr resolves in a network namespace with no
// routes: the call fails with ENETUNREACH and the id is left bound to the
// wildcard address with a port, in ADDR_BOUND (issue 16, bug 6: it was an
// ADDR_ERROR event with the id in ADDR_BOUND but unbound).
func TestNoRouteFailsResolveAddr(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1): cannot make a namespace without routes")
	}
	args := []string{"-n"}
	if os.Geteuid() != 0 {
		args = []string{"-r", "-n"}
	}
	cmd := exec.Command(unshare, append(args, "sh", "-c", "ip link set lo up 2>/dev/null; exec \"$0\" -test.run=NONE", os.Args[0])...)
	cmd.Env = append(os.Environ(), helperEnv+"=resolve")
	out, err := cmd.CombinedOutput()
	if err != nil && strings.Contains(string(out), "Operation not permitted") {
		t.Skipf("cannot create a network namespace here: %s", out)
	}
	if err != nil {
		t.Fatalf("helper: %v: %s", err, out)
	}
	one := fmt.Sprintf("result %d %s 0.0.0.0", syscall.ENETUNREACH, id.StateAddrBound)
	if want := one + "\n" + one; strings.TrimSpace(string(out)) != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
}
