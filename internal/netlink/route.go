package netlink

import (
	"fmt"
	"net/netip"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// RouteType is the type of a route (rtm_type, RTN_*).
type RouteType uint8

// Route types.
const (
	// RouteUnspec is RTN_UNSPEC.
	RouteUnspec RouteType = unix.RTN_UNSPEC
	// RouteUnicast is RTN_UNICAST: a gateway or direct (on-link) route.
	RouteUnicast RouteType = unix.RTN_UNICAST
	// RouteLocal is RTN_LOCAL: the destination is an address of this host.
	RouteLocal RouteType = unix.RTN_LOCAL
	// RouteBroadcast is RTN_BROADCAST: a broadcast address, sent as broadcast.
	RouteBroadcast RouteType = unix.RTN_BROADCAST
	// RouteAnycast is RTN_ANYCAST: a local broadcast route, sent as unicast.
	RouteAnycast RouteType = unix.RTN_ANYCAST
	// RouteMulticast is RTN_MULTICAST: a multicast route.
	RouteMulticast RouteType = unix.RTN_MULTICAST
	// RouteBlackhole is RTN_BLACKHOLE: packets are silently dropped.
	RouteBlackhole RouteType = unix.RTN_BLACKHOLE
	// RouteUnreachable is RTN_UNREACHABLE: the destination is unreachable.
	RouteUnreachable RouteType = unix.RTN_UNREACHABLE
	// RouteProhibit is RTN_PROHIBIT: administratively prohibited.
	RouteProhibit RouteType = unix.RTN_PROHIBIT
	// RouteThrow is RTN_THROW: lookup continues in another table.
	RouteThrow RouteType = unix.RTN_THROW
	// RouteNAT is RTN_NAT.
	RouteNAT RouteType = unix.RTN_NAT
)

var routeTypeNames = [...]string{"unspec", "unicast", "local", "broadcast", "anycast", "multicast",
	"blackhole", "unreachable", "prohibit", "throw", "nat", "xresolve"}

// String returns the type as ip(8) prints it ("unicast", "local", ...).
func (t RouteType) String() string {
	if int(t) < len(routeTypeNames) {
		return routeTypeNames[t]
	}
	return "RouteType(" + strconv.Itoa(int(t)) + ")"
}

// Errno returns the error a lookup resolving to a route of this type
// produces, matching what the kernel's IPv4 FIB uses (fib_props): EHOSTUNREACH
// for unreachable, EACCES for prohibit, EINVAL for blackhole, ENETUNREACH for
// a throw that ends the lookup. It returns 0 for deliverable types.
func (t RouteType) Errno() syscall.Errno {
	switch t {
	case RouteUnreachable:
		return syscall.EHOSTUNREACH
	case RouteProhibit:
		return syscall.EACCES
	case RouteBlackhole:
		return syscall.EINVAL
	case RouteThrow:
		return syscall.ENETUNREACH
	}
	return 0
}

// Route is the result of a route lookup ([RouteGet]) or a route from a
// notification.
type Route struct {
	// Dst is the destination (RTA_DST). For a lookup it is the address
	// looked up; for a notification it is the prefix address, see DstLen.
	// IPv6 link-local addresses carry the interface name as zone.
	Dst netip.Addr
	// DstLen is the destination prefix length (rtm_dst_len); 32 or 128 for
	// a lookup.
	DstLen int
	// Src is the preferred source address (RTA_PREFSRC), else the source
	// passed to RouteGet; invalid if neither is known.
	Src netip.Addr
	// Gateway is the next hop (RTA_GATEWAY or RTA_VIA); invalid when the
	// destination is on-link.
	Gateway netip.Addr
	// OIF is the output interface index (RTA_OIF) exactly as the kernel
	// reports it: for local destinations this is the loopback device,
	// as "ip route get" shows.
	OIF int
	// IfName is the name of OIF.
	IfName string
	// LocalIndex is, for a RouteLocal lookup, the index of the interface
	// that carries the destination address (what rdma_cm binds to: eth0 for
	// eth0's own address, lo for 127.0.0.1 and ::1). It falls back to OIF
	// when no interface carries the exact address (e.g. 127.0.0.2). It is 0
	// for other route types and for notifications.
	LocalIndex int
	// LocalName is the name of LocalIndex.
	LocalName string
	// Type is the route type (rtm_type).
	Type RouteType
	// Table is the routing table that matched (RTA_TABLE, else rtm_table),
	// e.g. 254 (main) or 255 (local).
	Table int
	// MTU is the path MTU: RTAX_MTU from RTA_METRICS when present (a route
	// "mtu" attribute or a cached PMTU), else the MTU of OIF. For
	// notifications only the RTAX_MTU metric is reported (0 if absent).
	MTU int
	// Priority is the route metric (RTA_PRIORITY).
	Priority int
}

// parseRoute decodes the payload of an RTM_NEWROUTE/RTM_DELROUTE message.
// Families other than IPv4 and IPv6 yield errUnsupportedFamily.
func parseRoute(p []byte) (Route, error) {
	if len(p) < unix.SizeofRtMsg {
		return Route{}, malformed("rtmsg of %d bytes, want %d", len(p), unix.SizeofRtMsg)
	}
	family := p[0]
	var bits int
	switch family {
	case unix.AF_INET:
		bits = 32
	case unix.AF_INET6:
		bits = 128
	default:
		return Route{}, errUnsupportedFamily
	}
	r := Route{DstLen: int(p[1]), Table: int(p[4]), Type: RouteType(p[7])}
	if r.DstLen > bits {
		return Route{}, malformed("rtm_dst_len %d for a %d-bit family", r.DstLen, bits)
	}
	it := attrs{b: p[unix.SizeofRtMsg:]}
	for typ, v, ok := it.next(); ok; typ, v, ok = it.next() {
		var err error
		var u uint32
		switch typ {
		case unix.RTA_DST:
			r.Dst, err = attrAddr(family, typ, v)
		case unix.RTA_PREFSRC:
			r.Src, err = attrAddr(family, typ, v)
		case unix.RTA_GATEWAY:
			r.Gateway, err = attrAddr(family, typ, v)
		case unix.RTA_VIA:
			r.Gateway, err = parseVia(v)
		case unix.RTA_OIF:
			u, err = attrU32(typ, v)
			r.OIF = int(int32(u))
		case unix.RTA_TABLE:
			u, err = attrU32(typ, v)
			r.Table = int(u)
		case unix.RTA_PRIORITY:
			u, err = attrU32(typ, v)
			r.Priority = int(u)
		case unix.RTA_METRICS:
			r.MTU, err = parseMetricsMTU(v)
		case unix.RTA_MULTIPATH:
			err = parseMultipath(family, v, &r)
		}
		if err != nil {
			return Route{}, err
		}
	}
	if it.err != nil {
		return Route{}, it.err
	}
	if !r.Dst.IsValid() && r.DstLen == 0 { // default route
		if family == unix.AF_INET {
			r.Dst = netip.IPv4Unspecified()
		} else {
			r.Dst = netip.IPv6Unspecified()
		}
	}
	return r, nil
}

// parseVia decodes RTA_VIA (struct rtvia: a 16-bit family and the address).
func parseVia(v []byte) (netip.Addr, error) {
	if len(v) < 2 {
		return netip.Addr{}, malformed("RTA_VIA of %d bytes", len(v))
	}
	fam := ne.Uint16(v[0:2])
	if fam > 0xff {
		return netip.Addr{}, malformed("RTA_VIA family %d", fam)
	}
	return attrAddr(uint8(fam), unix.RTA_VIA, v[2:])
}

// parseMetricsMTU returns RTAX_MTU from a nested RTA_METRICS attribute.
func parseMetricsMTU(v []byte) (int, error) {
	mtu := 0
	it := attrs{b: v}
	for typ, mv, ok := it.next(); ok; typ, mv, ok = it.next() {
		if typ == unix.RTAX_MTU {
			u, err := attrU32(typ, mv)
			if err != nil {
				return 0, err
			}
			mtu = int(u)
		}
	}
	return mtu, it.err
}

// parseMultipath validates RTA_MULTIPATH and, when the route has no single
// next hop, reports the first hop's interface and gateway.
func parseMultipath(family uint8, v []byte, r *Route) error {
	first := true
	for len(v) > 0 {
		if len(v) < unix.SizeofRtNexthop {
			return malformed("rtnexthop of %d bytes", len(v))
		}
		l := int(ne.Uint16(v[0:2]))
		if l < unix.SizeofRtNexthop || l > len(v) {
			return malformed("rtnexthop length %d outside [%d, %d]", l, unix.SizeofRtNexthop, len(v))
		}
		ifindex := int(int32(ne.Uint32(v[4:8])))
		var gw netip.Addr
		it := attrs{b: v[unix.SizeofRtNexthop:l]}
		for typ, av, ok := it.next(); ok; typ, av, ok = it.next() {
			var err error
			switch typ {
			case unix.RTA_GATEWAY:
				gw, err = attrAddr(family, typ, av)
			case unix.RTA_VIA:
				gw, err = parseVia(av)
			}
			if err != nil {
				return err
			}
		}
		if it.err != nil {
			return it.err
		}
		if first && r.OIF == 0 {
			r.OIF, r.Gateway = ifindex, gw
		}
		first = false
		next := align4(l)
		if next > len(v) {
			next = len(v)
		}
		v = v[next:]
	}
	return nil
}

// RouteGet asks the kernel which route it would use to send to dst, like
// "ip route get dst [from src] [oif oif]".
//
// src may be the zero Addr (no source constraint) and oif 0 (any interface).
// IPv4-mapped IPv6 addresses are treated as IPv4. An IPv6 link-local dst or
// src with a zone ("fe80::1%eth0", or a numeric zone) selects the output
// interface; a zone that contradicts a non-zero oif is an error matching
// EINVAL.
//
// Errors: kernel failures are [*Error] values (errors.Is(err,
// syscall.ENETUNREACH) when no route exists, EINVAL for a non-local src, ...).
// A lookup that ends in a reject route returns the decoded Route together
// with an error wrapping [ErrRejected] and the errno of [RouteType.Errno]:
// EHOSTUNREACH (unreachable), EACCES (prohibit), EINVAL (blackhole),
// ENETUNREACH (throw). Current kernels usually fail such lookups themselves
// with the same errnos, reported as [*Error] (without [ErrRejected]).
func (c *Conn) RouteGet(dst, src netip.Addr, oif int) (Route, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := c.routeGet(dst, src, oif)
	if err != nil {
		return r, fmt.Errorf("netlink: route get %v: %w", dst, err)
	}
	return r, nil
}

// RouteLookup is a lean [Conn.RouteGet] for callers that need only the
// route itself: one RTM_GETROUTE request. The Route has no interface names
// (IfName, LocalIndex, LocalName stay empty, so link-local addresses get no
// zone), and MTU is the route's own metric, 0 when it has none. Errors are
// RouteGet's.
func (c *Conn) RouteLookup(dst, src netip.Addr) (Route, error) {
	return c.RouteLookupOIF(dst, src, 0)
}

// RouteLookupOIF is RouteLookup bound to the interface with index oif (0:
// none), as a socket bound to a device looks its routes up: a destination
// with no route is then taken to be on that interface's link, as
// ip_route_output_key does for a lookup with an output interface.
func (c *Conn) RouteLookupOIF(dst, src netip.Addr, oif int) (Route, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, _, err := c.routeRequest(dst, src, oif)
	if err == nil {
		err = rejectError(r.Type)
	}
	if err != nil {
		return r, fmt.Errorf("netlink: route lookup %v: %w", dst, err)
	}
	return r, nil
}

func (c *Conn) routeGet(dst, src netip.Addr, oif int) (Route, error) {
	r, oif, err := c.routeRequest(dst, src, oif)
	if err != nil {
		return r, err
	}
	family, _ := familyOf(r.Dst)
	if r.OIF > 0 {
		name, mtu, err := c.linkInfo(r.OIF)
		if err != nil {
			return r, fmt.Errorf("output interface %d: %w", r.OIF, err)
		}
		r.IfName = name
		if r.MTU == 0 {
			r.MTU = mtu
		}
	}
	if r.Type == RouteLocal {
		if err := c.localOwner(&r, family, oif); err != nil {
			return r, err
		}
	}
	zone := r.IfName
	if r.Type == RouteLocal {
		zone = r.LocalName
	}
	r.Dst = withLinkZone(r.Dst, zone)
	r.Src = withLinkZone(r.Src, zone)
	r.Gateway = withLinkZone(r.Gateway, r.IfName)
	return r, rejectError(r.Type)
}

// routeRequest sends one RTM_GETROUTE and decodes the answer, with Dst and
// Src filled from the request when the kernel leaves them out. It returns
// the output interface the request was restricted to. c.mu must be held.
func (c *Conn) routeRequest(dst, src netip.Addr, oif int) (Route, int, error) {
	if c.s == nil {
		return Route{}, 0, ErrClosed
	}
	if !dst.IsValid() {
		return Route{}, 0, fmt.Errorf("invalid destination: %w", syscall.EINVAL)
	}
	if oif < 0 {
		return Route{}, 0, fmt.Errorf("negative oif %d: %w", oif, syscall.EINVAL)
	}
	dst = dst.Unmap()
	var err error
	if oif, err = c.zoneIndex(dst, oif); err != nil {
		return Route{}, 0, err
	}
	if src.IsValid() {
		src = src.Unmap()
		if src.Is4() != dst.Is4() {
			return Route{}, 0, fmt.Errorf("source %v and destination differ in family: %w", src, syscall.EINVAL)
		}
		if oif, err = c.zoneIndex(src, oif); err != nil {
			return Route{}, 0, err
		}
	}

	family, bits := familyOf(dst)
	seq := c.nextSeq()
	c.req.begin(unix.RTM_GETROUTE, 0, seq)
	rtm := unix.RtMsg{Family: family, Dst_len: uint8(bits), Flags: unix.RTM_F_LOOKUP_TABLE}
	if src.IsValid() {
		rtm.Src_len = uint8(bits)
	}
	c.req.rtmsg(rtm)
	c.req.attrAddr(unix.RTA_DST, dst)
	if src.IsValid() {
		c.req.attrAddr(unix.RTA_SRC, src)
	}
	if oif != 0 {
		c.req.attrU32(unix.RTA_OIF, uint32(oif))
	}
	var r Route
	got := false
	_, err = c.roundTrip("RTM_GETROUTE", seq, modeGet|modeSmall, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWROUTE {
			return malformed("RTM_GETROUTE answered with message type %d", typ)
		}
		var err error
		r, err = parseRoute(p)
		got = err == nil
		return err
	})
	if err == nil && !got {
		err = malformed("RTM_GETROUTE: no route in reply")
	}
	if err != nil {
		return Route{}, 0, err
	}

	if !r.Dst.IsValid() || r.DstLen == 0 {
		r.Dst, r.DstLen = dst.WithZone(""), bits
	}
	if !r.Src.IsValid() && src.IsValid() {
		r.Src = src.WithZone("")
	}
	return r, oif, nil
}

