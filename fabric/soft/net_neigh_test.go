package soft_test

import (
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/netlink"
)

// TestResolveWaitsForNeighbour, in a private network namespace: a host
// that does not answer ARP on the id's subnet is ADDR_ERROR -ETIMEDOUT at
// the resolution's timeout (the kernel was made to ask for it); a next hop
// with a usable entry resolves at once; an id destroyed while waiting gets
// nothing; a local destination needs no neighbour. (A neighbour that
// answers ARP is the reliability suite's: its hosts are namespaces on a
// bridge, each first resolution waits for ARP.)
func TestResolveWaitsForNeighbour(t *testing.T) {
	if os.Getenv(netmonChildEnv) == "" {
		runInNetns(t, "TestResolveWaitsForNeighbour")
		return
	}
	ip := func(args ...string) { t.Helper(); runIP(t, args...) }
	ip("link", "set", "lo", "up")
	ip("link", "add", "rv0", "type", "veth", "peer", "name", "rv1")
	ip("link", "set", "rv0", "up")
	ip("link", "set", "rv1", "up")
	ip("addr", "add", "10.66.0.1/24", "dev", "rv0")
	ip("neigh", "replace", "10.66.0.7", "lladdr", "02:00:00:00:00:07", "dev", "rv0", "nud", "permanent")

	f := soft.New(soft.WithIdleGrace(0))
	ch := newRCChan(t, f)
	defer ch.src.Close()
	resolve := func(dst string, timeout time.Duration) (*id.ID, time.Time) {
		t.Helper()
		cm, err := id.Create(ch, nil, id.PSTCP)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := cm.ResolveAddr(netip.AddrPort{}, netip.MustParseAddrPort(dst), timeout); err != nil {
			t.Fatal(err)
		}
		return cm, start
	}

	// Nobody answers for 10.66.0.5.
	const timeout = 300 * time.Millisecond
	cm, start := resolve("10.66.0.5:7471", timeout)
	ev, ok := ch.nextEv(5 * time.Second)
	took := time.Since(start)
	if !ok || ev.Type != id.EventAddrError || ev.Status != -int(syscall.ETIMEDOUT) {
		t.Fatalf("unanswered next hop: %v %+v, want ADDR_ERROR %d", ok, ev, -int(syscall.ETIMEDOUT))
	}
	if took < timeout || took > timeout+time.Second {
		t.Errorf("ADDR_ERROR after %v, want the %v timeout", took, timeout)
	}
	t.Logf("unanswered next hop: ADDR_ERROR -ETIMEDOUT after %v (timeout %v)", took.Round(time.Millisecond), timeout)
	c, err := netlink.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rv0, err := c.LinkByName("rv0")
	if err != nil {
		t.Fatal(err)
	}
	n, err := c.NeighGet(rv0.Index, netip.MustParseAddr("10.66.0.5"))
	if err != nil || n.State&(unix.NUD_INCOMPLETE|unix.NUD_FAILED) == 0 {
		t.Errorf("the kernel's entry for 10.66.0.5: %+v (%s), %v; want it asked for (incomplete or failed)", n, n.State, err)
	}
	if s := cm.State(); s != journal.StateAddrBound && s != journal.StateIdle {
		t.Errorf("state %s after ADDR_ERROR", s)
	}
	_ = cm.Destroy()

	// A usable entry, and a local destination: at once.
	for _, dst := range []string{"10.66.0.7:7471", "10.66.0.1:7471"} {
		cm, start := resolve(dst, time.Minute)
		ev, ok := ch.nextEv(5 * time.Second)
		if !ok || ev.Type != id.EventAddrResolved {
			t.Fatalf("%s: %v %+v, want ADDR_RESOLVED", dst, ok, ev)
		}
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Errorf("%s: ADDR_RESOLVED after %v, want at once", dst, took)
		}
		_ = cm.Destroy()
	}

	// Destroyed while waiting: nothing is reported, nothing is left.
	cm, _ = resolve("10.66.0.6:7471", 400*time.Millisecond)
	if err := cm.Destroy(); err != nil {
		t.Fatal(err)
	}
	ch.none(t, time.Second)
	f.Quiesce()
}
