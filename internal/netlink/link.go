package netlink

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// LinkFlags holds the IFF_* device flags of a link (ifi_flags), e.g.
// unix.IFF_UP, unix.IFF_LOOPBACK, unix.IFF_RUNNING, unix.IFF_LOWER_UP.
type LinkFlags uint32

// Up reports IFF_UP (administratively up).
func (f LinkFlags) Up() bool { return f&unix.IFF_UP != 0 }

// Loopback reports IFF_LOOPBACK.
func (f LinkFlags) Loopback() bool { return f&unix.IFF_LOOPBACK != 0 }

// Running reports IFF_RUNNING (operationally up).
func (f LinkFlags) Running() bool { return f&unix.IFF_RUNNING != 0 }

// LowerUp reports IFF_LOWER_UP (carrier present).
func (f LinkFlags) LowerUp() bool { return f&unix.IFF_LOWER_UP != 0 }

var linkFlagNames = []struct {
	bit  LinkFlags
	name string
}{
	{unix.IFF_UP, "UP"}, {unix.IFF_BROADCAST, "BROADCAST"}, {unix.IFF_DEBUG, "DEBUG"},
	{unix.IFF_LOOPBACK, "LOOPBACK"}, {unix.IFF_POINTOPOINT, "POINTOPOINT"},
	{unix.IFF_NOTRAILERS, "NOTRAILERS"}, {unix.IFF_RUNNING, "RUNNING"}, {unix.IFF_NOARP, "NOARP"},
	{unix.IFF_PROMISC, "PROMISC"}, {unix.IFF_ALLMULTI, "ALLMULTI"}, {unix.IFF_MASTER, "MASTER"},
	{unix.IFF_SLAVE, "SLAVE"}, {unix.IFF_MULTICAST, "MULTICAST"}, {unix.IFF_PORTSEL, "PORTSEL"},
	{unix.IFF_AUTOMEDIA, "AUTOMEDIA"}, {unix.IFF_DYNAMIC, "DYNAMIC"}, {unix.IFF_LOWER_UP, "LOWER_UP"},
	{unix.IFF_DORMANT, "DORMANT"}, {unix.IFF_ECHO, "ECHO"},
}

// String returns the flags as "UP|LOOPBACK|...", the names ip(8) uses.
func (f LinkFlags) String() string {
	var parts []string
	for _, n := range linkFlagNames {
		if f&n.bit != 0 {
			parts = append(parts, n.name)
			f &^= n.bit
		}
	}
	if f != 0 {
		parts = append(parts, "0x"+strconv.FormatUint(uint64(f), 16))
	}
	return strings.Join(parts, "|")
}

// OperState is the RFC 2863 operational state of a link (IF_OPER_*).
type OperState uint8

// String returns the state as ip(8) prints it ("UP", "DOWN", "UNKNOWN", ...).
func (s OperState) String() string {
	names := [...]string{"UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP"}
	if int(s) < len(names) {
		return names[s]
	}
	return "OperState(" + strconv.Itoa(int(s)) + ")"
}

// Link describes a network interface (RTM_NEWLINK).
type Link struct {
	// Index is the interface index (ifi_index).
	Index int
	// Name is the interface name (IFLA_IFNAME).
	Name string
	// MTU is the interface MTU (IFLA_MTU).
	MTU int
	// Flags holds the IFF_* flags (ifi_flags).
	Flags LinkFlags
	// HardwareAddr is the link-layer address (IFLA_ADDRESS); nil if none.
	HardwareAddr net.HardwareAddr
	// Type is the ARPHRD_* device type (ifi_type), e.g. unix.ARPHRD_ETHER.
	Type uint16
	// OperState is the operational state (IFLA_OPERSTATE).
	OperState OperState
}

// parseLink decodes the payload of an RTM_NEWLINK/RTM_DELLINK message.
func parseLink(p []byte) (Link, error) {
	if len(p) < unix.SizeofIfInfomsg {
		return Link{}, malformed("ifinfomsg of %d bytes, want %d", len(p), unix.SizeofIfInfomsg)
	}
	l := Link{
		Type:  ne.Uint16(p[2:4]),
		Index: int(int32(ne.Uint32(p[4:8]))),
		Flags: LinkFlags(ne.Uint32(p[8:12])),
	}
	a := attrs{b: p[unix.SizeofIfInfomsg:]}
	for typ, v, ok := a.next(); ok; typ, v, ok = a.next() {
		switch typ {
		case unix.IFLA_IFNAME:
			l.Name = string(attrString(v))
		case unix.IFLA_MTU:
			mtu, err := attrU32(typ, v)
			if err != nil {
				return Link{}, err
			}
			l.MTU = int(mtu)
		case unix.IFLA_ADDRESS:
			if len(v) > 0 {
				l.HardwareAddr = net.HardwareAddr(append([]byte(nil), v...))
			}
		case unix.IFLA_OPERSTATE:
			if len(v) != 1 {
				return Link{}, malformed("IFLA_OPERSTATE of %d bytes", len(v))
			}
			l.OperState = OperState(v[0])
		}
	}
	if a.err != nil {
		return Link{}, a.err
	}
	return l, nil
}

