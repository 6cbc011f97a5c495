package soft

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/internal/iwarp"
)

// SetPortRange makes f pick automatic TCP ports from low..high, starting
// its scan at first(n) of the n ports, so tests can choose which port an
// id gets.
func SetPortRange(f *Fabric, low, high int, first func(n int) int) {
	f.ports.mu.Lock()
	defer f.ports.mu.Unlock()
	f.ports.low, f.ports.high, f.ports.first = low, high, first
}

// SetHalfOpenLimits bounds the pools of connections without an MPA Request
// of f's listeners made after the call: perSource per source host, all in
// all.
func SetHalfOpenLimits(f *Fabric, perSource, all int) {
	f.halfOpenBounds = [2]int{perSource, all}
}

// FPDU encodes one FPDU as a peer would.
func FPDU(h iwarp.Header, payload []byte, crc bool) []byte {
	hdr, err := iwarp.AppendHeader(nil, &h)
	if err != nil {
		panic(err)
	}
	b, err := iwarp.AppendFPDU(nil, hdr, payload, crc)
	if err != nil {
		panic(err)
	}
	return b
}

// Accessors of internal state for the package's external tests (which drive
// ids, so they cannot be in package soft: package id imports this one).

// connOf returns the connection of an endpoint of a soft fabric.
func connOf(ep fabric.Endpoint) *conn {
	e := ep.(*endpoint)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.rc().conn
}

// ConnCRC reports whether the connection of ep negotiated MPA CRC32c.
func ConnCRC(ep fabric.Endpoint) bool { return connOf(ep).crc }

// ConnORD returns the initiator depth (ORD) the connection of ep settled.
func ConnORD(ep fabric.Endpoint) uint16 { return connOf(ep).ord }

// ConnP2PRequested reports whether the MPA Request the connection of ep
// received or sent asked for peer-to-peer mode.
func ConnP2PRequested(ep fabric.Endpoint) bool { return connOf(ep).req.P2P }

// OnConnLoop runs fn on the loop of the connection of ep, ordered with the
// data path's work there, and returns when it has run.
func OnConnLoop(ep fabric.Endpoint, fn func()) {
	c := connOf(ep)
	c.l.call(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		fn()
	})
}

// SendStalled reports, on the connection's loop, whether the data path of
// ep's connection still owes the peer bytes it cannot write (EPOLLOUT
// armed, a message half sent).
func SendStalled(ep fabric.Endpoint) bool {
	c := connOf(ep)
	var stalled bool
	c.l.call(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		stalled = c.out && c.dp != nil && c.dp.cur.kind != txNone
	})
	return stalled
}

// PDHasSTag reports whether the protection domain of qp (a soft QP) still
// knows the region named stag.
func PDHasSTag(qp fabric.QP, stag uint32) bool { return qp.(*rcQP).pd.mrs.lookup(stag) != nil }

// MonitorWatching returns how many ids f's address monitor watches and
// whether the monitor runs.
func MonitorWatching(f *Fabric) (int, bool) { return f.mon.watching() }

// MonitorSharesRouteSocket reports whether f's address monitor shares the
// route socket of f's routing lookups.
func MonitorSharesRouteSocket(f *Fabric) bool { return f.mon.sharesRouteSocket() }

// IdleState returns what an idle fabric may keep: its epoll loop and its
// address monitor (nil when gone), as opaque values to compare.
func IdleState(f *Fabric) (loop, monitor any) {
	f.eng.mu.Lock()
	l := f.eng.cur
	f.eng.mu.Unlock()
	f.mon.mu.Lock()
	m := f.mon.cur
	f.mon.mu.Unlock()
	if l != nil {
		loop = l
	}
	if m != nil {
		monitor = m
	}
	return loop, monitor
}

// WaitLoopExit waits until f's loop goroutine, told to stop, has returned.
func WaitLoopExit(f *Fabric) { f.eng.wait() }

// RTRSTag is the STag of the zero-length RDMA Read or Write of an MPA
// peer-to-peer RTR, which registrations never get.
const RTRSTag = rtrSTag

// MRValid reports whether the region m (of a soft fabric) is still valid:
// not invalidated by a peer's Send with Invalidate, nor deregistered.
func MRValid(m fabric.MR) bool { return m.(*mr).valid.Load() }

// Backlogged returns how many requests the RC listener behind ep holds in
// its backlog: reported and not yet read.
func Backlogged(ep any) int {
	e, ok := ep.(*endpoint)
	if !ok {
		return -1
	}
	e.mu.Lock()
	var lis *listener
	if t := e.rc(); t != nil {
		lis = t.lis
	}
	e.mu.Unlock()
	if lis == nil {
		return -1
	}
	n := 0
	lis.l.call(func() { n = int(lis.pending.Load()) })
	return n
}

