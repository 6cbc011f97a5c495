package netlink

import (
	"errors"
	"fmt"
	"syscall"
)

var (
	// ErrClosed is returned when a [Conn] or [Monitor] is used after Close.
	ErrClosed = errors.New("netlink: use of closed socket")

	// ErrMalformed is wrapped by every error describing netlink bytes that
	// cannot be decoded: truncated headers, lengths that overrun their
	// container, attributes of the wrong size.
	ErrMalformed = errors.New("netlink: malformed message")

	// ErrOverrun is returned by [Monitor.Read] when the kernel dropped
	// notifications because the socket receive buffer overflowed (ENOBUFS).
	// The error also matches syscall.ENOBUFS. The consumer must resync its
	// view with a full dump ([Links], [Addrs]) and keep reading.
	ErrOverrun = errors.New("netlink: notifications lost, resync required")

	// ErrRejected is wrapped by the error [RouteGet] returns when the lookup
	// resolved to a reject route (unreachable, prohibit, blackhole, throw).
	// The same error also matches the errno the kernel uses for that route
	// type; see [RouteType.Errno].
	ErrRejected = errors.New("netlink: destination matched a reject route")

	// ErrDumpInterrupted is returned when a dump was interrupted by
	// concurrent changes (NLM_F_DUMP_INTR) on every one of several attempts.
	ErrDumpInterrupted = errors.New("netlink: dump repeatedly interrupted by concurrent changes")
)

// Error is an error reported by the kernel in an NLMSG_ERROR message (or in
// the payload of NLMSG_DONE). It unwraps to Errno.
type Error struct {
	// Op names the request that failed, e.g. "RTM_GETROUTE".
	Op string
	// Errno is the (positive) error number reported by the kernel.
	Errno syscall.Errno
	// Message is the extended-ACK error text (NLMSGERR_ATTR_MSG), if the
	// kernel provided one.
	Message string
}

// Error implements the error interface.
func (e *Error) Error() string {
	s := e.Op + ": " + e.Errno.Error()
	if e.Message != "" {
		s += " (" + e.Message + ")"
	}
	return s
}

// Unwrap returns the errno so that errors.Is(err, syscall.EXXX) works.
func (e *Error) Unwrap() error { return e.Errno }

// malformed returns an error wrapping ErrMalformed.
func malformed(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
}

// errUnsupportedFamily marks messages of an address family this package does
// not decode (for example AF_MCTP addresses in an AF_UNSPEC dump); dumps and
// the monitor skip such messages silently.
var errUnsupportedFamily = errors.New("netlink: unsupported address family")
