package soft_test

// Helpers shared by the package's external tests. Fixtures of one
// transport are in rc_helpers_test.go (connected RC pairs, raw MPA peers)
// and ud_helpers_test.go (UD pairs, multicast members, raw SIDR peers).

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// Loopback addresses.
var (
	lo4 = netip.MustParseAddr("127.0.0.1")
	lo6 = netip.MustParseAddr("::1")
)

// haveIPv6Loopback reports whether ::1 can be bound here.
func haveIPv6Loopback() bool {
	fd, err := syscall.Socket(syscall.AF_INET6, syscall.SOCK_DGRAM, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet6{Addr: lo6.As16()}) == nil
}

// Channels, ids and events.

// newChannel makes a channel on f (the default soft fabric when nil),
// closed when the test ends.
func newChannel(t testing.TB, f fabric.Fabric) *channel.Channel {
	t.Helper()
	if f == nil {
		f = soft.Default()
	}
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ch.Close(); err != nil {
			t.Errorf("close channel: %v", err)
		}
	})
	return ch
}

// mkID makes an id with context ctx; the test destroys it.
func mkID(t testing.TB, ch *channel.Channel, ctx any, ps id.PortSpace) *id.ID {
	t.Helper()
	cm, err := id.Create(ch, ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// create makes an id destroyed when the test ends (unless it was already).
func create(t testing.TB, ch id.Channel, ps id.PortSpace, opts ...id.Option) *id.ID {
	t.Helper()
	i, err := id.Create(ch, nil, ps, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { destroy(i) })
	return i
}

// destroy destroys i unless it was already.
func destroy(i *id.ID) {
	if i.State() != id.StateDestroyed {
		_ = i.Destroy()
	}
}

// cmListen makes a listening RC id on 127.0.0.1 with a free port.
func cmListen(t testing.TB, ch *channel.Channel, ctx any) *id.ID {
	t.Helper()
	l := mkID(t, ch, ctx, id.PSTCP)
	if err := l.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(0); err != nil {
		t.Fatal(err)
	}
	return l
}

// next returns the next event of ch, failing the test if it is not of type
// want within 5 s. The caller acknowledges it.
func next(t testing.TB, ch *channel.Channel, want id.EventType) *id.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := ch.GetEventContext(ctx)
	if err != nil {
		t.Fatalf("waiting for %s: %v", want, err)
	}
	if ev.Type != want {
		st := ev.Status
		_ = ev.Ack() // so the test's deferred Destroy calls do not wait for it
		t.Fatalf("got %s (status %d), want %s", ev.Type, st, want)
	}
	return ev
}

// nextWithin takes the next event of ch within d.
func nextWithin(ch *channel.Channel, d time.Duration) (*id.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return ch.GetEventContext(ctx)
}

// quiet fails the test if ch reports an event within d.
func quiet(t testing.TB, ch *channel.Channel, d time.Duration) {
	t.Helper()
	ev, err := nextWithin(ch, d)
	if err == nil {
		t.Errorf("unexpected %s (status %d)", ev.Type, ev.Status)
		_ = ev.Ack()
	}
}

// ack acknowledges ev.
func ack(t testing.TB, ev *id.Event) {
	t.Helper()
	if err := ev.Ack(); err != nil {
		t.Fatal(err)
	}
}

// resolve runs an async id through address and route resolution, taking
// ADDR_RESOLVED and ROUTE_RESOLVED from ch.
func resolve(t testing.TB, ch *channel.Channel, i *id.ID, dst netip.AddrPort) {
	t.Helper()
	if err := i.ResolveAddr(netip.AddrPort{}, dst, time.Second); err != nil {
		t.Fatal(err)
	}
	ack(t, next(t, ch, id.EventAddrResolved))
	if err := i.ResolveRoute(time.Second); err != nil {
		t.Fatal(err)
	}
	ack(t, next(t, ch, id.EventRouteResolved))
}

// Errors.

// isErrno reports whether err is the errno e.
func isErrno(err error, e syscall.Errno) bool { return errors.Is(err, e) }

// mustErrno fails the test unless err is the errno want.
func mustErrno(t testing.TB, err error, want syscall.Errno) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("error %v, want %v", err, want)
	}
}

// errorString is an error a test goroutine reports.
type errorString string

func (e errorString) Error() string { return string(e) }

// Time and resources.

// timeoutCtx is a context cancelled after d or when the test ends.
func timeoutCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitFor waits up to 5 s for cond.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// quiesce stops the default fabric's idle loops and monitor.
func quiesce(t testing.TB) {
	t.Helper()
	if err := soft.Default().QuiesceContext(timeoutCtx(t, 5*time.Second)); err != nil {
		t.Fatalf("the fabric's loops did not stop: %v", err)
	}
}

// countFDs counts the process's open descriptors.
func countFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

// Data.

// pattern fills a buffer with a recognisable sequence.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(k*7+k>>8) ^ seed
	}
	return b
}

// sameBytes fails the test unless got is want.
func sameBytes(tb testing.TB, got, want []byte) {
	tb.Helper()
	if !bytes.Equal(got, want) {
		k := 0
		for k < len(got) && k < len(want) && got[k] == want[k] {
			k++
		}
		tb.Fatalf("content differs at byte %d of %d/%d", k, len(got), len(want))
	}
}

// Network namespaces.

// netmonChildEnv marks the child process runInNetns starts.
const netmonChildEnv = "CMRT_SOFT_NETMON_NETNS"

// runIP runs ip(8) with args, failing t if it fails.
func runIP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// runInNetns runs test name in a child process in a new network namespace
// (a new user namespace too when unprivileged) and adopts its verdict.
func runInNetns(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs ip(8)")
	}
	attempts := []uintptr{syscall.CLONE_NEWNET, syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET}
	var last []byte
	var lastErr error
	for _, flags := range attempts {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), netmonChildEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: flags}
		if flags&syscall.CLONE_NEWUSER != 0 {
			cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
			cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		}
		out, err := cmd.CombinedOutput()
		cancel()
		if cmd.ProcessState == nil { // could not create the namespace
			lastErr, last = err, out
			continue
		}
		if err != nil {
			t.Fatalf("in a new network namespace: %v\n%s", err, out)
		}
		if strings.Contains(string(out), "--- SKIP") {
			t.Skipf("skipped in the namespace:\n%s", out)
		}
		t.Logf("ran in a new network namespace:\n%s", out)
		return
	}
	t.Skipf("needs a private network namespace (CAP_SYS_ADMIN or user namespaces): %v %s", lastErr, last)
}
