package poll

import (
	"encoding/binary"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// EventFD is a Linux eventfd(2) counter: Add increments it, Read returns and
// clears it, and the descriptor is readable while the counter is non-zero.
// It is opened non-blocking and close-on-exec.
type EventFD struct {
	fd     int
	closed atomic.Bool
}

// NewEventFD opens an eventfd with a zero counter.
func NewEventFD() (*EventFD, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("eventfd", err)
	}
	return &EventFD{fd: fd}, nil
}

// Fd returns the descriptor.
func (e *EventFD) Fd() int { return e.fd }

// Add adds n (> 0) to the counter, making the descriptor readable. If the
// counter would overflow it is drained first, which keeps it readable.
func (e *EventFD) Add(n uint64) error {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], n)
	for {
		_, err := unix.Write(e.fd, b[:])
		switch err {
		case nil:
			return nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// The counter is at its maximum: it is readable already, but
			// drain and retry so the write is not lost.
			if _, rerr := e.Read(); rerr != nil && rerr != errAgain {
				return rerr
			}
			continue
		default:
			return os.NewSyscallError("eventfd write", err)
		}
	}
}

var errAgain = os.NewSyscallError("eventfd read", unix.EAGAIN)

// Read returns the counter and resets it to zero. On an empty counter it
// returns an error wrapping EAGAIN.
func (e *EventFD) Read() (uint64, error) {
	var b [8]byte
	for {
		_, err := unix.Read(e.fd, b[:])
		switch err {
		case nil:
			return binary.NativeEndian.Uint64(b[:]), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return 0, errAgain
		default:
			return 0, os.NewSyscallError("eventfd read", err)
		}
	}
}

// Close closes the descriptor. It is idempotent.
func (e *EventFD) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	return os.NewSyscallError("close", unix.Close(e.fd))
}