// rejectError returns the error for a lookup that resolved to a route of
// type t, or nil for deliverable types.
func rejectError(t RouteType) error {
	if e := t.Errno(); e != 0 {
		return fmt.Errorf("%v route: %w: %w", t, ErrRejected, e)
	}
	return nil
}

// withLinkZone sets zone on IPv6 link-local addresses.
func withLinkZone(a netip.Addr, zone string) netip.Addr {
	if zone != "" && a.Is6() && (a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast()) {
		return a.WithZone(zone)
	}
	return a
}

// zoneIndex resolves the zone of a (an interface name or number) and checks
// it against oif. It returns the output interface to use. c.mu must be held.
func (c *Conn) zoneIndex(a netip.Addr, oif int) (int, error) {
	zone := a.Zone()
	if zone == "" {
		return oif, nil
	}
	idx, err := strconv.Atoi(zone)
	if err != nil {
		err = c.linkRequest(0, zone, func(p []byte) error {
			i, _, _, err := linkNameMTU(p)
			idx = int(i)
			return err
		})
		if err != nil {
			return 0, fmt.Errorf("zone %q: %w", zone, err)
		}
	}
	if idx <= 0 || (oif != 0 && idx != oif) {
		return 0, fmt.Errorf("zone %q contradicts oif %d: %w", zone, oif, syscall.EINVAL)
	}
	return idx, nil
}

