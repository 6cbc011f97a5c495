package kernel

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric/kernel/internal/provider"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider/rxe"
	"github.com/cmrt/cmrt/fabric/kernel/internal/provider/siw"
)

// Kernel driver ids (enum rdma_driver_id, uapi ib_user_ioctl_verbs.h), as
// RDMA netlink reports them for a device's uverbs character device.
const (
	driverUnknown = 0
	driverMLX5    = 1
	driverMLX4    = 2
	driverCXGB4   = 4
	driverBNXTRE  = 6
	driverIRDMA   = 9
	driverQEDR    = 11
	driverHNS     = 12
	driverRXE     = 14
	driverEFA     = 17
	driverSIW     = 18
	driverERDMA   = 19
	driverMANA    = 20
)

// providers are the user-space verbs providers cmrt has, by driver id.
var providers = map[uint32]provider.Driver{
	driverRXE: rxe.Driver{},
	driverSIW: siw.Driver{},
}

// driverNames names the drivers cmrt has no provider for (the rdma-core
// provider a user would need).
var driverNames = map[uint32]string{
	driverMLX5: "mlx5", driverMLX4: "mlx4", driverCXGB4: "cxgb4", driverBNXTRE: "bnxt_re",
	driverIRDMA: "irdma", driverQEDR: "qedr", driverHNS: "hns", driverEFA: "efa",
	driverERDMA: "erdma", driverMANA: "mana",
}

// providerFor returns the provider of a device's driver, or an error
// naming the provider the device would need (EOPNOTSUPP).
func providerFor(dev string, driverID uint32, driverName string) (provider.Driver, error) {
	if p, ok := providers[driverID]; ok {
		return p, nil
	}
	if driverID == driverUnknown {
		for _, p := range providers {
			if driverName == p.Name() {
				return p, nil
			}
		}
	}
	name := driverNames[driverID]
	if name == "" {
		name = driverName
	}
	if name == "" {
		name = "an unknown driver"
	}
	return nil, fmt.Errorf("kernel: device %s needs the %s verbs provider, which cmrt does not have "+
		"(it has rxe and siw; see fabric/kernel/PROVIDERS.md): %w", dev, name, syscall.EOPNOTSUPP)
}

// verbsDevFile is where a device's uverbs character device is and which
// driver runs it.
type verbsDevFile struct {
	path       string
	driverID   uint32
	driverName string // from sysfs, when netlink cannot say
}

// RDMA netlink's GET_CHARDEV.
const (
	nldevCmdGetChardev      = 15 // RDMA_NLDEV_CMD_GET_CHARDEV
	nldevAttrChardevType    = 69 // string
	nldevAttrChardevName    = 70 // string
	nldevAttrUverbsDriverID = 73 // u32
)

// findVerbsDev finds the uverbs device of an RDMA device: from RDMA
// netlink (GET_CHARDEV "uverbs", which also names the driver), else from
// sysfs (/sys/class/infiniband_verbs/uverbsN/ibdev).
func findVerbsDev(sysfsRoot, name string, index uint32) (verbsDevFile, error) {
	drv := driverOf(filepath.Join(sysfsRoot, name), name)
	if index != invalidIndex && nldevEnabled(sysfsRoot) {
		if cdev, id, err := nlChardev(index); err == nil && cdev != "" {
			return verbsDevFile{path: "/dev/infiniband/" + cdev, driverID: id, driverName: drv}, nil
		}
	}
	class := filepath.Join(filepath.Dir(sysfsRoot), "infiniband_verbs")
	ents, err := os.ReadDir(class)
	if err == nil {
		for _, e := range ents {
			if readTrim(filepath.Join(class, e.Name(), "ibdev")) == name {
				return verbsDevFile{path: "/dev/infiniband/" + e.Name(), driverName: drv}, nil
			}
		}
	}
	return verbsDevFile{}, fmt.Errorf("kernel: device %s has no uverbs device (is ib_uverbs loaded?): %w", name, syscall.ENODEV)
}

// nlChardev asks RDMA netlink for a device's uverbs character device name
// and driver id.
func nlChardev(index uint32) (string, uint32, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_RDMA)
	if err != nil {
		return "", 0, err
	}
	defer unix.Close(fd)
	tv := unix.NsecToTimeval(nldevReadDeadlineMs * 1e6)
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return "", 0, err
	}
	req := nlPutU32(nil, nldevAttrDevIndex, index)
	req = nlPutString(req, nldevAttrChardevType, "uverbs")
	var name string
	var drv uint32
	err = nlRequest(fd, 1, nldevType(nldevCmdGetChardev), 0, req, func(attrs map[uint16][]byte) {
		name = nlString(attrs[nldevAttrChardevName])
		drv = nlU32(attrs[nldevAttrUverbsDriverID])
	})
	if strings.ContainsAny(name, "/") {
		return "", 0, fmt.Errorf("kernel: bad chardev name %q: %w", name, syscall.EINVAL)
	}
	return name, drv, err
}

func nlPutString(b []byte, typ uint16, s string) []byte {
	l := nlaHdrLen + len(s) + 1
	a := make([]byte, nlAlign(l))
	binary.NativeEndian.PutUint16(a[0:], uint16(l))
	binary.NativeEndian.PutUint16(a[2:], typ)
	copy(a[nlaHdrLen:], s)
	return append(b, a...)
}