// linkNameMTU extracts only the index, name and MTU of an RTM_NEWLINK
// payload, without allocating.
func linkNameMTU(p []byte) (index int32, name []byte, mtu int, err error) {
	if len(p) < unix.SizeofIfInfomsg {
		return 0, nil, 0, malformed("ifinfomsg of %d bytes, want %d", len(p), unix.SizeofIfInfomsg)
	}
	index = int32(ne.Uint32(p[4:8]))
	a := attrs{b: p[unix.SizeofIfInfomsg:]}
	for typ, v, ok := a.next(); ok; typ, v, ok = a.next() {
		switch typ {
		case unix.IFLA_IFNAME:
			name = attrString(v)
		case unix.IFLA_MTU:
			m, err := attrU32(typ, v)
			if err != nil {
				return 0, nil, 0, err
			}
			mtu = int(m)
		}
	}
	return index, name, mtu, a.err
}

// Links returns all interfaces (an RTM_GETLINK dump).
func (c *Conn) Links() ([]Link, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var links []Link
	err := c.dump("RTM_GETLINK", c.buildLinkDump, func() { links = links[:0] }, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWLINK {
			return nil
		}
		l, err := parseLink(p)
		if err != nil {
			return err
		}
		links = append(links, l)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("netlink: links: %w", err)
	}
	return links, nil
}

func (c *Conn) buildLinkDump(seq uint32) {
	c.req.begin(unix.RTM_GETLINK, unix.NLM_F_DUMP, seq)
	c.req.ifinfomsg(unix.IfInfomsg{Family: unix.AF_UNSPEC})
	c.req.attrU32(unix.IFLA_EXT_MASK, rtextSkipSts)
}

// LinkByIndex returns the interface with the given index. A missing
// interface yields an error matching syscall.ENODEV.
func (c *Conn) LinkByIndex(index int) (Link, error) {
	return c.getLink(index, "")
}

// LinkByName returns the interface with the given name. A missing interface
// yields an error matching syscall.ENODEV.
func (c *Conn) LinkByName(name string) (Link, error) {
	return c.getLink(0, name)
}

func (c *Conn) getLink(index int, name string) (Link, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var l Link
	err := c.linkRequest(index, name, func(p []byte) error {
		var err error
		l, err = parseLink(p)
		return err
	})
	if err != nil {
		if name != "" {
			return Link{}, fmt.Errorf("netlink: link %q: %w", name, err)
		}
		return Link{}, fmt.Errorf("netlink: link %d: %w", index, err)
	}
	return l, nil
}

// linkRequest sends RTM_GETLINK for one interface (by index, or by name when
// index is 0) and passes the RTM_NEWLINK payload to fn. c.mu must be held.
func (c *Conn) linkRequest(index int, name string, fn func(p []byte) error) error {
	if c.s == nil {
		return ErrClosed
	}
	seq := c.nextSeq()
	c.req.begin(unix.RTM_GETLINK, 0, seq)
	c.req.ifinfomsg(unix.IfInfomsg{Family: unix.AF_UNSPEC, Index: int32(index)})
	if index == 0 {
		c.req.attrString(unix.IFLA_IFNAME, name)
	}
	c.req.attrU32(unix.IFLA_EXT_MASK, rtextSkipSts)
	got := false
	_, err := c.roundTrip("RTM_GETLINK", seq, modeGet, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWLINK {
			return malformed("RTM_GETLINK answered with message type %d", typ)
		}
		got = true
		return fn(p)
	})
	if err == nil && !got {
		err = malformed("RTM_GETLINK: no link in reply")
	}
	return err
}

// linkInfo returns the name and MTU of interface index, using the name cache
// to avoid allocating. It asks with ioctls and falls back to RTM_GETLINK
// where those are not supported. c.mu must be held.
func (c *Conn) linkInfo(index int) (name string, mtu int, err error) {
	if c.s == nil {
		return "", 0, ErrClosed
	}
	if !c.noIoctl {
		var ifr ifreq
		nb, m, err := c.s.ifNameMTU(index, &ifr)
		switch err {
		case nil:
			return c.internName(int32(index), nb), m, nil
		case unix.ENODEV, unix.ENXIO:
			return "", 0, os.NewSyscallError("ioctl SIOCGIFNAME", unix.ENODEV)
		}
		c.noIoctl = true // e.g. ENOTTY in a sandbox: use netlink from now on
	}
	err = c.linkRequest(index, "", func(p []byte) error {
		idx, nb, m, err := linkNameMTU(p)
		if err != nil {
			return err
		}
		name, mtu = c.internName(idx, nb), m
		return nil
	})
	return name, mtu, err
}

// linkNames returns a map from interface index to name (a link dump that
// decodes only the names). c.mu must be held.
func (c *Conn) linkNames() (map[int]string, error) {
	names := make(map[int]string)
	err := c.dump("RTM_GETLINK", c.buildLinkDump, func() { clear(names) }, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWLINK {
			return nil
		}
		idx, nb, _, err := linkNameMTU(p)
		if err != nil {
			return err
		}
		names[int(idx)] = c.internName(idx, nb)
		return nil
	})
	return names, err
}

// Links returns all interfaces of the calling thread's network namespace.
// It opens and closes a socket; use a [Conn] to reuse one.
func Links() ([]Link, error) {
	c, err := Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Links()
}