// localOwner fills LocalIndex/LocalName of a local route: the interface that
// carries r.Dst (restricted to zoneIdx for zoned link-local addresses).
// c.mu must be held.
func (c *Conn) localOwner(r *Route, family uint8, zoneIdx int) error {
	want := r.Dst.WithZone("")
	linkLocal := want.Is6() && want.IsLinkLocalUnicast()
	found := 0
	build := func(seq uint32) {
		c.req.begin(unix.RTM_GETADDR, unix.NLM_F_DUMP, seq)
		c.req.ifaddrmsg(unix.IfAddrmsg{Family: family})
	}
	err := c.dump("RTM_GETADDR", build, func() { found = 0 }, func(typ uint16, p []byte) error {
		if typ != unix.RTM_NEWADDR || found != 0 {
			return nil
		}
		a, err := decodeAddr(p, false)
		if err == errUnsupportedFamily {
			return nil
		}
		if err != nil {
			return err
		}
		if a.Prefix.Addr() == want && (!linkLocal || zoneIdx == 0 || a.Index == zoneIdx) {
			found = a.Index
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("finding the interface of %v: %w", want, err)
	}
	if found == 0 || found == r.OIF {
		r.LocalIndex, r.LocalName = r.OIF, r.IfName
		return nil
	}
	name, _, err := c.linkInfo(found)
	if err != nil {
		return fmt.Errorf("interface %d of %v: %w", found, want, err)
	}
	r.LocalIndex, r.LocalName = found, name
	return nil
}

// RouteGet looks up the route to dst in the calling thread's network
// namespace; see [Conn.RouteGet]. It opens and closes a socket; use a [Conn]
// to reuse one.
func RouteGet(dst, src netip.Addr, oif int) (Route, error) {
	c, err := Dial()
	if err != nil {
		return Route{}, err
	}
	defer c.Close()
	return c.RouteGet(dst, src, oif)
}
