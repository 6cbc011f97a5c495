package uverbs

import "syscall"

// Error is the type of the package's sentinel errors. Each unwraps to the
// errno it stands for, so both errors.Is(err, ErrShortBuffer) and
// errors.Is(err, syscall.ENOSPC) hold.
type Error struct {
	msg   string
	errno syscall.Errno
}

// Error implements the error interface.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the errno the error stands for.
func (e *Error) Unwrap() error { return e.errno }

// Sentinel errors.
var (
	// ErrShortBuffer: a buffer given to an encoder or decoder is smaller
	// than the structure it must hold (ENOSPC, as the kernel says when a
	// response buffer is too small).
	ErrShortBuffer = &Error{"uverbs: buffer too short", syscall.ENOSPC}

	// ErrDriverData: driver request or response bytes that are not a
	// whole number of 32-bit words, or too long for the header (EINVAL).
	ErrDriverData = &Error{"uverbs: driver data not a multiple of 4 bytes or too long", syscall.EINVAL}

	// ErrShortWrite: write(2) accepted fewer bytes than the command holds
	// (ENODATA, as libibverbs reports a short write).
	ErrShortWrite = &Error{"uverbs: short write to the verbs device", syscall.ENODATA}

	// ErrClosed: a Context used after Close (EBADF).
	ErrClosed = &Error{"uverbs: device context closed", syscall.EBADF}
)

// wrapped is an error with its own message matching several causes.
type wrapped struct {
	msg  string
	errs []error
}

func (w *wrapped) Error() string   { return w.msg }
func (w *wrapped) Unwrap() []error { return w.errs }

// wrapErr returns an error with message msg that matches every non-nil
// cause.
func wrapErr(msg string, causes ...error) error {
	errs := make([]error, 0, len(causes))
	for _, c := range causes {
		if c != nil {
			errs = append(errs, c)
		}
	}
	return &wrapped{msg: msg, errs: errs}
}
