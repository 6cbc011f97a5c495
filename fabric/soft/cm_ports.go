package soft

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"sync"
	"syscall"

	"github.com/cmrt/cmrt/internal/portrange"
	"golang.org/x/sys/unix"
)

// proto is the kind of OS socket behind an id's port: TCP for RC, UDP for
// UD.
type proto uint8

const (
	protoTCP proto = iota
	protoUDP
)

func (t proto) sockType() int {
	if t == protoUDP {
		return unix.SOCK_DGRAM
	}
	return unix.SOCK_STREAM
}

// binding is an id's hold on a port: an entry in the fabric's port table
// and the OS socket bound to the address. A TCP binding's socket
// (SO_REUSEADDR, as siw binds its sockets) is its own until a connection or
// listener takes it over; a UDP binding's is a udPort, which bindings
// sharing the port with OptionReuseAddr share.
type binding struct {
	addr netip.AddrPort // bound address, possibly a wildcard
	fd   int            // TCP: -1 once taken; UDP: -1
	ud   *udPort        // UDP: the socket, maybe shared
	// next is the next binding holding the same port in the port table
	// (its list, in the order they were added): the table keeps no slice
	// per port, one allocation per bound id less.
	next      *binding
	tr        proto
	reuse     bool
	afonly    bool
	listening bool
	auto      bool // the fabric chose the port (bound to port 0)
}

// sockFD returns the binding's socket (a UDP binding's shared one), or -1
// once a TCP binding's was taken.
func (b *binding) sockFD() int {
	if b.ud != nil {
		return b.ud.fd
	}
	return b.fd
}

// takeFD hands the bound socket to a connection or listener.
func (b *binding) takeFD() int {
	fd := b.fd
	b.fd = -1
	return fd
}

type portKey struct {
	tr   proto
	port uint16
}

// portTable is the rdma_cm port space of a fabric: which ids hold which
// ports, with the kernel's conflict rules (cma_check_port).
type portTable struct {
	mu sync.Mutex
	m  map[portKey]*binding // the first binding of each port (binding.next)

	// low and high bound the TCP ports rangePort picks from (WithPortRange,
	// or tests: export_test.go), and first picks where its scan starts
	// among n ports (tests); zero values mean ip_local_port_range and a
	// random start.
	low, high int
	first     func(n int) int
}

// conflictLocked returns the errno the kernel gives when b cannot share its
// port with what holds it: EADDRNOTAVAIL when either address is a
// wildcard, EADDRINUSE when both are the same address. reuse says whether
// b's SO_REUSEADDR-like option counts (it does not when b starts
// listening). Called with mu held.
func (t *portTable) conflictLocked(b *binding, reuse bool) error {
	for cur := t.m[portKey{b.tr, b.addr.Port()}]; cur != nil; cur = cur.next {
		if cur == b {
			continue
		}
		if reuse && cur.reuse && !cur.listening {
			continue
		}
		a, c := b.addr.Addr(), cur.addr.Addr()
		if b.afonly && cur.afonly && a.Is4() != c.Is4() {
			continue
		}
		if a.IsUnspecified() || c.IsUnspecified() {
			return fmt.Errorf("soft: port %d is held by %s: %w", b.addr.Port(), cur.addr, syscall.EADDRNOTAVAIL)
		}
		if a == c {
			return fmt.Errorf("soft: %s is in use: %w", b.addr, syscall.EADDRINUSE)
		}
	}
	return nil
}

// addLocked puts b last in its port's list. Called with mu held.
func (t *portTable) addLocked(b *binding) {
	if t.m == nil {
		t.m = make(map[portKey]*binding)
	}
	k := portKey{b.tr, b.addr.Port()}
	b.next = nil
	cur := t.m[k]
	if cur == nil {
		t.m[k] = b
		return
	}
	for cur.next != nil {
		cur = cur.next
	}
	cur.next = b
}

