package soft_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

func TestMulticastJoinSendLeave(t *testing.T) {
	group, port := randomGroup()
	f := udFabric(t, soft.WithMulticastPort(port))
	r1 := joinGroup(t, f, lo4, group, id.JoinFullMember, true, 4)
	r2 := joinGroup(t, f, lo4, group, id.JoinFullMember, false, 4)
	s := joinGroup(t, f, lo4, group, id.JoinSendOnly, false, 0)
	if r1.ud.AH.DLID != port || s.ud.AH.DLID != port {
		t.Fatalf("DLID %d, want the multicast port %d", r1.ud.AH.DLID, port)
	}
	s.send(t, 1, "one")
	s.send(t, 2, "two")
	r1.expect(t, 0, "one", s, group)
	r1.expect(t, 1, "two", s, group)
	r2.expect(t, 0, "one", s, group)
	r2.expect(t, 1, "two", s, group)
	// A send-only member receives nothing; a full member gets its own sends
	// back (loopback is on).
	r2.send(t, 3, "three")
	r1.expect(t, 2, "three", r2, group)
	r2.expect(t, 2, "three", r2, group)

	// After Leave nothing for the group reaches the id.
	if err := r1.id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	s.send(t, 4, "four")
	r2.expect(t, 3, "four", s, group)
	noRecv(t, r1.id, 300*time.Millisecond)
	mustErrno(t, r1.id.LeaveMulticast(group), syscall.EADDRNOTAVAIL)
	mustErrno(t, r1.id.LeaveMulticast(netip.MustParseAddr("239.9.9.9")), syscall.EADDRNOTAVAIL)
	mustErrno(t, r2.id.JoinMulticast(group, nil), syscall.EADDRINUSE)
	// Join again after leaving.
	if err := r1.id.JoinMulticast(group, nil); err != nil {
		t.Fatal(err)
	}
	ack(t, next(t, r1.ch, id.EventMulticastJoin))
	if err := r1.id.PostRecv(3, r1.buf.buf[3*64:], r1.buf.mr); err != nil {
		t.Fatal(err)
	}
	s.send(t, 5, "five")
	r1.expect(t, 3, "five", s, group)
}

func TestMulticastLoopbackOff(t *testing.T) {
	group, port := randomGroup()
	f := udFabric(t, soft.WithMulticastPort(port))
	r := joinGroup(t, f, lo4, group, id.JoinFullMember, false, 2)
	s := joinGroup(t, f, lo4, group, id.JoinFullMember, false, 2)
	if err := udExt(t, s.id).SetMulticastLoopback(false); err != nil {
		t.Fatal(err)
	}
	s.send(t, 1, "not to me")
	r.expect(t, 0, "not to me", s, group)
	noRecv(t, s.id, 200*time.Millisecond)
	if err := udExt(t, s.id).SetMulticastLoopback(true); err != nil {
		t.Fatal(err)
	}
	s.send(t, 2, "to all")
	r.expect(t, 1, "to all", s, group)
	s.expect(t, 0, "to all", s, group)
}

func TestMulticastSync(t *testing.T) {
	group, port := randomGroup()
	f := udFabric(t, soft.WithMulticastPort(port))
	i, err := id.Create(nil, nil, id.PSUDP, id.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	defer destroy(i)
	if err := i.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	if err := i.JoinMulticast(group, 42); err != nil {
		t.Fatal(err)
	}
	if ev := i.Event(); ev.Type != id.EventMulticastJoin || ev.JoinContext != 42 || ev.UD.QPNum != 0xFFFFFF {
		t.Fatalf("%s %+v", ev.Type, ev.UD)
	}
	// (LeaveMulticast here would wait forever for the join's event, which
	// the synchronous id holds until its next CM call: id/multicast.go does
	// not release it. Destroy does.)
	// PS_IB UD and PS_IPOIB ids join too.
	for _, c := range []struct {
		ps   id.PortSpace
		opts []id.Option
	}{{id.PSIPoIB, nil}, {id.PSIB, []id.Option{id.WithQPType(id.UD)}}} {
		j, err := id.Create(nil, nil, c.ps, append(c.opts, id.WithFabric(f))...)
		if err != nil {
			t.Fatal(err)
		}
		if err := j.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
			t.Fatal(err)
		}
		if err := j.JoinMulticast(group, nil); err != nil {
			t.Fatalf("%s: %v", c.ps, err)
		}
		destroy(j) // leaves
	}
}

func TestMulticastErrors(t *testing.T) {
	group, port := randomGroup()
	f := udFabric(t, soft.WithMulticastPort(port))
	ch := newChannel(t, f)
	// Bound to no device: EINVAL, as the kernel.
	any := create(t, ch, id.PSUDP)
	if err := any.Bind(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)); err != nil {
		t.Fatal(err)
	}
	mustErrno(t, any.JoinMulticast(group, nil), syscall.EINVAL)
	// A group of the other family.
	v4 := create(t, ch, id.PSUDP)
	if err := v4.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	mustErrno(t, v4.JoinMulticast(netip.MustParseAddr("ff05::1:2"), nil), syscall.EINVAL)
	// RC ids cannot join (EINVAL, as the kernel since Linux 6.3).
	rc := create(t, ch, id.PSTCP)
	if err := rc.Bind(netip.AddrPortFrom(lo4, 0)); err != nil {
		t.Fatal(err)
	}
	mustErrno(t, rc.JoinMulticast(group, nil), syscall.EINVAL) // UD only, as Linux since 6.3
	if !haveIPv6Loopback() {
		return
	}
	// IPv6 loopback has no multicast route: MULTICAST_ERROR, and the join
	// stays until left.
	v6 := create(t, ch, id.PSUDP)
	if err := v6.Bind(netip.AddrPortFrom(lo6, 0)); err != nil {
		t.Fatal(err)
	}
	g6 := netip.MustParseAddr("ff05::4d3:1")
	if err := v6.JoinMulticast(g6, nil); err != nil {
		t.Fatal(err)
	}
	ev := next(t, ch, id.EventMulticastError)
	if ev.Status != -int(syscall.ENETUNREACH) || ev.Group != g6 {
		t.Fatalf("status %d group %s", ev.Status, ev.Group)
	}
	ack(t, ev)
	if err := v6.LeaveMulticast(g6); err != nil {
		t.Fatal(err)
	}
}

