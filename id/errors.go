package id

import (
	"errors"
	"fmt"
	"syscall"
)

// Error is the error returned by a failed CM call. It unwraps to the errno
// librdmacm would set, so errors.Is(err, syscall.EINVAL) works.
type Error struct {
	// Op is the call that failed, e.g. "connect".
	Op string
	// Msg says why, in words; it may be empty.
	Msg string
	// Err is the underlying error, usually a syscall.Errno.
	Err error
}

// Error implements the error interface.
func (e *Error) Error() string {
	if e.Msg == "" {
		return "cmrt: " + e.Op + ": " + e.Err.Error()
	}
	return "cmrt: " + e.Op + ": " + e.Msg + ": " + e.Err.Error()
}

// Unwrap returns the underlying errno or error.
func (e *Error) Unwrap() error { return e.Err }

// errorf builds an *Error for op wrapping err with a formatted message.
func errorf(op string, err error, format string, args ...any) error {
	return &Error{Op: op, Msg: fmt.Sprintf(format, args...), Err: err}
}

// wrap attaches op to err unless err is nil or already an *Error.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Op: op, Err: err}
}

// StatusErrno maps an event status to the errno a synchronous librdmacm call
// reports for it: REJECTED gives ECONNREFUSED, a negative status -s gives s,
// and a positive status is taken as the errno itself.
func StatusErrno(t EventType, status int) syscall.Errno {
	switch {
	case t == EventRejected:
		return syscall.ECONNREFUSED
	case status < 0:
		return syscall.Errno(-status)
	default:
		return syscall.Errno(status)
	}
}

// ErrCanceled is wrapped (with the context's error) by a blocking call on a
// synchronous id whose context ended before the operation's event arrived.
// The operation is abandoned: the id then only accepts Destroy.
var ErrCanceled = errors.New("cmrt: operation abandoned: context ended before its event")
