package uverbs

import (
	"syscall"

	"github.com/cmrt/cmrt/internal/errno"
)

// Sentinel errors.
var (
	// ErrShortBuffer: a buffer given to an encoder or decoder is smaller
	// than the structure it must hold (ENOSPC, as the kernel says when a
	// response buffer is too small).
	ErrShortBuffer = errno.New("uverbs: buffer too short", syscall.ENOSPC)

	// ErrDriverData: driver request or response bytes that are not a
	// whole number of 32-bit words, or too long for the header (EINVAL).
	ErrDriverData = errno.New("uverbs: driver data not a multiple of 4 bytes or too long", syscall.EINVAL)

	// ErrShortWrite: write(2) accepted fewer bytes than the command holds
	// (ENODATA, as libibverbs reports a short write).
	ErrShortWrite = errno.New("uverbs: short write to the verbs device", syscall.ENODATA)

	// ErrClosed: a Context used after Close (EBADF).
	ErrClosed = errno.New("uverbs: device context closed", syscall.EBADF)
)

// wrapErr returns an error with message msg that matches every non-nil
// cause.
var wrapErr = errno.Wrap