// remove releases b's port and closes its socket if nobody took it.
func (t *portTable) remove(b *binding) {
	if b == nil {
		return
	}
	t.mu.Lock()
	k := portKey{b.tr, b.addr.Port()}
	if head := t.m[k]; head == b {
		if b.next == nil {
			delete(t.m, k)
		} else {
			t.m[k] = b.next
		}
	} else {
		for cur := head; cur != nil; cur = cur.next {
			if cur.next == b {
				cur.next = b.next
				break
			}
		}
	}
	b.next = nil
	fd := b.takeFD()
	if p := b.ud; p != nil {
		b.ud = nil
		if p.refs--; p.refs == 0 {
			// The ids' udSocks holding it closed before their bindings
			// went: nothing polls it any more.
			fd = p.fd
		}
	}
	t.mu.Unlock()
	if fd >= 0 {
		_ = unix.Close(fd)
	}
}

// listen checks that b may listen: the kernel re-checks its port without
// the reuse option, and a listener is never reusable again.
func (t *portTable) listen(b *binding) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.conflictLocked(b, false); err != nil {
		return err
	}
	b.listening, b.reuse = true, false
	return nil
}

// bind reserves addr for an id: the port table first, then an OS socket,
// which also catches ports other processes hold. Port 0 picks a free port:
// for TCP from the ephemeral range, as the kernel's rdma_cm does
// (cma_alloc_any_port), so TIME_WAIT sockets never block or slow it; for
// UDP the OS picks (see anyPort).
func (t *portTable) bind(tr proto, addr netip.AddrPort, reuse, afonly bool) (*binding, error) {
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if addr.Port() == 0 {
		var b *binding
		var err error
		if tr == protoUDP {
			b, err = t.anyPort(tr, addr, reuse, afonly)
		} else {
			b, err = t.rangePort(tr, addr, reuse, afonly, 0)
		}
		if err == nil {
			b.auto = true
		}
		return b, err
	}
	return t.explicitPort(tr, addr, reuse, afonly)
}

// explicitPort binds addr's port: the table decides the rdma_cm conflicts,
// the OS those with other processes' sockets. A UDP binding that the table
// lets share the port (OptionReuseAddr on both, neither listening) shares
// the socket of a binding whose address covers its own: UDP sockets are
// never bound with SO_REUSEADDR, which would let any other local socket
// share the port and take its unicast datagrams.
func (t *portTable) explicitPort(tr proto, addr netip.AddrPort, reuse, afonly bool) (*binding, error) {
	b := &binding{tr: tr, addr: addr, reuse: reuse, afonly: afonly, fd: -1}
	t.mu.Lock()
	err := t.conflictLocked(b, reuse)
	if err == nil {
		if tr == protoUDP && reuse {
			if p := t.sharedUDPLocked(b); p != nil {
				p.refs++
				b.ud = p
			}
		}
		t.addLocked(b) // hold the port while the socket is bound
	}
	t.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if b.ud != nil {
		return b, nil
	}
	fd, err := bindSocket(tr, addr, afonly)
	if err != nil {
		t.remove(b)
		return nil, err
	}
	t.setSocket(b, fd)
	return b, nil
}

// setSocket gives b the socket bound for it.
func (t *portTable) setSocket(b *binding, fd int) {
	if b.tr != protoUDP {
		b.fd = fd
		return
	}
	p := newUDPort(fd, b.addr)
	t.mu.Lock()
	b.ud = p
	t.mu.Unlock()
}

// sharedUDPLocked returns the socket of another UDP binding on b's port
// that b may share: one bound to b's address, or to the wildcard of its
// family. The table has already checked that every binding b overlaps
// allows it. t.mu is held.
func (t *portTable) sharedUDPLocked(b *binding) *udPort {
	a := b.addr.Addr()
	for cur := t.m[portKey{b.tr, b.addr.Port()}]; cur != nil; cur = cur.next {
		p := cur.ud
		if cur == b || p == nil {
			continue
		}
		c := p.addr.Addr()
		if c == a || (c.IsUnspecified() && c.Is4() == a.Is4()) {
			return p
		}
	}
	return nil
}

