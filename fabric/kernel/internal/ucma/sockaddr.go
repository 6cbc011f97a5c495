package ucma

import (
	"net"
	"net/netip"
	"strconv"
)

// Socket address sizes.
const (
	SockaddrInSize      = 16  // struct sockaddr_in
	SockaddrIn6Size     = 28  // struct sockaddr_in6, also the address slot of the *_IP commands
	SockaddrIBSize      = 48  // struct sockaddr_ib
	SockaddrStorageSize = 128 // struct __kernel_sockaddr_storage
)

// GID is a 128-bit InfiniBand global identifier in wire (network) order.
type GID [16]byte

// IBAddr is an AF_IB address (struct sockaddr_ib). All fields hold host
// values; the big-endian ones are converted on encode and decode.
type IBAddr struct {
	PKey     uint16 // sib_pkey, be16
	FlowInfo uint32 // sib_flowinfo, be32
	GID      GID    // sib_addr
	SID      uint64 // sib_sid, be64: the IB service id, (port space << 16) | port
	SIDMask  uint64 // sib_sid_mask, be64
	ScopeID  uint64 // sib_scope_id, host-endian
}

// Port returns the low 16 bits of the service id, which is how librdmacm
// reports the port of an AF_IB address.
func (a IBAddr) Port() uint16 { return uint16(a.SID) }

// Addr is a socket address as the RDMA CM ABI carries it: nothing (the zero
// Addr, family 0), an IPv4 or IPv6 endpoint, or an AF_IB address. Addr is
// comparable.
//
// IPv6 zones are carried as the numeric sin6_scope_id. IPAddr resolves a
// zone given by name once, through the interface table; decoding never
// looks names up, and AddrPort reports the scope id as a numeric zone
// ("fe80::1%3"), which net/netip and package net both accept. The IPv6
// flow label (sin6_flowinfo) is not kept: it is written as zero, as
// librdmacm's callers normally leave it, and ignored on decode.
type Addr struct {
	ip    netip.AddrPort // zone-less
	scope uint32         // sin6_scope_id
	ib    IBAddr
	fam   uint16
}

// IPAddr returns the Addr of an IP endpoint: AF_INET for an IPv4 address,
// AF_INET6 for IPv6 (including IPv4-mapped IPv6). An IPv6 zone must be an
// interface index ("3") or an interface name ("eth0"), which is looked up
// now; an invalid address or an unknown zone gives an error wrapping
// ErrBadAddr (EINVAL).
func IPAddr(ap netip.AddrPort) (Addr, error) {
	ip := ap.Addr()
	if !ip.IsValid() {
		return Addr{}, ErrBadAddr
	}
	if ip.Is4() {
		return Addr{ip: ap, fam: AFInet}, nil
	}
	var scope uint32
	if z := ip.Zone(); z != "" {
		if n, err := strconv.ParseUint(z, 10, 32); err == nil {
			scope = uint32(n)
		} else {
			ifi, err := net.InterfaceByName(z)
			if err != nil {
				return Addr{}, wrapErr("ucma: IPv6 zone "+strconv.Quote(z)+": "+err.Error(), ErrBadAddr, err)
			}
			scope = uint32(ifi.Index)
		}
		ip = ip.WithZone("")
	}
	return Addr{ip: netip.AddrPortFrom(ip, ap.Port()), scope: scope, fam: AFInet6}, nil
}

// IPAddrScope returns the AF_INET6 Addr of an IPv6 endpoint with an explicit
// scope id (interface index), ignoring any zone ap carries. An IPv4 ap gives
// an AF_INET Addr and scope is ignored. It never looks anything up.
func IPAddrScope(ap netip.AddrPort, scope uint32) Addr {
	ip := ap.Addr()
	switch {
	case !ip.IsValid():
		return Addr{}
	case ip.Is4():
		return Addr{ip: ap, fam: AFInet}
	}
	return Addr{ip: netip.AddrPortFrom(ip.WithZone(""), ap.Port()), scope: scope, fam: AFInet6}
}

// IBSockaddr returns the AF_IB Addr of a.
func IBSockaddr(a IBAddr) Addr { return Addr{ib: a, fam: AFIB} }

// Family returns AFInet, AFInet6, AFIB, or 0 for the zero Addr.
func (a Addr) Family() uint16 { return a.fam }

// IsValid reports whether a holds an address (its family is not 0).
func (a Addr) IsValid() bool { return a.fam != 0 }

// IsIB reports whether a is an AF_IB address.
func (a Addr) IsIB() bool { return a.fam == AFIB }

// Size returns the size of a's sockaddr: 16, 28 or 48, or 0 for the zero
// Addr. It is the addr_size / src_size / dst_size of BIND, RESOLVE_ADDR and
// JOIN_MCAST.
func (a Addr) Size() int {
	switch a.fam {
	case AFInet:
		return SockaddrInSize
	case AFInet6:
		return SockaddrIn6Size
	case AFIB:
		return SockaddrIBSize
	}
	return 0
}

