package id

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// AIFlags are the flags of an AddrInfo, as rdma_addrinfo's ai_flags.
type AIFlags uint32

// AddrInfo flags, numbered as librdmacm's RAI_*.
const (
	// AIPassive asks for an address to bind and listen on: an empty node
	// is the wildcard address, and the result is Src.
	AIPassive AIFlags = 0x1
	// AINumericHost refuses host names: node must be a numeric address.
	AINumericHost AIFlags = 0x2
	// AINoRoute skips route resolution (here there is none to skip: route
	// resolution belongs to ResolveRoute).
	AINoRoute AIFlags = 0x4
	// AIFamily restricts the answer to Family's addresses.
	AIFamily AIFlags = 0x8
)

// AddrInfo describes an endpoint to create, as rdma_addrinfo: what
// GetAddrInfo answers and what CreateEP takes.
type AddrInfo struct {
	Flags AIFlags
	// Family is syscall.AF_INET or syscall.AF_INET6 (0: either); it
	// restricts the answer when Flags has AIFamily.
	Family int
	// QPType and PortSpace default to RC and PSTCP; UD gives PSUDP.
	QPType    QPType
	PortSpace PortSpace
	// Src is where a passive endpoint binds; for an active one, the
	// optional source of its resolution. Dst is where an active endpoint
	// connects.
	Src, Dst netip.AddrPort
}

// Passive reports whether ai describes a listening endpoint.
func (ai *AddrInfo) Passive() bool { return ai.Flags&AIPassive != 0 }

// getaddrinfo error codes, glibc's values: what rdma_getaddrinfo returns.
const (
	EAIBadFlags = -1 // EAI_BADFLAGS
	EAINoName   = -2 // EAI_NONAME
	EAIAgain    = -3 // EAI_AGAIN
	EAIFail     = -4 // EAI_FAIL
	EAIFamily   = -6 // EAI_FAMILY
	EAIService  = -8 // EAI_SERVICE
)

var eaiText = map[int]string{
	EAIBadFlags: "Bad value for ai_flags",
	EAINoName:   "Name or service not known",
	EAIAgain:    "Temporary failure in name resolution",
	EAIFail:     "Non-recoverable failure in name resolution",
	EAIFamily:   "ai_family not supported",
	EAIService:  "Servname not supported for ai_socktype",
}

// AddrInfoError is a GetAddrInfo failure: Code is the EAI_* value
// rdma_getaddrinfo would return, Error gai_strerror's text.
type AddrInfoError struct {
	Code int
	Err  error // the resolver's error, if any
}

// Error returns gai_strerror's text.
func (e *AddrInfoError) Error() string {
	if t, ok := eaiText[e.Code]; ok {
		return t
	}
	return "Unknown error"
}

// Unwrap returns the resolver's error.
func (e *AddrInfoError) Unwrap() error { return e.Err }

