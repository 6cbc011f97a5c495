package uverbs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// CompChannel is a completion channel (ibv_comp_channel): a descriptor
// that becomes readable when a completion queue armed with REQ_NOTIFY_CQ
// (or its driver's equivalent) gets a completion, with one 8-byte record
// per notification. The descriptor is non-blocking; Wait waits for it in
// the Go netpoller, with which it is registered on the first Wait (a
// queue only polled, or multiplexed through its descriptor by the
// application, never needs it).
type CompChannel struct {
	fd      int
	waitSem chan struct{} // one waiter at a time owns the read deadline
	buf     [CompEventSize]byte
	mu      sync.Mutex // guards buf, file, rc and closed

	file   *os.File // from the first Wait
	rc     syscall.RawConn
	closed bool
}

// CreateCompChannel runs CREATE_COMP_CHANNEL on the context.
func (c *Context) CreateCompChannel() (*CompChannel, error) {
	resp, err := c.Exec(&CreateCompChannel{})
	if err != nil {
		return nil, fmt.Errorf("uverbs: CREATE_COMP_CHANNEL: %w", err)
	}
	fd, _ := DecodeUint32Resp(resp)
	return NewCompChannel(int(fd))
}

// NewCompChannel wraps a completion channel descriptor (or, in tests, any
// pollable descriptor that reads in 8-byte records). It takes ownership of
// fd and makes it non-blocking.
func NewCompChannel(fd int) (*CompChannel, error) {
	// The kernel opens completion channels read-only: one F_SETFL.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_RDONLY|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uverbs: completion channel: %w", err)
	}
	return &CompChannel{fd: fd, waitSem: make(chan struct{}, 1)}, nil
}

// conn returns the descriptor's netpoller handle, registering it on first
// use.
func (ch *CompChannel) conn() (*os.File, syscall.RawConn, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return nil, nil, fmt.Errorf("uverbs: completion channel: %w", os.ErrClosed)
	}
	if ch.file == nil {
		f := os.NewFile(uintptr(ch.fd), "uverbs completion channel")
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, nil, fmt.Errorf("uverbs: completion channel: %w", err)
		}
		ch.file, ch.rc = f, rc
	}
	return ch.file, ch.rc, nil
}

// Fd returns the descriptor.
func (ch *CompChannel) Fd() int { return ch.fd }

// TryRead consumes one notification record without blocking: true if one
// was queued. It does not allocate. The caller guarantees that Close does
// not run concurrently (the completion queue's lock does).
func (ch *CompChannel) TryRead() (bool, error) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	for {
		n, err := unix.Read(ch.fd, ch.buf[:])
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return false, nil
		case err != nil:
			return false, err
		}
		return n == CompEventSize, nil
	}
}

// Wait returns once ready reports true, checking it first and then each
// time the descriptor becomes readable, or when ctx ends (ctx.Err()) or
// the channel is closed (an error wrapping os.ErrClosed). ready runs on
// the waiting goroutine and must not block; it typically re-arms the
// queue and looks at it again, so that a completion arriving between the
// two cannot be missed.
func (ch *CompChannel) Wait(ctx context.Context, ready func() bool) error {
	if ready() {
		return nil
	}
	select {
	case ch.waitSem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-ch.waitSem }()
	file, rc, err := ch.conn()
	if err != nil {
		return err
	}

	var amu sync.Mutex
	active := true
	stop := context.AfterFunc(ctx, func() {
		amu.Lock()
		if active {
			_ = file.SetReadDeadline(time.Unix(1, 0))
		}
		amu.Unlock()
	})
	defer func() {
		stop()
		amu.Lock()
		active = false
		_ = file.SetReadDeadline(time.Time{})
		amu.Unlock()
	}()
	for {
		err := rc.Read(func(uintptr) bool { return ready() })
		switch {
		case err == nil:
			return nil
		case errors.Is(err, os.ErrDeadlineExceeded):
			if err := ctx.Err(); err != nil {
				return err
			}
			_ = file.SetReadDeadline(time.Time{}) // stale deadline: wait again
		default:
			// rc.Read fails otherwise only once the file is closing.
			return fmt.Errorf("uverbs: completion channel: %v: %w", err, os.ErrClosed)
		}
	}
}

// Kick makes a Wait in progress look at its ready function again, for a
// condition that does not make the descriptor readable (completions the
// caller queued itself). A Kick with no Wait in progress is harmless.
func (ch *CompChannel) Kick() {
	ch.mu.Lock()
	f := ch.file
	ch.mu.Unlock()
	if f != nil {
		_ = f.SetReadDeadline(time.Unix(1, 0))
	}
}

// Close closes the descriptor; Wait returns. It is idempotent. The caller
// guarantees no TryRead runs concurrently.
func (ch *CompChannel) Close() error {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if ch.closed {
		return nil
	}
	ch.closed = true
	if ch.file != nil {
		err := ch.file.Close()
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		return err
	}
	return unix.Close(ch.fd)
}