// rangePort binds a TCP port from the ephemeral range other than skip,
// starting at a random one and going up, as cma_alloc_any_port does.
// SO_REUSEADDR (set for an explicit port) lets a port whose old connections
// are in TIME_WAIT be bound again at once; a port another socket really
// holds is skipped.
func (t *portTable) rangePort(tr proto, addr netip.AddrPort, reuse, afonly bool, skip uint16) (*binding, error) {
	low, high := t.low, t.high
	if low == 0 {
		low, high = ephemeralRange()
	}
	n := high - low + 1
	first := rand.IntN
	if t.first != nil {
		first = t.first
	}
	start := first(n)
	for k := 0; k < n; k++ {
		port := uint16(low + (start+k)%n)
		if port == skip {
			continue
		}
		b := &binding{tr: tr, reuse: reuse, afonly: afonly, fd: -1,
			addr: netip.AddrPortFrom(addr.Addr(), port)}
		t.mu.Lock()
		if t.conflictLocked(b, reuse) != nil {
			t.mu.Unlock()
			continue // an id of this fabric holds it
		}
		t.addLocked(b)
		t.mu.Unlock()
		fd, err := bindSocket(tr, b.addr, afonly)
		if err == nil {
			t.setSocket(b, fd)
			return b, nil
		}
		t.remove(b)
		if !errors.Is(err, syscall.EADDRINUSE) && !errors.Is(err, syscall.EACCES) {
			return nil, err // not about the port: the address, the system
		}
		// Another socket really holds the port, or it is reserved.
	}
	return nil, fmt.Errorf("soft: no free port in %d-%d: %w", low, high, syscall.EADDRNOTAVAIL)
}

// move gives an auto-bound TCP binding whose socket could not connect
// another port, releasing the old one (whose socket the caller took and
// closes). Linux's own autobind skips ports whose connection to the same
// peer still exists (TIME_WAIT); a port chosen from the range at bind time
// cannot know the peer, so Connect moves the id when connect(2) says
// EADDRNOTAVAIL.
func (t *portTable) move(b *binding) (*binding, error) {
	nb, err := t.rangePort(b.tr, netip.AddrPortFrom(b.addr.Addr(), 0), b.reuse, b.afonly, b.addr.Port())
	if err != nil {
		return nil, err
	}
	nb.auto = true
	t.remove(b)
	return nb, nil
}

// anyPort lets the OS pick a UDP port (bound without SO_REUSEADDR, which on
// UDP would let another socket share the port and its datagrams), retried
// if it clashes with the table.
func (t *portTable) anyPort(tr proto, addr netip.AddrPort, reuse, afonly bool) (*binding, error) {
	for attempt := 0; attempt < 16; attempt++ {
		fd, err := bindSocket(tr, addr, afonly)
		if err != nil {
			return nil, err
		}
		b := &binding{tr: tr, reuse: reuse, afonly: afonly, fd: -1,
			addr: netip.AddrPortFrom(addr.Addr(), localAddr(fd).Port())}
		b.ud = newUDPort(fd, b.addr)
		t.mu.Lock()
		err = t.conflictLocked(b, reuse)
		if err == nil {
			t.addLocked(b)
		}
		t.mu.Unlock()
		if err == nil {
			return b, nil
		}
		_ = unix.Close(fd) // the OS picked a port the table holds: try another
	}
	return nil, fmt.Errorf("soft: no free port: %w", syscall.EADDRNOTAVAIL)
}

// ephemeralRange returns net.ipv4.ip_local_port_range (read once), or the
// kernel's default range when it cannot be read.
var ephemeralRange = sync.OnceValues(portrange.ReadOrDefault)

// bindSocket opens a socket of the right family and type bound to addr.
func bindSocket(tr proto, addr netip.AddrPort, afonly bool) (int, error) {
	fam := family(addr.Addr())
	fd, err := newSocket(fam, tr.sockType())
	if err != nil {
		return -1, err
	}
	// SO_REUSEADDR for a chosen TCP port, as siw sets it: TIME_WAIT
	// sockets of earlier connections do not block the port. Never for UDP,
	// which has no TIME_WAIT: there it would let any local socket with the
	// option, of any user, bind the port too and receive its unicast
	// datagrams. Nor for port 0 (UDP only: anyPort).
	if addr.Port() != 0 && tr == protoTCP {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	}
	if fam == unix.AF_INET6 {
		v := 0
		if afonly {
			v = 1
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v)
	}
	if err := bindTo(fd, addr); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("soft: bind %s: %w", addr, os.NewSyscallError("bind", err))
	}
	return fd, nil
}