// AddrPort returns the IP endpoint of an AF_INET or AF_INET6 Addr, with a
// non-zero scope id as a numeric zone. It returns the zero AddrPort for
// other families.
func (a Addr) AddrPort() netip.AddrPort {
	if a.fam == AFInet6 && a.scope != 0 {
		return netip.AddrPortFrom(a.ip.Addr().WithZone(strconv.FormatUint(uint64(a.scope), 10)), a.ip.Port())
	}
	if a.fam == AFInet || a.fam == AFInet6 {
		return a.ip
	}
	return netip.AddrPort{}
}

// ScopeID returns sin6_scope_id of an AF_INET6 Addr, else 0.
func (a Addr) ScopeID() uint32 { return a.scope }

// IB returns the AF_IB address of a, or the zero IBAddr for other families.
func (a Addr) IB() IBAddr { return a.ib }

// Port returns the port of an IP address or the low 16 bits of the service
// id of an AF_IB address (as rdma_get_src_port does), else 0.
func (a Addr) Port() uint16 {
	switch a.fam {
	case AFInet, AFInet6:
		return a.ip.Port()
	case AFIB:
		return a.ib.Port()
	}
	return 0
}

// String formats a for humans: the IP endpoint, "ib:<gid>/sid=<hex>", or
// "<none>".
func (a Addr) String() string {
	switch a.fam {
	case AFInet, AFInet6:
		return a.AddrPort().String()
	case AFIB:
		return "ib:" + netip.AddrFrom16(a.ib.GID).String() + "/sid=0x" + strconv.FormatUint(a.ib.SID, 16)
	}
	return "<none>"
}

// EncodeSockaddr zeroes slot and writes a's sockaddr at its start; slot is a
// 28-byte sockaddr_in6 field or a 128-byte sockaddr_storage. It returns the
// number of bytes the sockaddr takes (a.Size()). The zero Addr leaves slot
// all zero. A sockaddr that does not fit slot (AF_IB in a 28-byte slot)
// gives ErrAddrSize and leaves slot untouched.
func EncodeSockaddr(slot []byte, a Addr) (int, error) {
	n := a.Size()
	if n > len(slot) {
		return 0, ErrAddrSize
	}
	clear(slot)
	switch a.fam {
	case AFInet:
		ne.PutUint16(slot[0:], AFInet)
		be.PutUint16(slot[2:], a.ip.Port())
		v4 := a.ip.Addr().As4()
		copy(slot[4:8], v4[:])
	case AFInet6:
		ne.PutUint16(slot[0:], AFInet6)
		be.PutUint16(slot[2:], a.ip.Port())
		// slot[4:8] sin6_flowinfo stays zero.
		v6 := a.ip.Addr().As16()
		copy(slot[8:24], v6[:])
		ne.PutUint32(slot[24:], a.scope)
	case AFIB:
		ne.PutUint16(slot[0:], AFIB)
		be.PutUint16(slot[2:], a.ib.PKey)
		be.PutUint32(slot[4:], a.ib.FlowInfo)
		copy(slot[8:24], a.ib.GID[:])
		be.PutUint64(slot[24:], a.ib.SID)
		be.PutUint64(slot[32:], a.ib.SIDMask)
		ne.PutUint64(slot[40:], a.ib.ScopeID)
	}
	return n, nil
}

// DecodeSockaddr decodes the sockaddr at the start of b, a 28-byte
// sockaddr_in6 slot or a sockaddr_storage, by its family field. Family 0
// (nothing bound or resolved) gives the zero Addr and no error; a family
// other than AF_INET, AF_INET6 and AF_IB gives ErrAddrFamily; a b shorter
// than the family's sockaddr gives ErrAddrSize. It does not allocate.
func DecodeSockaddr(b []byte) (Addr, error) {
	if len(b) < 2 {
		return Addr{}, ErrAddrSize
	}
	fam := ne.Uint16(b)
	switch fam {
	case 0:
		return Addr{}, nil
	case AFInet:
		if len(b) < SockaddrInSize {
			return Addr{}, ErrAddrSize
		}
		ip := netip.AddrFrom4([4]byte(b[4:8]))
		return Addr{ip: netip.AddrPortFrom(ip, be.Uint16(b[2:])), fam: AFInet}, nil
	case AFInet6:
		if len(b) < SockaddrIn6Size {
			return Addr{}, ErrAddrSize
		}
		ip := netip.AddrFrom16([16]byte(b[8:24]))
		return Addr{ip: netip.AddrPortFrom(ip, be.Uint16(b[2:])), scope: ne.Uint32(b[24:]), fam: AFInet6}, nil
	case AFIB:
		if len(b) < SockaddrIBSize {
			return Addr{}, ErrAddrSize
		}
		return Addr{fam: AFIB, ib: IBAddr{
			PKey:     be.Uint16(b[2:]),
			FlowInfo: be.Uint32(b[4:]),
			GID:      GID(b[8:24]),
			SID:      be.Uint64(b[24:]),
			SIDMask:  be.Uint64(b[32:]),
			ScopeID:  ne.Uint64(b[40:]),
		}}, nil
	}
	return Addr{}, ErrAddrFamily
}
