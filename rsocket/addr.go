package rsocket

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// Addr is the address of an rsocket endpoint: an IP address and the rdma_cm
// port (on iWARP, and so on the software fabric, a TCP port). It is its own
// type rather than a *net.TCPAddr so that nothing mistakes an rsocket for a
// TCP connection; its String is "host:port" as net.TCPAddr's, which is what
// net/http (Request.RemoteAddr) and gRPC (peer.Peer) keep.
type Addr struct {
	netip.AddrPort
}

// Network returns "rsocket".
func (a *Addr) Network() string { return "rsocket" }

// String returns "ip:port" ("[ip]:port" for IPv6).
func (a *Addr) String() string {
	if a == nil {
		return "<nil>"
	}
	return a.AddrPort.String()
}

func newAddr(ap netip.AddrPort) *Addr {
	return &Addr{netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())}
}

// resolve turns a network and "host:port" into an address, as net does for
// TCP: networks "tcp", "tcp4", "tcp6" and "rsocket" (any family). An empty
// host is the wildcard address of the family (IPv4 for "tcp").
func resolve(network, address string, passive bool) (netip.AddrPort, error) {
	tcpNet := network
	switch network {
	case "tcp", "tcp4", "tcp6":
	case "rsocket":
		tcpNet = "tcp"
	default:
		return netip.AddrPort{}, net.UnknownNetworkError(network)
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ta, err := net.ResolveTCPAddr(tcpNet, address)
	if err != nil {
		return netip.AddrPort{}, err
	}
	ap := ta.AddrPort()
	if host == "" || !ap.Addr().IsValid() {
		any := netip.IPv4Unspecified()
		if network == "tcp6" {
			any = netip.IPv6Unspecified()
		}
		if !passive {
			// As net.Dial: no host means the local system.
			any = netip.AddrFrom4([4]byte{127, 0, 0, 1})
			if network == "tcp6" {
				any = netip.IPv6Loopback()
			}
		}
		ap = netip.AddrPortFrom(any, ap.Port())
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	if !passive && ap.Port() == 0 {
		return netip.AddrPort{}, fmt.Errorf("rsocket: dial %s: no port: %w", address, syscall.EINVAL)
	}
	return ap, nil
}
