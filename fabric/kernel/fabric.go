package kernel

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rs/zerolog"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/fabric/kernel/internal/ucma"
)

// Fabric is the kernel's RDMA CM. The zero value is not usable: use New,
// or Default for the registered instance.
type Fabric struct {
	opts options
	log  zerolog.Logger // opts.log with component=kernel
	devs devTable

	afMu    sync.Mutex
	afKnown bool
	afIB    bool // the kernel has BIND, RESOLVE_ADDR, QUERY and JOIN_MCAST

	mcMu     sync.Mutex
	mcGroups map[uint32]mcJoin // multicast handle -> join

	vdMu  sync.Mutex
	vdevs map[string]*verbsDev // open verbs contexts, by device name
}

// mcJoin is one multicast join as the kernel knows it.
type mcJoin struct {
	group    netip.Addr
	ep       *endpoint
	sendOnly bool
}

type options struct {
	name       string
	devicePath string
	abiPath    string
	sysfsRoot  string
	afIB       int // 0 probe, 1 force on, -1 force off
	log        zerolog.Logger
}

// Option configures a Fabric.
type Option func(*options)

// WithLogger sets the logger (zerolog.Nop by default). The fabric logs
// what it decides on its own and no call reports: the outcome of its probe
// for the AF_IB-capable commands (debug) and a switch to the *_IP commands
// when the kernel lacks them (info). Entries carry component=kernel.
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithName registers the fabric under another name than "kernel".
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithDevicePath opens another rdma_cm character device than
// /dev/infiniband/rdma_cm (a container's bind mount, or a missing path in
// tests).
func WithDevicePath(path string) Option { return func(o *options) { o.devicePath = path } }

// WithABIVersionPath reads the rdma_cm ABI version from another file than
// /sys/class/misc/rdma_cm/abi_version.
func WithABIVersionPath(path string) Option { return func(o *options) { o.abiPath = path } }

// WithSysfsRoot lists devices from another directory laid out as
// /sys/class/infiniband (tests use a fake tree). RDMA netlink, which
// completes the real tree's listing, is then not asked.
func WithSysfsRoot(dir string) Option { return func(o *options) { o.sysfsRoot = dir } }

// WithAFIB forces the use of the AF_IB-capable commands (BIND,
// RESOLVE_ADDR, QUERY, JOIN_MCAST) on or off instead of probing the kernel
// for them as librdmacm does.
func WithAFIB(on bool) Option {
	return func(o *options) {
		if on {
			o.afIB = 1
		} else {
			o.afIB = -1
		}
	}
}

// New returns a kernel fabric. It touches nothing until used.
func New(opts ...Option) *Fabric {
	o := options{
		name:       "kernel",
		devicePath: ucma.DevicePath,
		abiPath:    ucma.ABIVersionPath,
		sysfsRoot:  defaultSysfsRoot,
		log:        zerolog.Nop(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	f := &Fabric{opts: o, log: o.log.With().Str("component", "kernel").Logger()}
	f.devs.root = o.sysfsRoot
	return f
}

var std = New()

// Default returns the fabric registered as "kernel".
func Default() *Fabric { return std }

func init() { fabric.Register(std) }

// Name implements fabric.Fabric.
func (f *Fabric) Name() string { return f.opts.name }

// Devices implements fabric.Fabric: the kernel's RDMA devices, from sysfs
// (completed by RDMA netlink for the kernel device index and the netdev of
// devices that sysfs does not link to one). No device gives ENODEV.
func (f *Fabric) Devices() ([]fabric.Device, error) { return f.devs.list() }

// Open implements fabric.Fabric: one open of the rdma_cm device per event
// channel, as rdma_create_event_channel. A missing device file gives
// ENODEV, an ABI version other than 3 or 4 EPERM.
func (f *Fabric) Open() (fabric.EventSource, error) {
	fd, err := openDevice(f.opts.devicePath)
	if err != nil {
		return nil, err
	}
	if err := checkABI(f.opts.abiPath); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s, err := newSource(f, fd)
	if err != nil {
		return nil, err
	}
	f.probeAFIB(s)
	f.devs.warm()
	return s, nil
}

// openDevice opens the rdma_cm character device read-write, close-on-exec
// and non-blocking (GET_EVENT then answers EAGAIN instead of sleeping in
// the kernel; waiting is done with poll).
func openDevice(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV) {
			return -1, fmt.Errorf("kernel: %s: no such device (%v): the kernel RDMA CM is not available; "+
				"load it with `modprobe rdma_ucm` and an RDMA driver (e.g. `modprobe rdma_rxe` then "+
				"`rdma link add rxe0 type rxe netdev <if>`), or use the software fabric (CMRT_FABRIC=soft): %w",
				path, err, syscall.ENODEV)
		}
		return -1, fmt.Errorf("kernel: open %s: %w", path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("kernel: fstat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		unix.Close(fd)
		return -1, fmt.Errorf("kernel: %s is not a character device: %w", path, syscall.ENODEV)
	}
	return fd, nil
}

// checkABI reads the rdma_cm ABI version; 3 and 4 are accepted, others
// give EPERM as in librdmacm. An unreadable file is not fatal when the
// device opened (containers often hide /sys/class/misc).
func checkABI(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil
		}
		return fmt.Errorf("kernel: rdma_cm ABI version: %w", err)
	}
	s := strings.TrimSpace(string(raw))
	v, err := strconv.Atoi(s)
	if err != nil || v < 3 || v > ucma.ABIVersionCurrent {
		return fmt.Errorf("kernel: rdma_cm ABI version %q unsupported (want 3-4): %w", s, syscall.EPERM)
	}
	return nil
}