// RequestPending reports whether the connection request behind ep (a
// CONNECT_REQUEST's new endpoint) still waits for its answer, its
// connection up.
func RequestPending(ep any) bool {
	e, ok := ep.(*endpoint)
	if !ok {
		return false
	}
	e.mu.Lock()
	var c *conn
	if t := e.rc(); t != nil {
		c = t.conn
	}
	e.mu.Unlock()
	if c == nil {
		return false
	}
	pending := false
	c.l.call(func() {
		c.mu.Lock()
		pending = c.state == csReqRecv
		c.mu.Unlock()
	})
	return pending
}

// HoldLoopAfterUDSockStart makes f's loops look at their descriptors
// after every task, and the next UD socket f attaches run its start, then
// hold its loop in a task until release is called: work posted meanwhile
// runs after the loop's next look, so a test can put a datagram before it.
func HoldLoopAfterUDSockStart(f *Fabric) (release func()) {
	f.eng.testTaskBudget = 1
	rel := make(chan struct{})
	f.testHookUDSockPosted = func(l *loop) {
		f.testHookUDSockPosted = nil
		started := make(chan struct{})
		l.post(func() { close(started); <-rel })
		<-started
	}
	var once sync.Once
	return func() { once.Do(func() { close(rel) }) }
}

// StallLoop blocks the loop of ep's connection (with a task that holds no
// connection's lock) until the returned function is called.
func StallLoop(ep fabric.Endpoint) (release func()) {
	c := connOf(ep)
	stalled, rel := make(chan struct{}), make(chan struct{})
	c.l.post(func() { close(stalled); <-rel })
	<-stalled
	var once sync.Once
	return func() { once.Do(func() { close(rel) }) }
}

// HoldLoop keeps f's loop busy with a task that waits until the returned
// function is called (idempotent): work posted to the loop meanwhile waits
// too, so a test sees what a call does without it.
func HoldLoop(f *Fabric) (release func()) {
	l, err := f.eng.acquire()
	if err != nil {
		panic(err)
	}
	running, hold := make(chan struct{}), make(chan struct{})
	l.post(func() {
		close(running)
		<-hold
	})
	<-running
	return sync.OnceFunc(func() {
		close(hold)
		f.eng.release(l)
	})
}

// HasDataPath reports, on the connection's loop, whether the connection of
// ep holds a data path (an idle one drops it: rcPath.dropIdle).
func HasDataPath(ep fabric.Endpoint) bool {
	c := connOf(ep)
	var has bool
	c.l.call(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		has = c.dp != nil
	})
	return has
}

// DirectWaiting reports whether a goroutine waiting on one of qp's
// completion queues is parked in the netpoller on its connection's socket,
// reading the connection itself (rc_rxwait.go).
func DirectWaiting(qp fabric.QP) bool {
	q := qp.(*rcQP)
	return q.rcq.parked.Load() != nil || q.scq.parked.Load() != nil
}

// DirectClaimed reports whether a direct reader has the read side of ep's
// connection (the loop does not poll it for readable).
func DirectClaimed(ep fabric.Endpoint) bool {
	c := connOf(ep)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rxw != nil && c.rxw.claimed
}

// CountSockNames runs fn and returns the getsockname(2) and getpeername(2)
// calls the fabric made meanwhile (fn must not run alongside other tests).
func CountSockNames(fn func()) int {
	var n atomic.Int64
	old := sockName
	sockName = func(trap uintptr, fd int) netip.AddrPort {
		n.Add(1)
		return rawSockName(trap, fd)
	}
	defer func() { sockName = old }()
	fn()
	return int(n.Load())
}

// CountAccepts counts the accept4 calls of listeners while fn runs: those
// that accepted a connection and those that found the queue empty.
func CountAccepts(fn func()) (accepted, empty int) {
	var ok, none atomic.Int64
	h := func(err error) {
		switch err {
		case nil:
			ok.Add(1)
		case unix.EAGAIN:
			none.Add(1)
		}
	}
	acceptHook.Store(&h)
	defer acceptHook.Store(nil)
	fn()
	return int(ok.Load()), int(none.Load())
}

