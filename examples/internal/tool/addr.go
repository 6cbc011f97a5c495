package tool

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
)

// GAIError is a getaddrinfo(3) failure: Code is the EAI_* value
// (negative, as glibc defines them) and Error returns gai_strerror's text.
type GAIError struct {
	Code int
	Err  error // the resolver's error, if any
}

// getaddrinfo error codes (glibc's values).
const (
	EAINoName  = -2 // EAI_NONAME
	EAIAgain   = -3 // EAI_AGAIN
	EAIFail    = -4 // EAI_FAIL
	EAIService = -8 // EAI_SERVICE
)

var gaiText = map[int]string{
	EAINoName:  "Name or service not known",
	EAIAgain:   "Temporary failure in name resolution",
	EAIFail:    "Non-recoverable failure in name resolution",
	EAIService: "Servname not supported for ai_socktype",
}

// Error returns gai_strerror's text.
func (e *GAIError) Error() string {
	if t, ok := gaiText[e.Code]; ok {
		return t
	}
	return "Unknown error"
}

// Unwrap returns the resolver's error.
func (e *GAIError) Unwrap() error { return e.Err }

// LookupHost resolves a host name or a numeric address to its first
// address, as getaddrinfo orders them. IPv4-mapped IPv6 addresses are
// unmapped. Failures are *GAIError.
func LookupHost(host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	addrs, err := net.DefaultResolver.LookupNetIP(context.Background(), "ip", host)
	if err != nil || len(addrs) == 0 {
		code := EAINoName
		var dns *net.DNSError
		if errors.As(err, &dns) && !dns.IsNotFound && (dns.IsTemporary || dns.IsTimeout) {
			code = EAIAgain
		}
		return netip.Addr{}, &GAIError{Code: code, Err: err}
	}
	return addrs[0].Unmap(), nil
}

// LookupPort converts a service, numeric ("7471") or a name from the
// services database ("echo"), to a TCP port number. Failures are
// *GAIError with EAI_SERVICE.
func LookupPort(service string) (uint16, error) {
	if p, err := strconv.ParseUint(service, 10, 16); err == nil {
		return uint16(p), nil
	}
	p, err := net.LookupPort("tcp", service)
	if err != nil || p < 0 || p > 0xFFFF {
		return 0, &GAIError{Code: EAIService, Err: err}
	}
	return uint16(p), nil
}

// Getaddrinfo resolves node and service to an address and port, as
// rdma_getaddrinfo does for the programs: an empty node is the wildcard
// address when passive and the loopback address otherwise. Failures are
// *GAIError.
func Getaddrinfo(node, service string, passive bool) (netip.AddrPort, error) {
	var port uint16
	if service != "" {
		p, err := LookupPort(service)
		if err != nil {
			return netip.AddrPort{}, err
		}
		port = p
	}
	var a netip.Addr
	switch {
	case node != "":
		var err error
		if a, err = LookupHost(node); err != nil {
			return netip.AddrPort{}, err
		}
	case passive:
		a = netip.IPv4Unspecified()
	default:
		a = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	return netip.AddrPortFrom(a, port), nil
}