// GetAddrInfo resolves node (a host name or numeric address) and service (a
// port number or a name from the services database) into the description
// of an endpoint, as rdma_getaddrinfo: with hints' Flags, Family, QPType
// and PortSpace, and, for an active endpoint, hints' Src as its source.
// An empty node is the wildcard address when passive and the loopback
// address otherwise. Like librdmacm, it answers with the first address
// the resolver gives. Failures are *AddrInfoError; node and service both
// empty is EINVAL.
func GetAddrInfo(ctx context.Context, node, service string, hints *AddrInfo) (*AddrInfo, error) {
	var h AddrInfo
	if hints != nil {
		h = *hints
	}
	if node == "" && service == "" && hints == nil {
		return nil, errorf("getaddrinfo", syscall.EINVAL, "no node, service or hints")
	}
	if h.Flags&^(AIPassive|AINumericHost|AINoRoute|AIFamily) != 0 {
		return nil, &AddrInfoError{Code: EAIBadFlags}
	}
	family := 0
	if h.Flags&AIFamily != 0 {
		family = h.Family
		if family != syscall.AF_INET && family != syscall.AF_INET6 && family != 0 {
			return nil, &AddrInfoError{Code: EAIFamily}
		}
	}
	ai := &AddrInfo{Flags: h.Flags, Family: family, QPType: h.QPType, PortSpace: h.PortSpace}
	if ai.QPType == 0 {
		ai.QPType = RC
		if ai.PortSpace == PSUDP || ai.PortSpace == PSIPoIB {
			ai.QPType = UD
		}
	}
	if ai.PortSpace == 0 {
		ai.PortSpace = PSTCP
		if ai.QPType == UD {
			ai.PortSpace = PSUDP
		}
	}
	var port uint16
	if service != "" {
		p, err := lookupPort(service, ai.QPType)
		if err != nil {
			return nil, err
		}
		port = p
	}
	var a netip.Addr
	switch {
	case node != "":
		var err error
		if a, err = lookupHost(ctx, node, family, h.Flags&AINumericHost != 0); err != nil {
			return nil, err
		}
	case family == syscall.AF_INET6 && ai.Passive():
		a = netip.IPv6Unspecified()
	case family == syscall.AF_INET6:
		a = netip.IPv6Loopback()
	case ai.Passive():
		a = netip.IPv4Unspecified()
	default:
		a = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if ai.Family == 0 {
		ai.Family = syscall.AF_INET6
		if a.Is4() {
			ai.Family = syscall.AF_INET
		}
	}
	if ai.Passive() {
		ai.Src = netip.AddrPortFrom(a, port)
	} else {
		ai.Src, ai.Dst = h.Src, netip.AddrPortFrom(a, port)
	}
	return ai, nil
}

// lookupHost resolves host to its first address of family (0: any),
// IPv4-mapped addresses unmapped; numeric refuses names.
func lookupHost(ctx context.Context, host string, family int, numeric bool) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		a = a.Unmap()
		if (family == syscall.AF_INET && !a.Is4()) || (family == syscall.AF_INET6 && a.Is4()) {
			return netip.Addr{}, &AddrInfoError{Code: EAIFamily}
		}
		return a, nil
	}
	if numeric {
		return netip.Addr{}, &AddrInfoError{Code: EAINoName}
	}
	network := "ip"
	switch family {
	case syscall.AF_INET:
		network = "ip4"
	case syscall.AF_INET6:
		network = "ip6"
	}
	addrs, err := net.DefaultResolver.LookupNetIP(ctx, network, host)
	if err != nil || len(addrs) == 0 {
		code := EAINoName
		var dns *net.DNSError
		if errors.As(err, &dns) && !dns.IsNotFound && (dns.IsTemporary || dns.IsTimeout) {
			code = EAIAgain
		}
		return netip.Addr{}, &AddrInfoError{Code: code, Err: err}
	}
	return addrs[0].Unmap(), nil
}

// lookupPort converts a service to a port: a number, or a name from the
// services database for the QP type's protocol (TCP for RC, UDP for UD).
func lookupPort(service string, qp QPType) (uint16, error) {
	if p, err := strconv.ParseUint(service, 10, 16); err == nil {
		return uint16(p), nil
	}
	network := "tcp"
	if qp == UD {
		network = "udp"
	}
	p, err := net.LookupPort(network, service)
	if err != nil || p < 0 || p > 0xFFFF {
		return 0, &AddrInfoError{Code: EAIService, Err: err}
	}
	return uint16(p), nil
}

// CreateEP creates a synchronous id for ai, as rdma_create_ep. A passive
// id is bound to ai.Src (Listen follows); when attr is not nil, each id
// GetRequest returns gets a QP with attr. An active id has ai.Dst's
// address and route resolved (from ai.Src if valid), and a QP when attr
// is not nil. opts are Create's (WithFabric, ...; the QP type is ai's).
// On failure nothing is left and the error is the failed step's.
func CreateEP(ctx context.Context, ai *AddrInfo, attr *QPInitAttr, opts ...Option) (*ID, error) {
	if ai == nil {
		return nil, errorf("create_ep", syscall.EINVAL, "no address info")
	}
	ps := ai.PortSpace
	if ps == 0 {
		ps = PSTCP
	}
	if ps == PSIB && ai.QPType != 0 {
		// Only PS_IB ids choose their QP type; the others' is fixed, as
		// the kernel takes it.
		opts = append(opts, WithQPType(ai.QPType))
	}
	i, err := Create(nil, nil, ps, opts...)
	if err != nil {
		return nil, err
	}
	if ai.Passive() {
		err = i.Bind(ai.Src)
		if err == nil && attr != nil {
			a := *attr
			i.mu.Lock()
			i.reqQP = &a
			i.mu.Unlock()
		}
	} else {
		err = i.ResolveAddrContext(ctx, ai.Src, ai.Dst, createEPTimeout)
		if err == nil {
			err = i.ResolveRouteContext(ctx, createEPTimeout)
		}
		if err == nil && attr != nil {
			err = i.CreateQP(attr)
		}
	}
	if err != nil {
		_ = i.Destroy()
		return nil, err
	}
	return i, nil
}

// createEPTimeout is what rdma_create_ep gives address and route
// resolution.
const createEPTimeout = 2000 * time.Millisecond