// ipv6MulticastAddr finds a local IPv6 address on an up, multicast-capable
// interface other than loopback.
func ipv6MulticastAddr() (netip.Addr, bool) {
	ifs, _ := net.Interfaces()
	for _, ifi := range ifs {
		if ifi.Flags&net.FlagUp == 0 || ifi.Flags&net.FlagMulticast == 0 || ifi.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifi.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && ip.Is6() && !ip.Is4In6() && ip.IsGlobalUnicast() {
					return ip, true
				}
			}
		}
	}
	return netip.Addr{}, false
}

func TestMulticastIPv6(t *testing.T) {
	local, ok := ipv6MulticastAddr()
	if !ok {
		t.Skip("no IPv6 address on a multicast interface")
	}
	_, port := randomGroup()
	group := netip.AddrFrom16([16]byte{0: 0xff, 1: 0x05, 13: byte(rand.IntN(256)), 14: byte(rand.IntN(256)), 15: 1})
	f := udFabric(t, soft.WithMulticastPort(port))
	r := joinGroup(t, f, local, group, id.JoinFullMember, true, 2)
	s := joinGroup(t, f, local, group, id.JoinSendOnly, false, 0)
	s.send(t, 1, "six")
	r.expect(t, 0, "six", s, group)
	if err := r.id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
	s.send(t, 2, "gone")
	noRecv(t, r.id, 200*time.Millisecond)
}

// The environment of a multicast helper process.
const mcHelperEnv = "CMRT_TEST_MCAST_HELPER"

// TestMulticastHelper is not a test: it is the body of the processes
// TestMulticastProcesses starts (role,group,port,count in mcHelperEnv).
func TestMulticastHelper(t *testing.T) {
	spec := os.Getenv(mcHelperEnv)
	if spec == "" {
		return
	}
	parts := strings.Split(spec, ",")
	group := netip.MustParseAddr(parts[1])
	port, _ := strconv.Atoi(parts[2])
	count, _ := strconv.Atoi(parts[3])
	f := soft.New(soft.WithMulticastPort(uint16(port)))
	t.Cleanup(f.Quiesce) // runs last: the loop is gone before the process checks for leaks
	flags := id.JoinFullMember
	if parts[0] == "sender" {
		flags = id.JoinSendOnly
	}
	m := joinGroup(t, f, lo4, group, flags, true, map[bool]int{true: count, false: 0}[parts[0] == "receiver"])
	if parts[0] == "sender" {
		for k := 0; k < count; k++ {
			m.send(t, uint64(k), fmt.Sprintf("message %d", k))
		}
		fmt.Println("sent", count)
		return
	}
	fmt.Println("joined")
	for k := 0; k < count; k++ {
		wc := recvComp(t, m.id)
		b := m.buf.buf[wc.WRID*64 : wc.WRID*64+uint64(wc.ByteLen)]
		if want := fmt.Sprintf("message %d", k); wc.Status != id.WCSuccess || string(b[40:]) != want {
			t.Fatalf("receive %d: %+v %q", k, wc, b[40:])
		}
	}
	fmt.Println("received", count)
	if err := m.id.LeaveMulticast(group); err != nil {
		t.Fatal(err)
	}
}

// A sender and three receivers, each a process of its own, on one group.
func TestMulticastProcesses(t *testing.T) {
	if os.Getenv(mcHelperEnv) != "" {
		return
	}
	group, port := randomGroup()
	const count = 20
	start := func(role string) (*exec.Cmd, *bufio.Scanner, *bytes.Buffer) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		t.Cleanup(cancel)
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestMulticastHelper$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s,%s,%d,%d", mcHelperEnv, role, group, port, count))
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, bufio.NewScanner(out), &stderr
	}
	type proc struct {
		cmd    *exec.Cmd
		out    *bufio.Scanner
		stderr *bytes.Buffer
		lines  []string
	}
	wait := func(p *proc, want string) {
		t.Helper()
		for p.out.Scan() {
			p.lines = append(p.lines, p.out.Text())
			if strings.HasPrefix(p.out.Text(), want) {
				return
			}
		}
		t.Fatalf("no %q from helper: %q, stderr %s", want, p.lines, p.stderr)
	}
	var recv []*proc
	for k := 0; k < 3; k++ {
		cmd, out, stderr := start("receiver")
		p := &proc{cmd: cmd, out: out, stderr: stderr}
		recv = append(recv, p)
		wait(p, "joined")
	}
	cmd, out, stderr := start("sender")
	sender := &proc{cmd: cmd, out: out, stderr: stderr}
	wait(sender, "sent")
	for _, p := range append(recv, sender) {
		if p != sender {
			wait(p, "received")
		}
		for p.out.Scan() {
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatalf("helper: %v\n%s", err, p.stderr)
		}
	}
}
