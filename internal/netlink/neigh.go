package netlink

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// NeighState is the state of a neighbour (ARP or NDP) entry: the kernel's
// NUD_* bits.
type NeighState uint16

// nudValid is the kernel's NUD_VALID: states with a usable link-layer
// address.
const nudValid = unix.NUD_PERMANENT | unix.NUD_NOARP | unix.NUD_REACHABLE | unix.NUD_PROBE |
	unix.NUD_STALE | unix.NUD_DELAY

// Valid reports whether the entry has a usable link-layer address, as the
// kernel's NUD_VALID: permanent, noarp, reachable, stale, delay or probe.
func (s NeighState) Valid() bool { return s&nudValid != 0 }

var neighStateNames = []struct {
	bit  NeighState
	name string
}{
	{unix.NUD_INCOMPLETE, "incomplete"}, {unix.NUD_REACHABLE, "reachable"}, {unix.NUD_STALE, "stale"},
	{unix.NUD_DELAY, "delay"}, {unix.NUD_PROBE, "probe"}, {unix.NUD_FAILED, "failed"},
	{unix.NUD_NOARP, "noarp"}, {unix.NUD_PERMANENT, "permanent"},
}

// String returns the state's names as ip-neighbour(8) prints them, joined
// by "|", or "none".
func (s NeighState) String() string {
	var parts []string
	for _, n := range neighStateNames {
		if s&n.bit != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "|")
}

// Neigh is a neighbour table entry.
type Neigh struct {
	Index        int // interface index
	Addr         netip.Addr
	State        NeighState
	HardwareAddr net.HardwareAddr // nil while unresolved
}

// parseNeigh decodes the payload of an RTM_NEWNEIGH message.
func parseNeigh(p []byte) (Neigh, error) {
	if len(p) < unix.SizeofNdMsg {
		return Neigh{}, malformed("ndmsg of %d bytes, want %d", len(p), unix.SizeofNdMsg)
	}
	family := p[0]
	n := Neigh{Index: int(int32(ne.Uint32(p[4:8]))), State: NeighState(ne.Uint16(p[8:10]))}
	a := attrs{b: p[unix.SizeofNdMsg:]}
	for typ, v, ok := a.next(); ok; typ, v, ok = a.next() {
		switch typ {
		case unix.NDA_DST:
			addr, err := attrAddr(family, typ, v)
			if err != nil {
				return Neigh{}, err
			}
			n.Addr = addr
		case unix.NDA_LLADDR:
			if len(v) > 0 {
				n.HardwareAddr = net.HardwareAddr(append([]byte(nil), v...))
			}
		}
	}
	if a.err != nil {
		return Neigh{}, a.err
	}
	if !n.Addr.IsValid() {
		return Neigh{}, malformed("neighbour without NDA_DST")
	}
	return n, nil
}

// NeighGet returns the neighbour entry of addr on interface index (one
// RTM_GETNEIGH, Linux 4.20 or later). No entry is an error matching
// syscall.ENOENT.
func (c *Conn) NeighGet(index int, addr netip.Addr) (Neigh, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, err := c.neighGet(index, addr)
	if err != nil {
		return n, fmt.Errorf("netlink: neighbour %v on interface %d: %w", addr, index, err)
	}
	return n, nil
}

func (c *Conn) neighGet(index int, addr netip.Addr) (Neigh, error) {
	if c.s == nil {
		return Neigh{}, ErrClosed
	}
	if !addr.IsValid() || index <= 0 {
		return Neigh{}, fmt.Errorf("address %v, interface %d: %w", addr, index, syscall.EINVAL)
	}
	addr = addr.Unmap().WithZone("")
	family, _ := familyOf(addr)
	seq := c.nextSeq()
	c.req.begin(unix.RTM_GETNEIGH, 0, seq)
	c.req.ndmsg(unix.NdMsg{Family: family, Ifindex: int32(index)})
	c.req.attrAddr(unix.NDA_DST, addr)
	var n Neigh
	got := false
	_, err := c.roundTrip("RTM_GETNEIGH", seq, modeGet|modeSmall, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWNEIGH {
			return malformed("RTM_GETNEIGH answered with message type %d", typ)
		}
		var err error
		n, err = parseNeigh(p)
		got = err == nil
		return err
	})
	if err == nil && !got {
		err = malformed("RTM_GETNEIGH: no neighbour in reply")
	}
	return n, err
}
