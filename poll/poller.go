package poll

import (
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Readiness bits, as epoll(7) reports them.
const (
	In    = unix.EPOLLIN    // readable
	Out   = unix.EPOLLOUT   // writable
	RDHup = unix.EPOLLRDHUP // peer closed its writing half
	Err   = unix.EPOLLERR   // error condition
	Hup   = unix.EPOLLHUP   // hang up
	// Edge requests edge-triggered notification (EPOLLET).
	Edge = unix.EPOLLET
)

// Event is one readiness notification: the user data given to Add and the
// readiness bits.
type Event struct {
	// Data is the 64-bit value registered with the descriptor.
	Data uint64
	// Events holds the readiness bits (In, Out, Err, Hup, ...).
	Events uint32
}

// Poller is an epoll instance. The zero value is not usable; call Open.
type Poller struct {
	fd     int
	closed atomic.Bool
	raw    []unix.EpollEvent
	file   *os.File // set by Netpoll: owns fd from then on
}

// Open creates an epoll instance (close-on-exec) whose Wait returns at most
// maxEvents events per call.
func Open(maxEvents int) (*Poller, error) {
	if maxEvents <= 0 {
		maxEvents = 128
	}
	fd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("epoll_create1", err)
	}
	return &Poller{fd: fd, raw: make([]unix.EpollEvent, maxEvents)}, nil
}

// Fd returns the epoll descriptor.
func (p *Poller) Fd() int { return p.fd }

func pack(events uint32, data uint64) *unix.EpollEvent {
	return &unix.EpollEvent{Events: events, Fd: int32(uint32(data)), Pad: int32(uint32(data >> 32))}
}

// Add registers fd for the given readiness bits; data comes back in Event.Data.
func (p *Poller) Add(fd int, events uint32, data uint64) error {
	return os.NewSyscallError("epoll_ctl add", unix.EpollCtl(p.fd, unix.EPOLL_CTL_ADD, fd, pack(events, data)))
}

// Modify changes the readiness bits and data of a registered fd.
func (p *Poller) Modify(fd int, events uint32, data uint64) error {
	return os.NewSyscallError("epoll_ctl mod", unix.EpollCtl(p.fd, unix.EPOLL_CTL_MOD, fd, pack(events, data)))
}

// Delete removes fd from the set. Deleting an fd that is not registered
// returns an error wrapping ENOENT.
func (p *Poller) Delete(fd int) error {
	return os.NewSyscallError("epoll_ctl del", unix.EpollCtl(p.fd, unix.EPOLL_CTL_DEL, fd, nil))
}

// Wait blocks until at least one registered fd is ready or timeoutMs
// milliseconds pass (-1 waits forever, 0 polls), and copies the ready events
// into out. It retries on EINTR and returns the number of events copied.
// Wait must only be called by the poller's owner goroutine.
func (p *Poller) Wait(out []Event, timeoutMs int) (int, error) {
	raw := p.raw
	if len(out) < len(raw) {
		raw = raw[:len(out)]
	}
	for {
		n, err := unix.EpollWait(p.fd, raw, timeoutMs)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("epoll_wait", err)
		}
		for i := 0; i < n; i++ {
			e := &raw[i]
			out[i] = Event{Data: uint64(uint32(e.Fd)) | uint64(uint32(e.Pad))<<32, Events: e.Events}
		}
		return n, nil
	}
}

// Netpoll hands the epoll descriptor to the Go netpoller, so that its owner
// can wait for it without holding a thread in epoll_wait: it makes the
// descriptor non-blocking and wraps it in an *os.File, which the Poller
// keeps (the file's finalizer would otherwise close the descriptor). The
// owner waits with the returned RawConn's Read and a callback that calls
// Wait(out, 0), and must park only after Wait(out, 0) returned 0: the
// runtime watches the epoll descriptor edge-triggered, and a registered
// descriptor that stays ready makes no new edge. From then on Close closes
// the file. ok is false when the runtime would not take the descriptor; the
// owner then blocks in Wait as before.
func (p *Poller) Netpoll() (rc syscall.RawConn, ok bool, err error) {
	if p.file != nil {
		return nil, false, os.NewSyscallError("netpoll", unix.EBUSY)
	}
	if err := unix.SetNonblock(p.fd, true); err != nil {
		return nil, false, os.NewSyscallError("fcntl", err)
	}
	f := os.NewFile(uintptr(p.fd), "epoll")
	p.file = f // owns fd now, whatever follows
	if rc, err = f.SyscallConn(); err != nil {
		return nil, false, err
	}
	// Deadlines work only on descriptors the netpoller took.
	return rc, f.SetReadDeadline(time.Time{}) == nil, nil
}

// Close closes the epoll descriptor. It is idempotent.
func (p *Poller) Close() error {
	if p.closed.Swap(true) {
		return nil
	}
	if p.file != nil {
		return p.file.Close()
	}
	return os.NewSyscallError("close", unix.Close(p.fd))
}
