package diffkernel

import (
	"fmt"
	"net/netip"

	"github.com/cmrt/cmrt/internal/callseq"
)

// Device is one device under test, as the test VM sets it up
// (/work/shared/vm/README.md): the address of its netdev, and what the
// sequence's abstract addresses become on its subnet. The regression
// tests make the same netdevs in a network namespace.
type Device struct {
	// Name is the kernel's device (siw0, rxe0).
	Name string
	// Netdev is the network interface it sits on (a dummy: no ARP, and
	// every packet sent out of it is dropped).
	Netdev string
	// Mode is what sequences for it may do.
	Mode callseq.Mode
	// Local is the netdev's address; NonLocal and Unreachable are hosts
	// of its subnet no interface has (they resolve: the link has no ARP);
	// Unroutable has no route.
	Local, NonLocal, Unreachable, Unroutable netip.Addr
}

// Devices are the test VM's: siw0 (iWARP) on dummy1 and rxe0 (RoCEv2) on
// dummy0.
var Devices = []Device{
	{Name: "siw0", Netdev: "dummy1", Mode: callseq.ModeIWARP,
		Local: netip.MustParseAddr("10.0.1.1"), NonLocal: netip.MustParseAddr("10.0.1.2"),
		Unreachable: netip.MustParseAddr("10.0.1.3"), Unroutable: netip.MustParseAddr("192.0.2.1")},
	{Name: "rxe0", Netdev: "dummy0", Mode: callseq.ModeIB,
		Local: netip.MustParseAddr("10.0.0.1"), NonLocal: netip.MustParseAddr("10.0.0.2"),
		Unreachable: netip.MustParseAddr("10.0.0.3"), Unroutable: netip.MustParseAddr("192.0.2.1")},
}

// DeviceByName returns the device named name (siw0, rxe0).
func DeviceByName(name string) (Device, error) {
	for _, d := range Devices {
		if d.Name == name {
			return d, nil
		}
	}
	return Device{}, fmt.Errorf("diffkernel: no device %q (siw0 or rxe0)", name)
}

// env maps a sequence's abstract addresses, ports and groups to one
// side's.
type env struct {
	dev      Device
	portBase uint16 // port index p is portBase+p
	groups   [callseq.NumGroups]netip.Addr
}

func (e *env) addr(k callseq.AddrKind) netip.Addr {
	switch k {
	case callseq.Wildcard:
		return netip.IPv4Unspecified()
	case callseq.NonLocal:
		return e.dev.NonLocal
	case callseq.Unreachable:
		return e.dev.Unreachable
	case callseq.Unroutable:
		return e.dev.Unroutable
	}
	return e.dev.Local
}

func (e *env) port(p int) uint16 {
	if p <= 0 {
		return 0
	}
	return e.portBase + uint16(p)
}

func (e *env) addrPort(k callseq.AddrKind, p int) netip.AddrPort {
	return netip.AddrPortFrom(e.addr(k), e.port(p))
}

// Port blocks: every sequence gets its own block of ports below the
// ephemeral range, the software side's at +1..+3 and the kernel's at
// +5..+7, so that sequences running at once, or one after the other while
// their TCP connections linger in TIME_WAIT, never share a port, and the
// software fabric's sockets never take a port siw's listeners want.
const (
	portFirst  = 10000
	portBlocks = 1900 // for sequences numbered below ShrinkBase
	portBlock  = 10
	// shrinkBlocks are the blocks after those, for reruns.
	shrinkBlocks = 100
)

// ShrinkBase numbers the reruns of a sequence being shrunk: sequence
// ShrinkBase+k takes port block portBlocks+k%shrinkBlocks, away from the
// sequences still running.
const ShrinkBase = 1 << 20

// envs returns the two sides' environments for sequence number n.
func envs(dev Device, n int) (soft, kern env) {
	block := n % portBlocks
	if n >= ShrinkBase {
		block = portBlocks + (n-ShrinkBase)%shrinkBlocks
	}
	base := uint16(portFirst + block*portBlock)
	w := byte(block % 250)
	soft = env{dev: dev, portBase: base,
		groups: [callseq.NumGroups]netip.Addr{netip.AddrFrom4([4]byte{239, 1, w, 1}), netip.AddrFrom4([4]byte{239, 1, w, 2})}}
	kern = env{dev: dev, portBase: base + 4,
		groups: [callseq.NumGroups]netip.Addr{netip.AddrFrom4([4]byte{239, 2, w, 1}), netip.AddrFrom4([4]byte{239, 2, w, 2})}}
	return soft, kern
}
