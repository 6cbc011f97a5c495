package uverbs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Layout of a Context's scratch mapping: the command first, the response
// after it.
const (
	scratchSize = 4096
	cmdArea     = 1024 // larger than any command with its driver bytes
)

// Context is one open verbs device file with its device context (what
// ibv_open_device returns): the command descriptor, scratch memory for
// responses, and the async event descriptor GET_CONTEXT created.
//
// Exec serializes commands on the scratch memory; Write and Doorbell issue
// pre-encoded commands (doorbells, notification requests) without a lock:
// their callers keep their own command and response memory. The owner must not
// Close a Context while objects created on it are still in use.
type Context struct {
	path           string
	fd             int
	async          *os.File
	numCompVectors uint32

	mu        sync.Mutex
	closed    bool
	fake      bool // NewFakeContext: no device, no scratch memory, no async descriptor
	fakeWrite func([]byte) error
	fakeExec  func([]byte) error // SetFakeExec; nil: Exec fails with ErrClosed
	scratch   []byte
	cmd       []byte
	resp      []byte
}

// Open opens the verbs device file at path (/dev/infiniband/uverbsN)
// read-write and close-on-exec and creates its device context with gc
// (whose driver bytes depend on the device's provider). It returns the
// context and a copy of the driver's GET_CONTEXT response.
func Open(path string, gc *GetContext) (*Context, []byte, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		perr := &fs.PathError{Op: "open", Path: path, Err: err}
		return nil, nil, wrapErr("uverbs: "+perr.Error(), perr)
	}
	mem, err := unix.Mmap(-1, 0, scratchSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(fd)
		return nil, nil, wrapErr("uverbs: mmap scratch memory: "+err.Error(), err)
	}
	c := &Context{path: path, fd: fd, scratch: mem, cmd: mem[:cmdArea:cmdArea], resp: mem[cmdArea:]}
	resp, err := c.Exec(gc)
	if err != nil {
		c.release()
		return nil, nil, fmt.Errorf("uverbs: %s: GET_CONTEXT: %w", path, err)
	}
	var r GetContextResp
	_ = r.Decode(resp)
	c.numCompVectors = r.NumCompVectors
	afd := int(r.AsyncFD)
	if err := unix.SetNonblock(afd, true); err != nil {
		unix.Close(afd)
		c.release()
		return nil, nil, fmt.Errorf("uverbs: async event descriptor: %w", err)
	}
	c.async = os.NewFile(uintptr(afd), path+" async")
	return c, resp[GetContextRespSize:], nil
}

// NewFakeContext returns a Context without a device, for tests and fakes
// of a driver: Write hands each pre-encoded command to write, in the
// caller's goroutine, as the kernel runs a command within its write(2);
// Exec fails with ErrClosed; ReadAsyncEvent reads 16-byte records from
// asyncFD (a pipe the fake writes; the Context owns it), or fails with
// os.ErrClosed if it is negative.
func NewFakeContext(write func(msg []byte) error, asyncFD int) *Context {
	c := &Context{path: "fake", fd: -1, fake: true, fakeWrite: write}
	if asyncFD >= 0 {
		_ = unix.SetNonblock(asyncFD, true)
		c.async = os.NewFile(uintptr(asyncFD), "fake async")
	}
	return c
}

// SetFakeExec makes Exec on a fake context encode each command and hand
// it to exec, in the caller's goroutine (the response, zeroed, is what
// exec leaves at the command's response address), instead of failing with
// ErrClosed. It does nothing on a real context. Call it before the
// context is shared.
func (c *Context) SetFakeExec(exec func(msg []byte) error) {
	if c.fake {
		c.fakeExec = exec
	}
}

// Path returns the device file's path.
func (c *Context) Path() string { return c.path }

// Fd returns the command descriptor, on which queues are mmap'ed.
func (c *Context) Fd() int { return c.fd }

// NumCompVectors returns the device's completion vectors.
func (c *Context) NumCompVectors() uint32 { return c.numCompVectors }

