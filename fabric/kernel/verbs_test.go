package kernel

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/uverbs"
)

// waitFor polls cond until it holds or a generous deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// pollOne waits (with Wait) for one completion of cq.
func pollOne(t *testing.T, cq fabric.CQ) fabric.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]fabric.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("wait: %v", err)
		}
	}
}

func TestVerbsSendAndReceive(t *testing.T) {
	s := newSim(t, false, qpRTS)
	q := s.q
	buf := make([]byte, 256)
	m := s.region(buf, fabric.AccessLocalWrite)
	if err := q.PostRecv(&fabric.RecvWR{WRID: 7, Buf: buf[:128], MR: m}); err != nil {
		t.Fatal(err)
	}
	if !s.deliver([]byte("hello"), [4]byte{}, 0) {
		t.Fatal("no receive posted")
	}
	wc := pollOne(t, q.RecvCQ())
	if wc.WRID != 7 || wc.Status != fabric.WCSuccess || wc.Opcode != fabric.WCRecv || wc.ByteLen != 5 || string(buf[:5]) != "hello" || wc.GRH {
		t.Fatalf("receive %+v, data %q", wc, buf[:5])
	}
	// A signaled send rings the doorbell and completes; an unsignaled one
	// does not complete.
	if err := q.PostSend(&fabric.SendWR{WRID: 8, Opcode: fabric.WRSend, Buf: buf[:10], MR: m}); err != nil {
		t.Fatal(err)
	}
	if err := q.PostSend(&fabric.SendWR{WRID: 9, Opcode: fabric.WRWrite, Flags: fabric.SendSignaled, Buf: buf[:20], MR: m,
		RemoteAddr: 0x1000, RKey: 5}); err != nil {
		t.Fatal(err)
	}
	wc = pollOne(t, q.SendCQ())
	if wc.WRID != 9 || wc.Opcode != fabric.WCRDMAWrite || wc.ByteLen != 20 || wc.QPNum != 0x11 {
		t.Fatalf("send completion %+v", wc)
	}
	if n := s.doorbel.Load(); n != 2 {
		t.Fatalf("%d doorbells", n)
	}
	// Inline data needs no region.
	if err := q.PostSend(&fabric.SendWR{WRID: 10, Opcode: fabric.WRSend, Flags: fabric.SendInline | fabric.SendSignaled, Buf: []byte("inline")}); err != nil {
		t.Fatal(err)
	}
	if wc = pollOne(t, q.SendCQ()); wc.WRID != 10 || wc.ByteLen != 6 {
		t.Fatalf("inline completion %+v", wc)
	}
}

