package ucma

import (
	"errors"
	"io/fs"
	"os"
	"runtime"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric"
)

// Paths of the kernel interface.
const (
	// DevicePath is the rdma_cm character device.
	DevicePath = "/dev/infiniband/rdma_cm"
	// ABIVersionPath is the sysfs file holding the rdma_cm ABI version.
	ABIVersionPath = "/sys/class/misc/rdma_cm/abi_version"
)

// Supported ABI versions.
const (
	minABIVersion = 3
	maxABIVersion = ABIVersionCurrent
)

// Write issues exactly one write(2) of b on fd, as each rdma_cm command
// must be. A failed write returns the errno as a syscall.Errno (so
// errors.Is(err, syscall.EINVAL) works); a write that accepts fewer than
// len(b) bytes returns ErrShortWrite (ENODATA). EINTR is returned, not
// retried: the kernel has not run the command.
func Write(fd int, b []byte) error {
	n, err := unix.Write(fd, b)
	if err != nil {
		return err
	}
	if n != len(b) {
		return ErrShortWrite
	}
	return nil
}

// Open opens DevicePath read-write and close-on-exec, as librdmacm does,
// and returns the fd (blocking; use unix.SetNonblock for poll-driven use).
// A missing device file, or a path that is not a character device, gives
// an error wrapping ErrNoDevice (ENODEV) and, when open failed, the open
// error (ENOENT); other open errors (EACCES, ...) are returned wrapped in
// an *fs.PathError.
func Open() (int, error) { return openPath(DevicePath) }

func openPath(path string) (int, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		perr := &fs.PathError{Op: "open", Path: path, Err: err}
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.ENODEV) {
			return -1, wrapErr("ucma: "+path+": no such device file (is the rdma_ucm module loaded?)", ErrNoDevice, perr)
		}
		return -1, wrapErr("ucma: "+perr.Error(), perr)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, wrapErr("ucma: fstat "+path+": "+err.Error(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFCHR {
		unix.Close(fd)
		return -1, wrapErr("ucma: "+path+": not a character device", ErrNoDevice)
	}
	return fd, nil
}

// ABIVersion reads the kernel's rdma_cm ABI version from ABIVersionPath.
// Versions 3 and 4 are accepted; any other value (or an unreadable number)
// gives an error wrapping ErrABIVersion (EPERM), as librdmacm reports it. A
// missing file gives an error wrapping the *fs.PathError (ENOENT).
func ABIVersion() (int, error) { return abiVersionFrom(ABIVersionPath) }

func abiVersionFrom(path string) (int, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, wrapErr("ucma: rdma_cm ABI version: "+err.Error()+" (is the rdma_ucm module loaded?)", err)
	}
	s := strings.TrimSpace(string(raw))
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, wrapErr("ucma: rdma_cm ABI version "+strconv.Quote(s)+" is not a number", ErrABIVersion)
	}
	if v < minABIVersion || v > maxABIVersion {
		return v, wrapErr("ucma: rdma_cm ABI version "+s+" unsupported (want 3-4)", ErrABIVersion)
	}
	return v, nil
}

// Layout of the Buffers mapping: commands at the start, responses (and
// staged option values) after them.
const (
	cmdArea = 512 // >= MaxCommandSize, keeps the response area aligned
)

// Buffers is scratch memory for issuing commands on one rdma_cm fd: room
// for an encoded command and for the response the kernel writes back.
//
// The kernel copies responses to the user address in the command's
// response field while the write(2) runs. That memory must not move and
// must stay mapped for the call; Buffers uses an anonymous private
// mmap(2) mapping rather than Go heap memory pinned with runtime.Pinner:
// it is outside the garbage-collected heap (so no pointer-passing rules
// apply and its address is stable for its whole life), page-aligned, and
// one mapping per fd costs a single page. Close unmaps it; a Buffers that
// is dropped without Close is unmapped by a cleanup.
//
// A Buffers serves one call at a time: callers serialize with a mutex.
// Response slices returned by Exec alias the mapping and are valid until
// the next call or Close. A blocking GET_EVENT holds the Buffers until an
// event arrives, so give it its own Buffers.
type Buffers struct {
	mem     []byte
	cmd     []byte
	resp    []byte
	cleanup runtime.Cleanup
}

// NewBuffers maps one page of scratch memory.
func NewBuffers() (*Buffers, error) {
	size := max(os.Getpagesize(), 4096)
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, wrapErr("ucma: mmap scratch buffers: "+err.Error(), err)
	}
	b := &Buffers{mem: mem, cmd: mem[:cmdArea:cmdArea], resp: mem[cmdArea:]}
	b.cleanup = runtime.AddCleanup(b, func(m []byte) { _ = unix.Munmap(m) }, mem)
	return b, nil
}

// Close unmaps the memory. Slices returned by Exec must not be used
// afterwards. Close is idempotent.
func (b *Buffers) Close() error {
	if b.mem == nil {
		return nil
	}
	b.cleanup.Stop()
	mem := b.mem
	b.mem, b.cmd, b.resp = nil, nil, nil
	return unix.Munmap(mem)
}

// RespCap returns the largest response (or staged option value) Buffers
// can take.
func (b *Buffers) RespCap() int { return len(b.resp) }

// respAddr is the user address of the response area.
func (b *Buffers) respAddr() uintptr { return uintptr(unsafe.Pointer(&b.resp[0])) }

// prefiller is implemented by commands that preset response bytes the
// kernel may leave unwritten.
type prefiller interface {
	prefill(resp []byte)
}

// Exec encodes c with the response area as its response address, zeroes
// the response area (presetting fields older kernels leave unwritten),
// writes the command to fd with Write, and returns the response,
// c.RespLen() bytes aliasing the mapping (empty for commands without a
// response). Encoding errors, a response larger than RespCap
// (ErrShortBuffer) and Write's errors are returned as they are.
func (b *Buffers) Exec(fd int, c Command) ([]byte, error) {
	if b.mem == nil {
		return nil, ErrClosed
	}
	n := c.RespLen()
	if n > len(b.resp) {
		return nil, ErrShortBuffer
	}
	r := b.resp[:n]
	clear(r)
	if p, ok := c.(prefiller); ok {
		p.prefill(r)
	}
	msg, err := c.Encode(b.cmd, b.respAddr())
	if err != nil {
		return nil, err
	}
	if err := Write(fd, msg); err != nil {
		return nil, err
	}
	return r, nil
}

// SetOption issues SET_OPTION for id with the value val staged in the
// response area, so the kernel reads it from pinned memory. A val larger
// than RespCap gives ErrShortBuffer.
func (b *Buffers) SetOption(fd int, id uint32, level fabric.OptionLevel, name fabric.OptionName, val []byte) error {
	if b.mem == nil {
		return ErrClosed
	}
	if len(val) > len(b.resp) {
		return ErrShortBuffer
	}
	copy(b.resp, val)
	c := SetOption{ID: id, Level: level, Name: name, Val: b.respAddr(), Len: uint32(len(val))}
	msg, err := c.Encode(b.cmd, 0)
	if err != nil {
		return err
	}
	return Write(fd, msg)
}