// NoDelay reports whether the socket of ep's connection, and that of its
// listener when ep is a listening id, have TCP_NODELAY set.
func NoDelay(ep fabric.Endpoint) bool {
	e := ep.(*endpoint)
	e.mu.Lock()
	fd := -1
	if t := e.rc(); t.lis != nil {
		fd = t.lis.fd
	} else if t.conn != nil {
		fd = t.conn.fd
	}
	e.mu.Unlock()
	v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NODELAY)
	return err == nil && v == 1
}

// LingerArms reports how many times a returning direct wait armed the
// linger timer of ep's connection (0 without a direct reader).
func LingerArms(ep fabric.Endpoint) int {
	c := connOf(ep)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rxw == nil {
		return 0
	}
	return c.rxw.arms
}

// LoopReads reports how many times the loop read ep's connection while
// it had a data path (in RTS).
func LoopReads(ep fabric.Endpoint) int {
	c := connOf(ep)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dp == nil {
		return 0
	}
	return int(c.dp.loopReads)
}

// PathMSSRead reports, on the connection's loop, whether the data path of
// ep's connection has read the socket's MSS (rcPath.maxSeg); false when
// there is no path.
func PathMSSRead(ep fabric.Endpoint) bool {
	c := connOf(ep)
	var read bool
	c.l.call(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		read = c.dp != nil && c.dp.maxUntag != 0
	})
	return read
}

// CloseConnInEpoll closes the connection of ep at once, on its loop, and
// reports whether an epoll set of the process still holds an item for the
// closed socket, looked at with the connection's lock still held (a
// direct reader cannot close its duplicate meanwhile).
func CloseConnInEpoll(ep fabric.Endpoint) (inSet bool, err error) {
	c := connOf(ep)
	c.l.call(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		fd := c.fd
		var st unix.Stat_t
		if err = unix.Fstat(fd, &st); err != nil {
			return
		}
		c.closeNow()
		inSet, err = EpollHolds(fd, st.Ino)
	})
	return inSet, err
}

// EpollHolds reports whether an epoll set of the process holds an item for
// descriptor number fd whose file has inode ino (from /proc/self/fdinfo).
func EpollHolds(fd int, ino uint64) (bool, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return false, err
	}
	for _, e := range ents {
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(info), "\n") {
			var tfd int
			var events, data uint64
			var pos int64
			var tino uint64
			if n, _ := fmt.Sscanf(line, "tfd: %d events: %x data: %x pos:%d ino:%x", &tfd, &events, &data, &pos, &tino); n == 5 && tfd == fd && tino == ino {
				return true, nil
			}
		}
	}
	return false, nil
}

// CountStackReads counts, until tb's cleanup, the reads into a stack
// buffer (conn.readStack), and returns the count.
func CountStackReads(tb testing.TB) func() int64 {
	var n atomic.Int64
	stackReadHook = func() { n.Add(1) }
	tb.Cleanup(func() { stackReadHook = nil })
	return n.Load
}

// CountRTRRepeats counts, until tb's cleanup, the RTR repeats (repeatRTR)
// each connection writes, and returns the count of ep's connection.
func CountRTRRepeats(tb testing.TB) func(ep fabric.Endpoint) int {
	var mu sync.Mutex
	n := map[*conn]int{}
	rtrRepeatHook = func(c *conn) {
		mu.Lock()
		n[c]++
		mu.Unlock()
	}
	tb.Cleanup(func() { rtrRepeatHook = nil })
	return func(ep fabric.Endpoint) int {
		c := connOf(ep)
		mu.Lock()
		defer mu.Unlock()
		return n[c]
	}
}

// PeerSpoke reports, on the connection's loop, whether ep's connection has
// read an FPDU from its peer (its data path's first).
func PeerSpoke(ep fabric.Endpoint) bool {
	c := connOf(ep)
	var spoke bool
	c.l.call(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		spoke = c.dp != nil && c.dp.firstRx
	})
	return spoke
}

// PathStart reports, on the connection's loop, whether the data path of
// ep's connection is past its start (no RTR or answer to send, none
// awaited, no timer) and the capacity of its tx buffer; ok is false when
// there is no path.
func PathStart(ep fabric.Endpoint) (done bool, txCap int, ok bool) {
	c := connOf(ep)
	c.l.call(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if p := c.dp; p != nil {
			done, txCap, ok = p.rtr == 0 && !p.waitRTR && !p.hold && !p.armed && p.firstRx, cap(p.tx), true
		}
	})
	return done, txCap, ok
}

// CountRouteLookups counts f's routing lookups (route) from now on; call it
// before f has ids.
func CountRouteLookups(f *Fabric) *atomic.Int64 {
	n := new(atomic.Int64)
	f.testHookRoute = func() { n.Add(1) }
	return n
}