// Sends posted before RTS wait in the queue: the doorbell is rung once the
// QP gets there, and they complete then.
func TestVerbsSendsWaitForRTS(t *testing.T) {
	s := newSim(t, false, qpInit)
	q := s.q
	for k := 0; k < 3; k++ {
		if err := q.PostSend(&fabric.SendWR{WRID: uint64(k), Opcode: fabric.WRSend, Flags: fabric.SendSignaled | fabric.SendInline, Buf: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if n := s.doorbel.Load(); n != 0 {
		t.Fatalf("%d doorbells before RTS", n)
	}
	if q.SendCQ().Poll(make([]fabric.WC, 4)) != 0 {
		t.Fatal("completion before RTS")
	}
	q.toRTS()
	for k := 0; k < 3; k++ {
		if wc := pollOne(t, q.SendCQ()); wc.WRID != uint64(k) {
			t.Fatalf("completion %d: %+v", k, wc)
		}
	}
	if n := s.doorbel.Load(); n != 1 {
		t.Fatalf("%d doorbells at RTS, want 1", n)
	}
}

// The doorbell is written without the send queue's lock: the system call
// runs the driver's sending (rxe's requester), which another poster on the
// same QP need not wait for. Before RTS no doorbell is rung; the one rung
// at RTS is outside the lock too.
func TestVerbsDoorbellOutsideLock(t *testing.T) {
	for _, st := range []qpState{qpRTS, qpInit} {
		s := newSim(t, false, st)
		q := s.q
		var rung, free atomic.Int64
		s.onDoorbell = func() {
			rung.Add(1)
			if q.sqMu.TryLock() {
				free.Add(1)
				q.sqMu.Unlock()
			}
		}
		if err := q.PostSend(&fabric.SendWR{WRID: 1, Opcode: fabric.WRSend, Flags: fabric.SendSignaled | fabric.SendInline, Buf: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if st == qpInit {
			if rung.Load() != 0 {
				t.Fatal("doorbell before RTS")
			}
			q.toRTS()
		}
		if wc := pollOne(t, q.SendCQ()); wc.WRID != 1 || wc.Status != fabric.WCSuccess {
			t.Fatalf("state %d: completion %+v", st, wc)
		}
		if rung.Load() != 1 || free.Load() != 1 {
			t.Fatalf("state %d: %d doorbells, %d of them with the send queue's lock free", st, rung.Load(), free.Load())
		}
	}
}

// Destroy waits for a doorbell being rung (its write names the QP's handle
// on the device file, both of which destroy gives back), and later posts
// fail with EINVAL.
func TestVerbsDestroyWaitsForDoorbell(t *testing.T) {
	s := newSim(t, false, qpRTS)
	q := s.q
	s.vd.f, s.vd.refs = &Fabric{}, 2 // destroy's release leaves the simulated context open
	entered, gate := make(chan struct{}), make(chan struct{})
	s.onDoorbell = func() {
		close(entered)
		<-gate
	}
	posted := make(chan error, 1)
	go func() {
		posted <- q.PostSend(&fabric.SendWR{WRID: 1, Opcode: fabric.WRSend, Flags: fabric.SendInline, Buf: []byte("x")})
	}()
	select {
	case <-entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no doorbell")
	}
	s.onDoorbell = nil
	destroyed := make(chan struct{})
	go func() {
		_ = q.destroy()
		close(destroyed)
	}()
	select {
	case <-destroyed:
		t.Fatal("destroy returned while a doorbell was being rung")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	select {
	case <-destroyed:
	case <-time.After(5 * time.Second):
		t.Fatal("destroy did not return after the doorbell")
	}
	if err := <-posted; err != nil {
		t.Fatalf("post: %v", err)
	}
	if err := q.PostSend(&fabric.SendWR{WRID: 2, Opcode: fabric.WRSend, Flags: fabric.SendInline, Buf: []byte("x")}); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("post after destroy: %v", err)
	}
}

// After the connection is gone, work requests complete at once with
// WCWRFlushErr, in order, and wake a waiter.
func TestVerbsFlushAfterError(t *testing.T) {
	s := newSim(t, false, qpRTS)
	q := s.q
	buf := make([]byte, 64)
	m := s.region(buf, fabric.AccessLocalWrite)
	q.sqMu.Lock()
	q.rqMu.Lock()
	q.state = qpErr // what toErr leaves (its MODIFY_QP needs a kernel)
	q.rqMu.Unlock()
	q.sqMu.Unlock()
	got := make(chan fabric.WC, 1)
	go func() {
		var wc [1]fabric.WC
		for q.RecvCQ().Poll(wc[:]) == 0 {
			if err := q.RecvCQ().Wait(context.Background()); err != nil {
				return
			}
		}
		got <- wc[0]
	}()
	time.Sleep(20 * time.Millisecond)
	if err := q.PostRecv(&fabric.RecvWR{WRID: 1, Buf: buf, MR: m}); err != nil {
		t.Fatal(err)
	}
	select {
	case wc := <-got:
		if wc.WRID != 1 || wc.Status != fabric.WCWRFlushErr || wc.Opcode != fabric.WCRecv {
			t.Fatalf("flushed receive %+v", wc)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not see the flushed receive")
	}
	for k := 2; k < 5; k++ {
		if err := q.PostSend(&fabric.SendWR{WRID: uint64(k), Opcode: fabric.WRSend, Buf: buf[:8], MR: m}); err != nil {
			t.Fatal(err)
		}
	}
	wcs := make([]fabric.WC, 8)
	if n := q.SendCQ().Poll(wcs); n != 3 {
		t.Fatalf("%d flushed sends", n)
	}
	for k, wc := range wcs[:3] {
		if wc.WRID != uint64(k+2) || wc.Status != fabric.WCWRFlushErr || wc.Opcode != fabric.WCSend || wc.ByteLen != 8 {
			t.Fatalf("flushed send %d: %+v", k, wc)
		}
	}
	if s.doorbel.Load() != 0 {
		t.Fatal("a flushed send rang the doorbell")
	}
}

func TestVerbsBadRequests(t *testing.T) {
	s := newSim(t, false, qpRTS)
	other := newSim(t, false, qpRTS)
	q := s.q
	buf := make([]byte, 64)
	m := s.region(buf, fabric.AccessLocalWrite)
	ro := s.region(make([]byte, 64), 0)
	foreign := other.region(make([]byte, 64), fabric.AccessLocalWrite)
	dead := s.region(make([]byte, 64), fabric.AccessLocalWrite)
	dead.live.Store(false)
	outside := make([]byte, 8)
	for name, wr := range map[string]*fabric.SendWR{
		"nil":              nil,
		"opcode":           {Opcode: 99},
		"no region":        {Opcode: fabric.WRSend, Buf: buf},
		"other QP's":       {Opcode: fabric.WRSend, Buf: foreign.buf, MR: foreign},
		"deregistered":     {Opcode: fabric.WRSend, Buf: dead.buf, MR: dead},
		"outside":          {Opcode: fabric.WRSend, Buf: outside, MR: m},
		"read into ro":     {Opcode: fabric.WRRead, Buf: ro.buf, MR: ro},
		"inline read":      {Opcode: fabric.WRRead, Flags: fabric.SendInline, Buf: buf[:4]},
		"inline too large": {Opcode: fabric.WRSend, Flags: fabric.SendInline, Buf: make([]byte, 65)},
		"UD addressing":    {Opcode: fabric.WRSend, Buf: buf, MR: m, AH: &fabric.AHAttr{}, RemoteQPN: 1},
	} {
		if err := q.PostSend(wr); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("send %s: %v, want EINVAL", name, err)
		}
	}
	for name, wr := range map[string]*fabric.RecvWR{
		"nil":          nil,
		"no region":    {Buf: buf},
		"other QP's":   {Buf: foreign.buf, MR: foreign},
		"read-only":    {Buf: ro.buf, MR: ro},
		"outside":      {Buf: outside, MR: m},
		"deregistered": {Buf: dead.buf, MR: dead},
	} {
		if err := q.PostRecv(wr); !errors.Is(err, syscall.EINVAL) {
			t.Errorf("recv %s: %v, want EINVAL", name, err)
		}
	}
	if s.doorbel.Load() != 0 || s.sq.take() != nil || s.rq.take() != nil {
		t.Fatal("a refused request reached the queues")
	}
	// A full queue is ENOMEM.
	var err error
	for k := 0; k < 100 && err == nil; k++ {
		err = q.PostRecv(&fabric.RecvWR{Buf: buf, MR: m})
	}
	if !errors.Is(err, syscall.ENOMEM) {
		t.Fatalf("full receive queue: %v", err)
	}
	if err := q.DeregMR(foreign); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("dereg of another QP's region: %v", err)
	}
}

// pollable reports whether fd is readable now.
func pollable(t *testing.T, fd int) bool {
	t.Helper()
	p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, err := unix.Poll(p, 0)
	for err == unix.EINTR { // a signal (the runtime's preemption) is not an answer
		n, err = unix.Poll(p, 0)
	}
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// eventually waits a little for fd to reach readable == want.
func eventually(t *testing.T, fd int, want bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for pollable(t, fd) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: fd readable %v, want %v", what, !want, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestVerbsCQFdLevel checks fabric.CQ's promise on the kernel fabric: Fd is
// readable exactly while completions are queued, across partial polls,
// software completions, and notifications that come after their
// completion was taken (rxe's tasklet).
func TestVerbsCQFdLevel(t *testing.T) {
	for _, late := range []time.Duration{0, 30 * time.Millisecond} {
		t.Run(late.String(), func(t *testing.T) {
			s := newSim(t, false, qpRTS)
			s.late.Store(int64(late))
			q := s.q
			buf := make([]byte, 64)
			m := s.region(buf, fabric.AccessLocalWrite)
			fd := q.RecvCQ().Fd()
			if fd < 0 || pollable(t, fd) {
				t.Fatalf("fd %d readable on an empty queue", fd)
			}
			for k := 0; k < 8; k++ {
				if err := q.PostRecv(&fabric.RecvWR{WRID: uint64(k), Buf: buf, MR: m}); err != nil {
					t.Fatal(err)
				}
			}
			for round := 0; round < 3; round++ {
				s.deliver([]byte("a"), [4]byte{}, 0)
				s.deliver([]byte("b"), [4]byte{}, 0)
				s.deliver([]byte("c"), [4]byte{}, 0)
				eventually(t, fd, true, "three completions")
				wcs := make([]fabric.WC, 2)
				if n := q.RecvCQ().Poll(wcs); n != 2 {
					t.Fatalf("round %d: polled %d", round, n)
				}
				if !pollable(t, fd) {
					t.Fatalf("round %d: not readable with one completion left", round)
				}
				if n := q.RecvCQ().Poll(wcs); n != 1 {
					t.Fatalf("round %d: polled %d of the last", round, n)
				}
				// Late notifications make the fd readable again for a
				// moment; a look at the queue settles it.
				deadline := time.Now().Add(5 * time.Second)
				for pollable(t, fd) || time.Since(deadline.Add(-5*time.Second)) < 2*late {
					if q.RecvCQ().Poll(wcs) != 0 {
						t.Fatal("a completion out of nowhere")
					}
					if time.Now().After(deadline) {
						t.Fatalf("round %d: readable with an empty queue", round)
					}
					time.Sleep(time.Millisecond)
				}
				for k := 0; k < 3; k++ {
					if err := q.PostRecv(&fabric.RecvWR{WRID: uint64(k), Buf: buf, MR: m}); err != nil {
						t.Fatal(err)
					}
				}
			}
			// A software completion makes it readable too.
			q.rcq.push(fabric.WC{WRID: 99, Status: fabric.WCWRFlushErr})
			eventually(t, fd, true, "a software completion")
			if n := q.RecvCQ().Poll(make([]fabric.WC, 4)); n != 1 {
				t.Fatalf("software completion: polled %d", n)
			}
			eventually(t, fd, false, "drained")
		})
	}
}

// A completion whose notification comes late, after Wait armed the queue
// again, must still wake the next Wait (the late notification used up the
// new arming).
func TestVerbsCQWaitLateNotification(t *testing.T) {
	s := newSim(t, false, qpRTS)
	s.late.Store(int64(20 * time.Millisecond))
	q := s.q
	buf := make([]byte, 64)
	m := s.region(buf, fabric.AccessLocalWrite)
	for k := 0; k < 20; k++ {
		if err := q.PostRecv(&fabric.RecvWR{WRID: uint64(k), Buf: buf, MR: m}); err != nil {
			t.Fatal(err)
		}
	}
	for k := 0; k < 10; k++ {
		done := make(chan fabric.WC, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wc [1]fabric.WC
			for q.RecvCQ().Poll(wc[:]) == 0 {
				if err := q.RecvCQ().Wait(ctx); err != nil {
					t.Error(err)
					close(done)
					return
				}
			}
			done <- wc[0]
		}()
		time.Sleep(time.Duration(k%3) * 10 * time.Millisecond)
		s.deliver([]byte("x"), [4]byte{}, 0)
		if wc, ok := <-done; !ok || wc.WRID != uint64(k) {
			t.Fatalf("message %d: %+v", k, wc)
		}
	}
}

func TestVerbsCQClosed(t *testing.T) {
	s := newSim(t, false, qpRTS)
	cq := s.q.RecvCQ()
	errc := make(chan error, 1)
	go func() { errc <- cq.Wait(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	s.q.rcq.close()
	select {
	case err := <-errc:
		if !errors.Is(err, syscall.EBADF) {
			t.Fatalf("wait on a destroyed queue: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after close")
	}
	if cq.Fd() != -1 || cq.Poll(make([]fabric.WC, 1)) != 0 {
		t.Fatal("destroyed queue still usable")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.q.SendCQ().Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled wait: %v", err)
	}
}

func TestVerbsUDReceiveSource(t *testing.T) {
	s := newSim(t, true, qpRTS)
	buf := make([]byte, 128)
	m := s.region(buf, fabric.AccessLocalWrite)
	if err := s.q.PostRecv(&fabric.RecvWR{WRID: 3, Buf: buf, MR: m}); err != nil {
		t.Fatal(err)
	}
	s.deliver([]byte("datagram"), [4]byte{10, 0, 0, 9}, 0x77)
	wc := pollOne(t, s.q.RecvCQ())
	if !wc.GRH || wc.SrcQP != 0x77 || wc.Src.Addr() != netip.MustParseAddr("10.0.0.9") || wc.ByteLen != 48 ||
		string(buf[40:48]) != "datagram" {
		t.Fatalf("UD receive %+v", wc)
	}
}

func TestGRHSource(t *testing.T) {
	v4 := make([]byte, 40)
	v4[20] = 0x45
	copy(v4[32:36], []byte{192, 168, 1, 2})
	v6 := make([]byte, 40)
	v6[0] = 0x60
	a6 := netip.MustParseAddr("fd00::1").As16()
	copy(v6[8:24], a6[:])
	for _, c := range []struct {
		g    []byte
		want string
		ok   bool
	}{{v4, "192.168.1.2", true}, {v6, "fd00::1", true}, {make([]byte, 40), "", false}, {v4[:39], "", false}} {
		a, ok := grhSource(c.g)
		if ok != c.ok || (ok && a.String() != c.want) {
			t.Errorf("grhSource: %v %v, want %s %v", a, ok, c.want, c.ok)
		}
	}
	if htobe32(0x11223344) != [2]uint32{0x44332211, 0x11223344}[boolIdx(bigEndianHost())] || htobe32(htobe32(7)) != 7 {
		t.Fatal("htobe32")
	}
}

func boolIdx(b bool) int {
	if b {
		return 1
	}
	return 0
}

func bigEndianHost() bool { return htobe32(1) == 1 }

func TestProviderFor(t *testing.T) {
	if p, err := providerFor("rxe0", driverRXE, ""); err != nil || p.Name() != "rxe" {
		t.Fatalf("rxe: %v %v", p, err)
	}
	if p, err := providerFor("siw0", driverUnknown, "siw"); err != nil || p.Name() != "siw" {
		t.Fatalf("siw by name: %v %v", p, err)
	}
	for _, c := range []struct {
		id   uint32
		name string
		want string
	}{{driverMLX5, "", "mlx5"}, {driverIRDMA, "", "irdma"}, {driverEFA, "", "efa"}, {0, "hfi1", "hfi1"}} {
		_, err := providerFor("dev0", c.id, c.name)
		if !errors.Is(err, syscall.EOPNOTSUPP) || !strings.Contains(err.Error(), "needs the "+c.want+" verbs provider") {
			t.Errorf("%d %q: %v", c.id, c.name, err)
		}
	}
}

func TestGIDTable(t *testing.T) {
	port := filepath.Join(t.TempDir(), "rxe0", "ports", "1")
	for _, d := range []string{"gids", "gid_attrs/types"} {
		if err := os.MkdirAll(filepath.Join(port, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(k, gid, typ string) {
		_ = os.WriteFile(filepath.Join(port, "gids", k), []byte(gid+"\n"), 0o644)
		_ = os.WriteFile(filepath.Join(port, "gid_attrs", "types", k), []byte(typ+"\n"), 0o644)
	}
	write("0", "fe80:0000:0000:0000:9c63:6fff:fec2:c2d0", "IB/RoCE v1")
	write("1", "fe80:0000:0000:0000:9c63:6fff:fec2:c2d0", "RoCE v2")
	write("2", "0000:0000:0000:0000:0000:ffff:0a00:0001", "IB/RoCE v1")
	write("3", "0000:0000:0000:0000:0000:ffff:0a00:0001", "RoCE v2")
	write("4", "0000:0000:0000:0000:0000:0000:0000:0000", "")
	f := New(WithSysfsRoot(filepath.Dir(filepath.Dir(filepath.Dir(port)))))
	vd := &verbsDev{f: f, name: "rxe0"}
	if k, ok := vd.sgidIndex(netip.MustParseAddr("10.0.0.1")); !ok || k != 3 {
		t.Fatalf("sgid of 10.0.0.1: %d %v", k, ok)
	}
	if _, ok := vd.sgidIndex(netip.MustParseAddr("10.0.0.2")); ok {
		t.Fatal("found a GID for an address the port does not have")
	}
	v4 := netip.MustParseAddr("::ffff:10.0.0.2").As16()
	if !vd.gidFits(3, v4) || vd.gidFits(2, v4) || vd.gidFits(1, v4) || vd.gidFits(9, v4) {
		t.Fatal("gidFits")
	}
}

// TestVerbsNoAllocation: posting and completing a message allocates
// nothing, on either side.
func TestVerbsNoAllocation(t *testing.T) {
	s := newSim(t, false, qpRTS)
	q := s.q
	buf := make([]byte, 64)
	m := s.region(buf, fabric.AccessLocalWrite)
	swr := &fabric.SendWR{WRID: 1, Opcode: fabric.WRSend, Flags: fabric.SendSignaled, Buf: buf[:32], MR: m}
	rwr := &fabric.RecvWR{WRID: 2, Buf: buf, MR: m}
	wcs := make([]fabric.WC, 4)
	scq, rcq := q.SendCQ(), q.RecvCQ()
	msg := []byte("m")
	allocs := testing.AllocsPerRun(200, func() {
		if err := q.PostRecv(rwr); err != nil {
			t.Fatal(err)
		}
		s.deliver(msg, [4]byte{}, 0)
		for rcq.Poll(wcs) == 0 {
		}
		if err := q.PostSend(swr); err != nil {
			t.Fatal(err)
		}
		for scq.Poll(wcs) == 0 {
		}
	})
	// deliver (the simulated kernel, test-side) allocates for its WC
	// encoding on some paths; the data path must add nothing.
	if allocs > 0 {
		t.Fatalf("%v allocations per message", allocs)
	}
}

// TestVerbsBusyPollCommands: a busy-polling ping-pong (queues never
// armed, no Fd) writes one command per message sent, its doorbell, as
// rdma-core's rxe provider does; polling, empty or not, writes none.
func TestVerbsBusyPollCommands(t *testing.T) {
	s := newSim(t, false, qpRTS)
	q := s.q
	buf := make([]byte, 64)
	m := s.region(buf, fabric.AccessLocalWrite)
	wcs := make([]fabric.WC, 4)
	scq, rcq := q.SendCQ(), q.RecvCQ()
	const n = 100
	for k := 0; k < n; k++ {
		if err := q.PostRecv(&fabric.RecvWR{WRID: 2, Buf: buf, MR: m}); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 10; j++ {
			if rcq.Poll(wcs) != 0 || scq.Poll(wcs) != 0 {
				t.Fatal("completion before any message")
			}
		}
		s.deliver([]byte("ping"), [4]byte{}, 0)
		waitFor(t, "the receive", func() bool { return rcq.Poll(wcs) == 1 })
		if err := q.PostSend(&fabric.SendWR{WRID: 1, Opcode: fabric.WRSend, Flags: fabric.SendSignaled, Buf: buf[:4], MR: m}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the send", func() bool { return scq.Poll(wcs) == 1 })
	}
	if c, d := s.cmds.Load(), s.doorbel.Load(); c != n || d != n {
		t.Fatalf("%d commands, %d doorbells for %d messages sent; want one doorbell each", c, d, n)
	}
}

// BenchmarkVerbsPostPoll is one message each way through the glue and the
// rxe provider, against the simulated kernel: a posted receive, a
// delivered message, its completion; a posted send, its doorbell, its
// completion.
func BenchmarkVerbsPostPoll(b *testing.B) {
	s := newSim(b, false, qpRTS)
	q := s.q
	buf := make([]byte, 64)
	m := s.region(buf, fabric.AccessLocalWrite)
	swr := &fabric.SendWR{WRID: 1, Opcode: fabric.WRSend, Flags: fabric.SendSignaled, Buf: buf[:32], MR: m}
	rwr := &fabric.RecvWR{WRID: 2, Buf: buf, MR: m}
	wcs := make([]fabric.WC, 4)
	scq, rcq := q.SendCQ(), q.RecvCQ()
	msg := []byte("m")
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		_ = q.PostRecv(rwr)
		s.deliver(msg, [4]byte{}, 0)
		for rcq.Poll(wcs) == 0 {
		}
		_ = q.PostSend(swr)
		for scq.Poll(wcs) == 0 {
		}
	}
}

// TestVerbsAsyncEvents: a QP's fatal async event puts it in the error
// state, as the software fabric's connection loss does: later work
// requests flush at once. Events for unknown elements and non-QP events
// are ignored, and the loop ends when the context closes.
func TestVerbsAsyncEvents(t *testing.T) {
	s := newSim(t, false, qpRTS)
	vd, q := s.vd, s.q
	vd.async = make(chan struct{})
	q.uhandle = vd.addQP(q)
	go vd.asyncLoop()
	write := func(ev uverbs.AsyncEvent) {
		b := make([]byte, uverbs.AsyncEventSize)
		_ = ev.Encode(b)
		if _, err := unix.Write(s.async, b); err != nil {
			t.Fatal(err)
		}
	}
	write(uverbs.AsyncEvent{Element: 999, Type: uverbs.EventQPFatal})       // no such QP
	write(uverbs.AsyncEvent{Element: 1, Type: uverbs.EventPortActive})      // a port event
	write(uverbs.AsyncEvent{Element: q.uhandle, Type: uverbs.EventCommEst}) // tells the CM (here: a destroyed id)
	time.Sleep(20 * time.Millisecond)
	q.sqMu.Lock()
	st := q.state
	q.sqMu.Unlock()
	if st != qpRTS {
		t.Fatalf("state %d after harmless events", st)
	}
	write(uverbs.AsyncEvent{Element: q.uhandle, Type: uverbs.EventQPFatal})
	waitFor(t, "the QP in error", func() bool {
		q.sqMu.Lock()
		defer q.sqMu.Unlock()
		return q.state == qpErr
	})
	if err := q.PostSend(&fabric.SendWR{WRID: 5, Opcode: fabric.WRSend, Flags: fabric.SendInline, Buf: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if wc := pollOne(t, q.SendCQ()); wc.WRID != 5 || wc.Status != fabric.WCWRFlushErr {
		t.Fatalf("send after QP_FATAL: %+v", wc)
	}
	_ = vd.ctx.Close()
	select {
	case <-vd.async:
	case <-time.After(10 * time.Second):
		t.Fatal("the async loop did not end with its context")
	}
}

// FuzzGRHSource parses receive GRHs, which a peer's packet fills: never a
// panic, and an address only from a GRH of version 4 or 6.
func FuzzGRHSource(f *testing.F) {
	v4 := make([]byte, 40)
	v4[20] = 0x45
	f.Add(v4)
	f.Add(append([]byte{0x60}, make([]byte, 39)...))
	f.Add([]byte{1, 2})
	f.Fuzz(func(t *testing.T, g []byte) {
		a, ok := grhSource(g)
		if ok != a.IsValid() {
			t.Fatalf("ok %v with %v", ok, a)
		}
		if ok && len(g) >= 40 && g[20]>>4 != 4 && g[0]>>4 != 6 {
			t.Fatalf("address %v from a GRH of neither version", a)
		}
	})
}

// TestVerbsCQOnClose: a destroyed queue calls its OnClose hooks after Fd
// turns -1 and while the descriptor Fd gave is still open (fabric.CQ's
// contract for queues that cannot make it readable: a reactor drops its
// duplicate from the hook); a stopped hook is not called, and a hook
// registered after the destroy never is.
func TestVerbsCQOnClose(t *testing.T) {
	s := newSim(t, false, qpRTS)
	cq := s.q.rcq
	fd := cq.Fd()
	if fd < 0 {
		t.Fatal("no descriptor")
	}
	var ran, stopped int
	var fdAtHook int
	var open bool
	cq.OnClose(func() {
		ran++
		fdAtHook = cq.Fd()
		_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		open = err == nil
	})
	stop := cq.OnClose(func() { stopped++ })
	if !stop() || stop() {
		t.Fatal("stop: want true once, then false")
	}
	cq.close()
	if ran != 1 || stopped != 0 {
		t.Fatalf("hooks run %d (want 1), stopped hook run %d (want 0)", ran, stopped)
	}
	if fdAtHook != -1 || !open {
		t.Fatalf("at the hook: Fd %d (want -1), descriptor open %v (want true)", fdAtHook, open)
	}
	late := false
	if cq.OnClose(func() { late = true })() {
		t.Fatal("a hook registered after destroy reports it was registered")
	}
	cq.close()
	if late || ran != 1 {
		t.Fatal("hooks ran again on a second close")
	}
}

// TestVerbsErrStateOnce: the QP is moved to ERR once per connection end.
// A disconnect moves it there (rdma_disconnect) and DISCONNECTED does
// again (in either order), so the second needs no MODIFY_QP; on iWARP the
// disconnect's SQD is still followed by ERR, and an ERR the kernel refused
// is tried again by the next one.
func TestVerbsErrStateOnce(t *testing.T) {
	const sqd, errState = uverbs.QPStateSQD, uverbs.QPStateErr
	refused := errors.New("refused")
	tests := []struct {
		name  string
		iwarp bool
		steps []string // "disconnect", "event", "refuse", "accept"
		want  []uint8  // the MODIFY_QP states written
	}{
		{"disconnect then DISCONNECTED", false, []string{"disconnect", "event"}, []uint8{errState}},
		{"DISCONNECTED then disconnect", false, []string{"event", "disconnect", "event"}, []uint8{errState}},
		{"iWARP: SQD then ERR", true, []string{"disconnect", "event", "event", "disconnect"}, []uint8{sqd, errState}},
		{"refused ERR is retried", false, []string{"refuse", "disconnect", "accept", "event", "event"}, []uint8{errState, errState}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, false, qpRTS)
			s.vd.ctx.SetFakeExec(s.command)
			s.vd.iwarp = tc.iwarp
			q := s.q
			for _, st := range tc.steps {
				switch st {
				case "disconnect":
					q.shutdown()
				case "event":
					q.fail()
				case "refuse", "accept":
					s.mu.Lock()
					s.modErr = nil
					if st == "refuse" {
						s.modErr = refused
					}
					s.mu.Unlock()
				}
			}
			s.mu.Lock()
			got := append([]uint8(nil), s.mods...)
			s.mu.Unlock()
			if !slices.Equal(got, tc.want) {
				t.Fatalf("MODIFY_QP states %v, want %v", got, tc.want)
			}
			q.sqMu.Lock()
			st := q.state
			q.sqMu.Unlock()
			if st != qpErr {
				t.Fatalf("state %d, want qpErr", st)
			}
		})
	}
}
