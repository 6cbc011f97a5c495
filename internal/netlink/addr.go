package netlink

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// AddrFlags holds the IFA_F_* flags of an address, e.g.
// unix.IFA_F_TENTATIVE, unix.IFA_F_DADFAILED, unix.IFA_F_PERMANENT.
type AddrFlags uint32

// Tentative reports IFA_F_TENTATIVE: duplicate address detection has not
// finished; the address cannot be used as a source yet.
func (f AddrFlags) Tentative() bool { return f&unix.IFA_F_TENTATIVE != 0 }

// DADFailed reports IFA_F_DADFAILED: duplicate address detection failed.
func (f AddrFlags) DADFailed() bool { return f&unix.IFA_F_DADFAILED != 0 }

// Permanent reports IFA_F_PERMANENT: a configured (not autoconfigured)
// address.
func (f AddrFlags) Permanent() bool { return f&unix.IFA_F_PERMANENT != 0 }

// Deprecated reports IFA_F_DEPRECATED: the preferred lifetime expired.
func (f AddrFlags) Deprecated() bool { return f&unix.IFA_F_DEPRECATED != 0 }

var addrFlagNames = []struct {
	bit  AddrFlags
	name string
}{
	{unix.IFA_F_SECONDARY, "secondary"}, {unix.IFA_F_NODAD, "nodad"}, {unix.IFA_F_OPTIMISTIC, "optimistic"},
	{unix.IFA_F_DADFAILED, "dadfailed"}, {unix.IFA_F_HOMEADDRESS, "home"}, {unix.IFA_F_DEPRECATED, "deprecated"},
	{unix.IFA_F_TENTATIVE, "tentative"}, {unix.IFA_F_PERMANENT, "permanent"},
	{unix.IFA_F_MANAGETEMPADDR, "mngtmpaddr"}, {unix.IFA_F_NOPREFIXROUTE, "noprefixroute"},
	{unix.IFA_F_MCAUTOJOIN, "autojoin"}, {unix.IFA_F_STABLE_PRIVACY, "stable-privacy"},
}

// String returns the flags as "permanent|nodad|...", the names ip(8) uses.
func (f AddrFlags) String() string {
	var parts []string
	for _, n := range addrFlagNames {
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

// Scope is an address or route scope (RT_SCOPE_*).
type Scope uint8

// String returns the scope as ip(8) prints it ("global", "link", "host", ...).
func (s Scope) String() string {
	switch s {
	case unix.RT_SCOPE_UNIVERSE:
		return "global"
	case unix.RT_SCOPE_SITE:
		return "site"
	case unix.RT_SCOPE_LINK:
		return "link"
	case unix.RT_SCOPE_HOST:
		return "host"
	case unix.RT_SCOPE_NOWHERE:
		return "nowhere"
	}
	return strconv.Itoa(int(s))
}

// Addr is an IP address assigned to an interface (RTM_NEWADDR).
type Addr struct {
	// Index is the interface index (ifa_index).
	Index int
	// IfName is the interface name. It is looked up separately (IPv6
	// addresses carry no label) and may be empty if the interface vanished.
	IfName string
	// Prefix is the local address (IFA_LOCAL, else IFA_ADDRESS) with the
	// prefix length (ifa_prefixlen). It carries no zone.
	Prefix netip.Prefix
	// Peer is the point-to-point peer (IFA_ADDRESS when it differs from
	// IFA_LOCAL); invalid otherwise.
	Peer netip.Addr
	// Label is the IPv4 address label (IFA_LABEL, e.g. "eth0:1"); empty for
	// IPv6.
	Label string
	// Flags holds the IFA_F_* flags (IFA_FLAGS, else ifa_flags).
	Flags AddrFlags
	// Scope is the address scope (ifa_scope).
	Scope Scope
}

// parseAddr decodes the payload of an RTM_NEWADDR/RTM_DELADDR message.
// Families other than IPv4 and IPv6 yield errUnsupportedFamily.
func parseAddr(p []byte) (Addr, error) { return decodeAddr(p, true) }

// decodeAddr implements parseAddr; with label false it skips IFA_LABEL and
// does not allocate.
func decodeAddr(p []byte, label bool) (Addr, error) {
	if len(p) < unix.SizeofIfAddrmsg {
		return Addr{}, malformed("ifaddrmsg of %d bytes, want %d", len(p), unix.SizeofIfAddrmsg)
	}
	family, plen := p[0], int(p[1])
	if family != unix.AF_INET && family != unix.AF_INET6 {
		return Addr{}, errUnsupportedFamily
	}
	a := Addr{Flags: AddrFlags(p[2]), Scope: Scope(p[3]), Index: int(ne.Uint32(p[4:8]))}
	var local, address netip.Addr
	it := attrs{b: p[unix.SizeofIfAddrmsg:]}
	for typ, v, ok := it.next(); ok; typ, v, ok = it.next() {
		var err error
		switch typ {
		case unix.IFA_LOCAL:
			local, err = attrAddr(family, typ, v)
		case unix.IFA_ADDRESS:
			address, err = attrAddr(family, typ, v)
		case unix.IFA_LABEL:
			if label {
				a.Label = string(attrString(v))
			}
		case unix.IFA_FLAGS:
			var f uint32
			f, err = attrU32(typ, v)
			a.Flags = AddrFlags(f)
		}
		if err != nil {
			return Addr{}, err
		}
	}
	if it.err != nil {
		return Addr{}, it.err
	}
	ip := local
	if !ip.IsValid() {
		ip = address
	} else if address.IsValid() && address != local {
		a.Peer = address
	}
	if !ip.IsValid() {
		return Addr{}, malformed("address message without IFA_LOCAL or IFA_ADDRESS")
	}
	if plen > ip.BitLen() {
		return Addr{}, malformed("prefix length %d for a %d-bit address", plen, ip.BitLen())
	}
	a.Prefix = netip.PrefixFrom(ip, plen)
	return a, nil
}

// Addrs returns the IPv4 and IPv6 addresses of all interfaces (an
// RTM_GETADDR dump), with interface names filled in from a link dump.
func (c *Conn) Addrs() ([]Addr, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var list []Addr
	build := func(seq uint32) {
		c.req.begin(unix.RTM_GETADDR, unix.NLM_F_DUMP, seq)
		c.req.ifaddrmsg(unix.IfAddrmsg{Family: unix.AF_UNSPEC})
	}
	err := c.dump("RTM_GETADDR", build, func() { list = list[:0] }, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWADDR {
			return nil
		}
		a, err := parseAddr(p)
		if err == errUnsupportedFamily {
			return nil
		}
		if err != nil {
			return err
		}
		list = append(list, a)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("netlink: addrs: %w", err)
	}
	names, err := c.linkNames()
	if err != nil {
		return nil, fmt.Errorf("netlink: addrs: %w", err)
	}
	for i := range list {
		name, ok := names[list[i].Index]
		if !ok { // link created after the link dump started
			name, _, _ = c.linkInfo(list[i].Index)
		}
		list[i].IfName = name
	}
	return list, nil
}

// Addrs returns the addresses of the calling thread's network namespace. It
// opens and closes a socket; use a [Conn] to reuse one.
func Addrs() ([]Addr, error) {
	c, err := Dial()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Addrs()
}