// Exec encodes cmd with the scratch response area as its response address,
// writes it with one write(2), and returns a copy of the response
// (cmd.RespLen() bytes). Errors are the kernel's errno (a syscall.Errno),
// ErrShortWrite, encoding errors, or ErrClosed.
func (c *Context) Exec(cmd Command) ([]byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || (c.fake && c.fakeExec == nil) {
		return nil, ErrClosed
	}
	n := cmd.RespLen()
	if c.fake {
		r := make([]byte, max(n, 1))
		msg, err := cmd.Encode(make([]byte, cmd.Size()), uintptr(unsafe.Pointer(&r[0])))
		if err != nil {
			return nil, err
		}
		if err := c.fakeExec(msg); err != nil {
			return nil, err
		}
		return r[:n], nil
	}
	if n > len(c.resp) {
		return nil, ErrShortBuffer
	}
	r := c.resp[:n]
	clear(r)
	msg, err := cmd.Encode(c.cmd, uintptr(unsafe.Pointer(&c.resp[0])))
	if err != nil {
		return nil, err
	}
	if err := Write(c.fd, msg); err != nil {
		return nil, err
	}
	return append([]byte(nil), r...), nil
}

// Write issues one pre-encoded command on the command descriptor; see the
// package Write. Callers keep msg (and the response memory it names)
// alive and unmoved for the call.
func (c *Context) Write(msg []byte) error {
	if c.fake {
		return c.fakeWrite(msg)
	}
	return Write(c.fd, msg)
}

// Doorbell writes a pre-encoded command that returns without sleeping (a
// provider's doorbell: POST_SEND or POST_RECV without work requests,
// REQ_NOTIFY_CQ) as Write does, but as a raw system call: the Go scheduler
// is not told, so it neither hands the goroutine's P to another thread
// when the call is slow (under emulation a doorbell that runs the driver's
// requester takes hundreds of microseconds) nor makes the thread win it
// back afterwards. The call must not block; commands that can wait go
// through Write or Exec.
func (c *Context) Doorbell(msg []byte) error {
	if c.fake {
		return c.fakeWrite(msg)
	}
	return RawWrite(c.fd, msg)
}

// RawWrite is Write as a raw system call (see Doorbell). It does not
// allocate.
func RawWrite(fd int, msg []byte) error {
	var p unsafe.Pointer
	if len(msg) > 0 {
		p = unsafe.Pointer(&msg[0])
	}
	n, _, e := unix.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(p), uintptr(len(msg)))
	if e != 0 {
		return e
	}
	if int(n) != len(msg) {
		return ErrShortWrite
	}
	return nil
}

// Write issues exactly one write(2) of msg on fd. A failed write returns
// the errno as a syscall.Errno; a write that takes fewer bytes returns
// ErrShortWrite. It does not allocate.
func Write(fd int, msg []byte) error {
	n, err := unix.Write(fd, msg)
	if err != nil {
		return err
	}
	if n != len(msg) {
		return ErrShortWrite
	}
	return nil
}

// Mmap maps length bytes of a queue the driver shares at offset (the key
// its create response gave), read-write and shared.
func (c *Context) Mmap(offset uint64, length int) ([]byte, error) {
	if length <= 0 || offset > 1<<62 {
		return nil, fmt.Errorf("uverbs: mmap %d bytes at %#x: %w", length, offset, syscall.EINVAL)
	}
	b, err := unix.Mmap(c.fd, int64(offset), length, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("uverbs: mmap %d bytes at %#x: %w", length, offset, err)
	}
	return b, nil
}

// Munmap unmaps a queue mapped with Mmap.
func (c *Context) Munmap(b []byte) error { return Munmap(b) }

// Munmap unmaps memory mapped with Mmap.
func Munmap(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return unix.Munmap(b)
}

// ReadAsyncEvent waits (in the Go netpoller, not on a thread) for the next
// async event of the context and decodes it into ev. It returns an error
// wrapping os.ErrClosed once the context is closed.
func (c *Context) ReadAsyncEvent(ev *AsyncEvent) error {
	if c.async == nil {
		return os.ErrClosed
	}
	var b [AsyncEventSize]byte
	n, err := c.async.Read(b[:])
	if err != nil {
		return err
	}
	if n < AsyncEventSize {
		return ErrShortBuffer
	}
	return ev.Decode(b[:])
}

// Close closes the async event descriptor (ReadAsyncEvent returns), the
// command descriptor (the kernel destroys every object left on the
// context) and the scratch memory. It is idempotent.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var err error
	if c.async != nil {
		err = c.async.Close()
	}
	c.release()
	return err
}

func (c *Context) release() {
	if c.fd >= 0 {
		_ = unix.Close(c.fd)
	}
	if c.scratch != nil {
		_ = unix.Munmap(c.scratch)
	}
	c.scratch, c.cmd, c.resp = nil, nil, nil
	runtime.KeepAlive(c)
}

// IsClosed reports whether err is what a closed descriptor gives.
func IsClosed(err error) bool {
	return errors.Is(err, os.ErrClosed) || errors.Is(err, ErrClosed)
}
