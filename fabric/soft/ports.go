package soft

import (
	"fmt"
	"net/netip"
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// transport is the kind of OS socket behind an id: TCP for RC, UDP for UD.
type transport uint8

const (
	tcp transport = iota
	udp
)

func (t transport) sockType() int {
	if t == udp {
		return unix.SOCK_DGRAM
	}
	return unix.SOCK_STREAM
}

// binding is an id's hold on a port: an entry in the fabric's port table
// and, until a connection or listener takes it over, the OS socket bound to
// the address (SO_REUSEADDR, as siw binds its sockets).
type binding struct {
	tr        transport
	addr      netip.AddrPort // bound address, possibly a wildcard
	reuse     bool
	afonly    bool
	listening bool
	fd        int // -1 once taken
}

// takeFD hands the bound socket to a connection or listener.
func (b *binding) takeFD() int {
	fd := b.fd
	b.fd = -1
	return fd
}

type portKey struct {
	tr   transport
	port uint16
}

// portTable is the rdma_cm port space of a fabric: which ids hold which
// ports, with the kernel's conflict rules (cma_check_port).
type portTable struct {
	mu sync.Mutex
	m  map[portKey][]*binding
}

// conflict returns the errno the kernel gives when b cannot share its port
// with what holds it: EADDRNOTAVAIL when either address is a wildcard,
// EADDRINUSE when both are the same address. reuse says whether b's
// SO_REUSEADDR-like option counts (it does not when b starts listening).
func (t *portTable) conflictLocked(b *binding, reuse bool) error {
	for _, cur := range t.m[portKey{b.tr, b.addr.Port()}] {
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

func (t *portTable) addLocked(b *binding) {
	if t.m == nil {
		t.m = make(map[portKey][]*binding)
	}
	k := portKey{b.tr, b.addr.Port()}
	t.m[k] = append(t.m[k], b)
}

// remove releases b's port and closes its socket if nobody took it.
func (t *portTable) remove(b *binding) {
	if b == nil {
		return
	}
	t.mu.Lock()
	k := portKey{b.tr, b.addr.Port()}
	list := t.m[k]
	for i, cur := range list {
		if cur == b {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(t.m, k)
	} else {
		t.m[k] = list
	}
	fd := b.takeFD()
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

// bind reserves addr for an id: the port table first (for an explicit
// port), then an OS socket bound with SO_REUSEADDR, which also catches ports
// other processes listen on. Port 0 lets the OS pick a port, retried if it
// clashes with the table.
func (t *portTable) bind(tr transport, addr netip.AddrPort, reuse, afonly bool) (*binding, error) {
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	for attempt := 0; attempt < 16; attempt++ {
		b := &binding{tr: tr, addr: addr, reuse: reuse, afonly: afonly, fd: -1}
		if addr.Port() != 0 {
			t.mu.Lock()
			err := t.conflictLocked(b, reuse)
			if err == nil {
				t.addLocked(b) // hold the port while the socket is bound
			}
			t.mu.Unlock()
			if err != nil {
				return nil, err
			}
		}
		fd, err := bindSocket(tr, addr, afonly)
		if err != nil {
			if addr.Port() != 0 {
				t.remove(b)
			}
			return nil, err
		}
		b.fd = fd
		if addr.Port() != 0 {
			return b, nil
		}
		b.addr = netip.AddrPortFrom(addr.Addr(), localAddr(fd).Port())
		t.mu.Lock()
		err = t.conflictLocked(b, reuse)
		if err == nil {
			t.addLocked(b)
		}
		t.mu.Unlock()
		if err == nil {
			return b, nil
		}
		_ = unix.Close(fd) // the OS reused a port the table holds: try another
	}
	return nil, fmt.Errorf("soft: no free port: %w", syscall.EADDRNOTAVAIL)
}

// bindSocket opens a socket of the right family and type bound to addr.
func bindSocket(tr transport, addr netip.AddrPort, afonly bool) (int, error) {
	fam := family(addr.Addr())
	fd, err := newSocket(fam, tr.sockType())
	if err != nil {
		return -1, err
	}
	// SO_REUSEADDR, as siw sets it, but only after choosing an ephemeral
	// port: with it set, bind(port 0) searches a half of the range and
	// skips every TIME_WAIT socket there, which after many connections
	// takes milliseconds per bind and ends in EADDRNOTAVAIL.
	if addr.Port() != 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	}
	if fam == unix.AF_INET6 {
		v := 0
		if afonly {
			v = 1
		}
		_ = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v)
	}
	if err := unix.Bind(fd, sockaddr(addr)); err != nil {
		_ = unix.Close(fd)
		return -1, fmt.Errorf("soft: bind %s: %w", addr, os.NewSyscallError("bind", err))
	}
	if addr.Port() == 0 {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	}
	return fd, nil
}