// AF_IB probe: what ucma_set_af_ib_support does.
const (
	ibIPPSTCP  = 0x0000000001060000 // RDMA_IB_IP_PS_TCP
	ibIPPSMask = 0xFFFFFFFFFFFF0000 // RDMA_IB_IP_PS_MASK
	probeUID   = ^uint64(0)
)

// probeAFIB learns once whether the kernel has the AF_IB-capable commands,
// by binding a PS_IB id to an AF_IB wildcard, as librdmacm does. The probe
// runs without f.afMu held (commands take the source's lock, and
// endpoints ask afib() while holding theirs).
func (f *Fabric) probeAFIB(s *source) {
	f.afMu.Lock()
	known, force := f.afKnown, f.opts.afIB
	f.afMu.Unlock()
	if known {
		return
	}
	ok := force > 0
	if force == 0 {
		err := s.exec(func(fd int, b *ucma.Buffers) error {
			resp, err := b.Exec(fd, &ucma.CreateID{UID: probeUID, PS: fabric.PSIB, QPType: fabric.RC})
			if err != nil {
				return err
			}
			h, _ := ucma.DecodeUint32Resp(resp)
			bind := ucma.Bind{ID: h, Addr: ucma.IBSockaddr(ucma.IBAddr{SID: ibIPPSTCP, SIDMask: ibIPPSMask})}
			_, berr := b.Exec(fd, &bind)
			ok = berr == nil
			_, _ = b.Exec(fd, &ucma.DestroyID{ID: h})
			return nil
		})
		if err != nil {
			f.log.Debug().Err(err).Msg("AF_IB probe failed, trying again with the next channel")
			return
		}
		f.log.Debug().Bool("af_ib", ok).Msg("AF_IB commands probed")
	}
	f.afMu.Lock()
	if !f.afKnown {
		f.afIB, f.afKnown = ok, true
	}
	f.afMu.Unlock()
}

// afib reports whether to use the AF_IB-capable commands.
func (f *Fabric) afib() bool {
	f.afMu.Lock()
	defer f.afMu.Unlock()
	return f.afIB
}

// UsesAFIB reports whether the fabric speaks the AF_IB-capable commands
// (BIND, RESOLVE_ADDR, QUERY, JOIN_MCAST; kernels since 3.11) rather than
// their *_IP predecessors. It is known once a channel has been opened.
func (f *Fabric) UsesAFIB() bool { return f.afib() }

// fallback reports whether err from an AF_IB-capable command means the
// kernel lacks it (ENOSYS: a command slot without a handler), and then
// switches to the *_IP commands for good. EINVAL is not taken as such:
// it is also every command's state error, and the probe has shown the
// commands exist.
func (f *Fabric) fallback(err error) bool {
	if !errors.Is(err, syscall.ENOSYS) {
		return false
	}
	f.afMu.Lock()
	defer f.afMu.Unlock()
	if !f.afIB {
		return false
	}
	f.afIB = false
	f.log.Info().Err(err).Msg("the kernel lacks the AF_IB commands: using the *_IP ones")
	return true
}

// device returns the device with this node GUID (and index, if known).
func (f *Fabric) device(guid uint64, index uint32) (fabric.Device, bool) {
	if guid == 0 {
		return fabric.Device{}, false
	}
	return f.devs.lookup(guid, index)
}

// rdCaps returns the IRD/ORD caps of the device with this GUID.
func (f *Fabric) rdCaps(guid uint64, index uint32) (ird, ord uint8) {
	if d, ok := f.device(guid, index); ok {
		return d.MaxQPRdAtom, d.MaxQPInitRdAtom
	}
	return defaultRdAtom, defaultRdAtom
}

func (f *Fabric) addJoin(mc uint32, j mcJoin) {
	f.mcMu.Lock()
	if f.mcGroups == nil {
		f.mcGroups = make(map[uint32]mcJoin)
	}
	f.mcGroups[mc] = j
	f.mcMu.Unlock()
}

func (f *Fabric) dropJoin(mc uint32) {
	f.mcMu.Lock()
	delete(f.mcGroups, mc)
	f.mcMu.Unlock()
}

func (f *Fabric) join(mc uint32) (mcJoin, bool) {
	f.mcMu.Lock()
	defer f.mcMu.Unlock()
	j, ok := f.mcGroups[mc]
	return j, ok
}
