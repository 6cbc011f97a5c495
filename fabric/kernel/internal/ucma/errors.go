package ucma

import (
	"syscall"

	"github.com/cmrt/cmrt/internal/errno"
)

// Sentinel errors. Match them with errors.Is; the errno each wraps is named
// in its comment.
var (
	// ErrShortBuffer: a buffer given to an encoder or decoder is smaller than
	// the structure it must hold (ENOSPC, as the kernel says when out is too
	// small).
	ErrShortBuffer = errno.New("ucma: buffer too short", syscall.ENOSPC)

	// ErrAddrFamily: a socket address has a family other than AF_INET,
	// AF_INET6 or AF_IB, or an IP command was given an AF_IB address
	// (EINVAL, as librdmacm reports an unsupported family).
	ErrAddrFamily = errno.New("ucma: unsupported address family", syscall.EINVAL)

	// ErrAddrSize: a socket address does not fit the slot it is encoded into
	// or decoded from (EINVAL).
	ErrAddrSize = errno.New("ucma: socket address does not fit its slot", syscall.EINVAL)

	// ErrBadAddr: an IP address is invalid or its zone names no interface
	// (EINVAL).
	ErrBadAddr = errno.New("ucma: invalid IP address or zone", syscall.EINVAL)

	// ErrPrivateData: private data longer than the ABI's u8 length field
	// can describe (EINVAL).
	ErrPrivateData = errno.New("ucma: private data too long", syscall.EINVAL)

	// ErrServiceName: an IB service name longer than 63 bytes (the kernel
	// keeps 64 bytes including the terminating NUL) (EINVAL).
	ErrServiceName = errno.New("ucma: IB service name too long", syscall.EINVAL)

	// ErrShortWrite: write(2) accepted fewer bytes than the command holds
	// (ENODATA, as librdmacm reports any short write).
	ErrShortWrite = errno.New("ucma: short write to rdma_cm", syscall.ENODATA)

	// ErrNoDevice: the rdma_cm character device is missing or is not a
	// character device (ENODEV).
	ErrNoDevice = errno.New("ucma: "+DevicePath+": no such device file (is the rdma_ucm module loaded?)", syscall.ENODEV)

	// ErrABIVersion: the kernel's rdma_cm ABI version is outside the
	// supported range 3-4 (EPERM, as librdmacm reports it).
	ErrABIVersion = errno.New("ucma: unsupported rdma_cm ABI version", syscall.EPERM)

	// ErrClosed: Buffers used after Close (EBADF).
	ErrClosed = errno.New("ucma: buffers closed", syscall.EBADF)
)

// wrapErr returns an error with message msg that matches every non-nil
// cause.
var wrapErr = errno.Wrap
