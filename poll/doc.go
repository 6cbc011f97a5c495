// Package poll wraps the Linux readiness primitives the runtime is built on:
// an epoll set (Poller), an eventfd counter (EventFD) and a coalescing wakeup
// (Waker) built from the two.
//
// Everything here is a thin, allocation-free layer over golang.org/x/sys/unix:
// descriptors are opened close-on-exec and non-blocking, EINTR is retried,
// and every errno is returned wrapped in an *os.SyscallError so that
// errors.Is(err, syscall.EAGAIN) and friends keep working.
//
// A Poller is owned by one goroutine (the loop that calls Wait); Add, Modify
// and Delete may be called from any goroutine, as epoll_ctl(2) allows, but the
// runtime's loops only call them from their owner goroutine so that the fd
// table and the epoll set never disagree.
package poll
