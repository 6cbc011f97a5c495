// Package netlink is a small, allocation-conscious NETLINK_ROUTE client used
// by the cmrt software fabric to emulate rdma_cm address and route
// resolution.
//
// It offers three things:
//
//   - Routing-table lookups ([RouteGet], [Conn.RouteGet]), the equivalent of
//     "ip route get": which source address, output interface, gateway and
//     MTU the kernel would use to reach a destination. This is what
//     rdma_resolve_addr and rdma_resolve_route need.
//   - Snapshots of interfaces and their addresses ([Links], [Addrs]); every
//     interface carrying an address becomes a soft RDMA device.
//   - Notifications about link, address and (optionally) route changes
//     ([Subscribe], [Monitor]), used to raise RDMA_CM_EVENT_ADDR_CHANGE and
//     RDMA_CM_EVENT_DEVICE_REMOVAL. A [Monitor] has no goroutine of its own:
//     its descriptor ([Monitor.Fd]) can be polled by the caller's epoll loop
//     and drained with the non-blocking [Monitor.Read].
//
// Everything is built on raw AF_NETLINK sockets from golang.org/x/sys/unix
// and a bounds-checked message encoder/parser; malformed kernel bytes produce
// an error wrapping [ErrMalformed], never a panic.
//
// # Network namespaces
//
// A netlink socket belongs to the network namespace of the thread that
// created it. The package-level functions open a fresh socket per call and
// therefore always act in the calling thread's namespace; a [Conn] or
// [Monitor] keeps the namespace it was created in.
//
// # Errors
//
// Errors reported by the kernel are returned as [*Error] values, which unwrap
// to their [syscall.Errno], so errors.Is(err, syscall.ENETUNREACH) works.
// Package sentinels ([ErrClosed], [ErrMalformed], [ErrOverrun],
// [ErrRejected], [ErrDumpInterrupted]) are wrapped with %w.
package netlink
