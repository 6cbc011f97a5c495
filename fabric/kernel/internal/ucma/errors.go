package ucma

import (
	"syscall"
)

// Error is the type of the package's sentinel errors. Each unwraps to the
// errno librdmacm (or the kernel) reports for the same condition, so both
// errors.Is(err, ErrShortWrite) and errors.Is(err, syscall.ENODATA) hold.
type Error struct {
	msg   string
	errno syscall.Errno
}

// Error implements the error interface.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the errno the error stands for.
func (e *Error) Unwrap() error { return e.errno }

// Sentinel errors. Match them with errors.Is; the errno each wraps is named
// in its comment.
var (
	// ErrShortBuffer: a buffer given to an encoder or decoder is smaller than
	// the structure it must hold (ENOSPC, as the kernel says when out is too
	// small).
	ErrShortBuffer = &Error{"ucma: buffer too short", syscall.ENOSPC}

	// ErrAddrFamily: a socket address has a family other than AF_INET,
	// AF_INET6 or AF_IB, or an IP command was given an AF_IB address
	// (EINVAL, as librdmacm reports an unsupported family).
	ErrAddrFamily = &Error{"ucma: unsupported address family", syscall.EINVAL}

	// ErrAddrSize: a socket address does not fit the slot it is encoded into
	// or decoded from (EINVAL).
	ErrAddrSize = &Error{"ucma: socket address does not fit its slot", syscall.EINVAL}

	// ErrBadAddr: an IP address is invalid or its zone names no interface
	// (EINVAL).
	ErrBadAddr = &Error{"ucma: invalid IP address or zone", syscall.EINVAL}

	// ErrPrivateData: private data longer than the ABI's u8 length field
	// can describe (EINVAL).
	ErrPrivateData = &Error{"ucma: private data too long", syscall.EINVAL}

	// ErrServiceName: an IB service name longer than 63 bytes (the kernel
	// keeps 64 bytes including the terminating NUL) (EINVAL).
	ErrServiceName = &Error{"ucma: IB service name too long", syscall.EINVAL}

	// ErrShortWrite: write(2) accepted fewer bytes than the command holds
	// (ENODATA, as librdmacm reports any short write).
	ErrShortWrite = &Error{"ucma: short write to rdma_cm", syscall.ENODATA}

	// ErrNoDevice: the rdma_cm character device is missing or is not a
	// character device (ENODEV).
	ErrNoDevice = &Error{"ucma: " + DevicePath + ": no such device file (is the rdma_ucm module loaded?)", syscall.ENODEV}

	// ErrABIVersion: the kernel's rdma_cm ABI version is outside the
	// supported range 3-4 (EPERM, as librdmacm reports it).
	ErrABIVersion = &Error{"ucma: unsupported rdma_cm ABI version", syscall.EPERM}

	// ErrClosed: Buffers used after Close (EBADF).
	ErrClosed = &Error{"ucma: buffers closed", syscall.EBADF}
)

// wrapped is an error with its own message that matches several causes:
// typically a sentinel and the underlying system error.
type wrapped struct {
	msg  string
	errs []error
}

// Error returns the message.
func (w *wrapped) Error() string { return w.msg }

// Unwrap returns the causes, for errors.Is and errors.As.
func (w *wrapped) Unwrap() []error { return w.errs }

// wrapErr returns an error with message msg that matches every non-nil cause.
func wrapErr(msg string, causes ...error) error {
	errs := make([]error, 0, len(causes))
	for _, c := range causes {
		if c != nil {
			errs = append(errs, c)
		}
	}
	return &wrapped{msg: msg, errs: errs}
}
