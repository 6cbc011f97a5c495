// Package errno holds the error types shared by the kernel fabric's ABI
// packages: a sentinel that stands for one errno, and an error with its own
// message that matches several causes. Both work with errors.Is, so a
// caller can test for the sentinel or for the errno librdmacm reports.
package errno

import "syscall"

// Error is a sentinel error that stands for one errno: errors.Is(err, s)
// and errors.Is(err, s.Errno()) both hold for an err that wraps s.
type Error struct {
	msg   string
	errno syscall.Errno
}

// New returns a sentinel with message msg that unwraps to e.
func New(msg string, e syscall.Errno) *Error { return &Error{msg: msg, errno: e} }

// Error returns the message.
func (e *Error) Error() string { return e.msg }

// Unwrap returns the errno the error stands for.
func (e *Error) Unwrap() error { return e.errno }

// Errno returns the errno the error stands for.
func (e *Error) Errno() syscall.Errno { return e.errno }

// multi is an error with its own message that matches several causes:
// typically a sentinel and the underlying system error.
type multi struct {
	msg  string
	errs []error
}

// Error returns the message.
func (m *multi) Error() string { return m.msg }

// Unwrap returns the causes, for errors.Is and errors.As.
func (m *multi) Unwrap() []error { return m.errs }

// Wrap returns an error with message msg that matches every non-nil cause.
func Wrap(msg string, causes ...error) error {
	errs := make([]error, 0, len(causes))
	for _, c := range causes {
		if c != nil {
			errs = append(errs, c)
		}
	}
	return &multi{msg: msg, errs: errs}
}
