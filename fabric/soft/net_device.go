package soft

import (
	"fmt"
	"net"
	"net/netip"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/fabric"
)

// maxRdAtom is the soft device's cap on IRD and ORD, as siw's.
const maxRdAtom = 128

// device is one soft device: a network interface with IP addresses.
type device struct {
	info    fabric.Device
	ifindex int
	mtu     int
}

// deviceTable caches the host's interfaces; it is refreshed when older than
// a second or when a lookup misses.
type deviceTable struct {
	filter map[string]bool // netdev names to use; nil means all

	mu      sync.Mutex
	at      time.Time
	devs    []*device
	byAddr  map[netip.Addr]*device
	byIndex map[int]*device
	all     map[netip.Addr]int // every local address -> ifindex, filtered or not
}

func interfaceByName(name string) (int, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifi.Index, nil
}

// refreshLocked rereads the interfaces.
func (t *deviceTable) refreshLocked() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("soft: list interfaces: %w", err)
	}
	sort.Slice(ifs, func(a, b int) bool { return ifs[a].Index < ifs[b].Index })
	t.devs = t.devs[:0]
	t.byAddr = make(map[netip.Addr]*device)
	t.byIndex = make(map[int]*device)
	t.all = make(map[netip.Addr]int)
	for _, ifi := range ifs {
		addrs, err := ifi.Addrs()
		if err != nil {
			continue
		}
		var ips []netip.Addr
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ip = ip.Unmap()
			t.all[ip] = ifi.Index
			ips = append(ips, ip)
		}
		if len(ips) == 0 || (t.filter != nil && !t.filter[ifi.Name]) {
			continue
		}
		d := &device{ifindex: ifi.Index, mtu: ifi.MTU, info: fabric.Device{
			Name:            fmt.Sprintf("soft%d", len(t.devs)),
			Index:           len(t.devs),
			Transport:       "iWARP",
			Netdev:          ifi.Name,
			NodeGUID:        guidOf(ifi),
			Addrs:           ips,
			MaxQPRdAtom:     maxRdAtom,
			MaxQPInitRdAtom: maxRdAtom,
		}}
		t.devs = append(t.devs, d)
		t.byIndex[ifi.Index] = d
		for _, ip := range ips {
			t.byAddr[ip] = d
		}
	}
	t.at = time.Now()
	return nil
}

// guidOf derives a node GUID from the hardware address (EUI-64 style), or
// from the interface index when there is none.
func guidOf(ifi net.Interface) uint64 {
	hw := ifi.HardwareAddr
	if len(hw) == 6 {
		return uint64(hw[0]^2)<<56 | uint64(hw[1])<<48 | uint64(hw[2])<<40 | 0xFF<<32 | 0xFE<<24 |
			uint64(hw[3])<<16 | uint64(hw[4])<<8 | uint64(hw[5])
	}
	return 0x50f7000000000000 | uint64(ifi.Index)
}

func (t *deviceTable) fresh() error {
	if time.Since(t.at) < time.Second && t.devs != nil {
		return nil
	}
	return t.refreshLocked()
}

// list returns the devices.
func (t *deviceTable) list() ([]fabric.Device, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.fresh(); err != nil {
		return nil, err
	}
	out := make([]fabric.Device, len(t.devs))
	for k, d := range t.devs {
		out[k] = d.info
	}
	return out, nil
}

// byLocalAddr returns the device that owns a local address: EADDRNOTAVAIL
// when no interface has it, ENODEV when its interface is not a device.
func (t *deviceTable) byLocalAddr(a netip.Addr) (*device, error) {
	a = a.Unmap().WithZone("")
	t.mu.Lock()
	defer t.mu.Unlock()
	for attempt := 0; ; attempt++ {
		if err := t.fresh(); err != nil {
			return nil, err
		}
		if d := t.byAddr[a]; d != nil {
			return d, nil
		}
		if _, local := t.all[a]; local {
			return nil, fmt.Errorf("soft: %s is on an interface that is not a soft device: %w", a, syscall.ENODEV)
		}
		if attempt > 0 {
			return nil, fmt.Errorf("soft: %s is not a local address: %w", a, syscall.EADDRNOTAVAIL)
		}
		t.at = time.Time{} // a miss forces one refresh
	}
}
