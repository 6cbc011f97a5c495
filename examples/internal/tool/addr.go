package tool

import (
	"context"
	"net/netip"

	"github.com/cmrt/cmrt/id"
)

// GAIError is a getaddrinfo(3) failure: Code is the EAI_* value
// (negative, as glibc defines them) and Error returns gai_strerror's text.
type GAIError = id.AddrInfoError

// getaddrinfo error codes (glibc's values).
const (
	EAINoName  = id.EAINoName
	EAIAgain   = id.EAIAgain
	EAIFail    = id.EAIFail
	EAIService = id.EAIService
)

// LookupHost resolves a host name or a numeric address to its first
// address, as getaddrinfo orders them. IPv4-mapped IPv6 addresses are
// unmapped. Failures are *GAIError.
func LookupHost(host string) (netip.Addr, error) {
	ai, err := id.GetAddrInfo(context.Background(), host, "", &id.AddrInfo{})
	if err != nil {
		return netip.Addr{}, err
	}
	return ai.Dst.Addr(), nil
}

// Getaddrinfo resolves node and service to an address and port, as
// rdma_getaddrinfo does for the programs (id.GetAddrInfo): an empty node
// is the wildcard address when passive and the loopback address
// otherwise. Failures are *GAIError.
func Getaddrinfo(node, service string, passive bool) (netip.AddrPort, error) {
	hints := &id.AddrInfo{}
	if passive {
		hints.Flags = id.AIPassive
	}
	ai, err := id.GetAddrInfo(context.Background(), node, service, hints)
	if err != nil {
		return netip.AddrPort{}, err
	}
	if passive {
		return ai.Src, nil
	}
	return ai.Dst, nil
}
