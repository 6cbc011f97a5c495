package kernel

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cmrt/cmrt/fabric"
)

// defaultSysfsRoot is where the kernel lists its RDMA devices.
const defaultSysfsRoot = "/sys/class/infiniband"

// Read-depth caps. sysfs does not publish max_qp_rd_atom and
// max_qp_init_rd_atom (ibv_query_device reads them through uverbs, which
// needs a device context this fabric does not open), so they come from a
// table of drivers whose values are known, and a conservative default for
// the others: 1, which every device that can do RDMA Read supports.
// Applications that want more on such a device pass explicit values
// instead of 0xFF.
var driverCaps = map[string][2]uint8{
	// driver: {max_qp_rd_atom (IRD), max_qp_init_rd_atom (ORD)}
	"rxe":       {128, 128}, // RXE_MAX_QP_RD_ATOM, RXE_MAX_QP_INIT_RD_ATOM
	"rdma_rxe":  {128, 128},
	"siw":       {128, 128}, // SIW_MAX_IRD_QP, SIW_MAX_ORD_QP
	"mlx5_core": {16, 16},
	"mlx4_core": {16, 16},
}

// defaultRdAtom is the cap used for drivers missing from driverCaps.
const defaultRdAtom = 1

// devTable caches the device listing; a lookup that misses refreshes it.
type devTable struct {
	root string

	mu   sync.Mutex
	at   time.Time // when devs (or err) was read
	devs []fabric.Device
	err  error
}

func (t *devTable) list() ([]fabric.Device, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.freshLocked(false); err != nil {
		return nil, err
	}
	return append([]fabric.Device(nil), t.devs...), nil
}

func (t *devTable) freshLocked(force bool) error {
	if !force && !t.at.IsZero() && time.Since(t.at) < time.Second {
		return t.err
	}
	devs, err := readDevices(t.root, nldevEnabled(t.root))
	t.at, t.err = time.Now(), err
	if err == nil {
		t.devs = devs
	}
	return err
}

// lookup finds the device with this node GUID, or, when the kernel gave
// one, this device index. A miss rereads the listing, at most every
// missRefresh, so that ids on a device sysfs does not show cost nothing.
func (t *devTable) lookup(guid uint64, index uint32) (fabric.Device, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for attempt := 0; attempt < 2; attempt++ {
		if attempt > 0 && time.Since(t.at) < missRefresh {
			break
		}
		if err := t.freshLocked(attempt > 0); err != nil {
			return fabric.Device{}, false
		}
		var byGUID *fabric.Device
		for k := range t.devs {
			d := &t.devs[k]
			if d.NodeGUID != guid {
				continue
			}
			if index != invalidIndex && uint32(d.Index) == index {
				return *d, true
			}
			if byGUID == nil {
				byGUID = d
			}
		}
		if byGUID != nil {
			return *byGUID, true
		}
	}
	return fabric.Device{}, false
}

// missRefresh bounds how often a lookup miss rereads the devices.
const missRefresh = 100 * time.Millisecond

// invalidIndex is ucma.InvalidIBDevIndex: the kernel did not say.
const invalidIndex = 0xFFFFFFFF

// errNoDevices is returned when the kernel lists no RDMA device.
func errNoDevices(root string) error {
	return fmt.Errorf("kernel: no RDMA devices in %s (load a driver: modprobe rdma_rxe and "+
		"`rdma link add rxe0 type rxe netdev eth0`, or siw, or a hardware driver): %w", root, syscall.ENODEV)
}

// readDevices lists the devices of a sysfs tree laid out as
// /sys/class/infiniband: one directory per device with node_guid,
// node_type and ports/. withNetlink completes the listing with the kernel
// device indexes and netdevs from RDMA netlink.
func readDevices(root string, withNetlink bool) ([]fabric.Device, error) {
	ents, err := os.ReadDir(root)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errNoDevices(root)
		}
		return nil, fmt.Errorf("kernel: list RDMA devices: %w", err)
	}
	var nl map[string]nlDevice
	if withNetlink {
		if list, err := nldevList(); err == nil {
			nl = make(map[string]nlDevice, len(list))
			for _, d := range list {
				nl[d.name] = d
			}
		}
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	devs := make([]fabric.Device, 0, len(names))
	for _, name := range names {
		dir := filepath.Join(root, name)
		guid, err := parseGUID(readTrim(filepath.Join(dir, "node_guid")))
		if err != nil {
			continue // not a device directory
		}
		d := fabric.Device{
			Name:      name,
			Index:     len(devs), // replaced by the kernel's index when netlink answers
			NodeGUID:  guid,
			Transport: transportOf(readTrim(filepath.Join(dir, "node_type"))),
			Netdev:    netdevOf(dir),
		}
		if n, ok := nl[name]; ok {
			d.Index = int(n.index)
			if d.Netdev == "" {
				d.Netdev = n.ndev
			}
		}
		if d.Netdev != "" {
			d.Addrs = interfaceAddrs(d.Netdev)
		}
		caps, ok := driverCaps[driverOf(dir, name)]
		if !ok {
			caps = [2]uint8{defaultRdAtom, defaultRdAtom}
		}
		d.MaxQPRdAtom, d.MaxQPInitRdAtom = caps[0], caps[1]
		devs = append(devs, d)
	}
	if len(devs) == 0 {
		return nil, errNoDevices(root)
	}
	return devs, nil
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// parseGUID parses sysfs's "78d7:a6ff:fe13:372d" form.
func parseGUID(s string) (uint64, error) {
	h := strings.ReplaceAll(s, ":", "")
	if len(h) != 16 {
		return 0, fmt.Errorf("kernel: bad node GUID %q: %w", s, syscall.EINVAL)
	}
	return strconv.ParseUint(h, 16, 64)
}

// transportOf maps sysfs node_type ("1: CA", "4: RNIC", ...) to the
// transport rdma_get_devices reports: RNICs are iWARP, CAs (RoCE
// included), switches and routers InfiniBand.
func transportOf(nodeType string) string {
	n, _, _ := strings.Cut(nodeType, ":")
	switch strings.TrimSpace(n) {
	case "4":
		return "iWARP"
	case "5", "6":
		return "usNIC"
	case "7":
		return "unspecified"
	}
	return "InfiniBand"
}

// netdevOf finds the network interface behind port 1: the RoCE GID table's
// netdev, the parent file of software devices (rxe), or the PCI device's
// net/ directory. iWARP devices without either (siw) get it from netlink.
func netdevOf(dir string) string {
	if s := readTrim(filepath.Join(dir, "ports", "1", "gid_attrs", "ndevs", "0")); s != "" {
		return s
	}
	if s := readTrim(filepath.Join(dir, "parent")); s != "" {
		return s
	}
	if ents, err := os.ReadDir(filepath.Join(dir, "device", "net")); err == nil && len(ents) > 0 {
		return ents[0].Name()
	}
	return ""
}

// driverOf names the device's driver: the PCI driver's module when the
// device has one, else the name prefix of software devices.
func driverOf(dir, name string) string {
	if p, err := os.Readlink(filepath.Join(dir, "device", "driver")); err == nil {
		return filepath.Base(p)
	}
	for _, sw := range []string{"rxe", "siw"} {
		if strings.HasPrefix(name, sw) {
			return sw
		}
	}
	return ""
}

func interfaceAddrs(name string) []netip.Addr {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil
	}
	as, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip, ok := netip.AddrFromSlice(ipn.IP); ok {
				out = append(out, ip.Unmap())
			}
		}
	}
	return out
}
