// Package kernel is the kernel fabric: cmrt's id API over the Linux RDMA
// communication manager, /dev/infiniband/rdma_cm (drivers/infiniband/core/
// ucma.c), in pure Go. It works with any RDMA device the kernel drives:
// mlx5, rxe (soft-RoCE), siw (soft-iWARP), ...
//
// The fabric registers itself as "kernel" when the package is imported
// (package id imports it, through internal/fabrics). Select it with
// CMRT_FABRIC=kernel, with channel.WithFabric(kernel.Default()) or, for
// synchronous ids, id.WithFabric(kernel.Default()). Without the device
// file every channel fails with ENODEV and a message saying which modules
// to load.
//
// Each event channel is one open of the device; its descriptor is the
// rdma_cm fd itself, so a reactor polls it like any other channel. The fd
// is non-blocking: GET_EVENT answers EAGAIN on an empty queue, and a
// blocking GetEvent waits for readability in the Go netpoller, cancellable
// through its context. Commands are single write(2)s with responses in
// mmap'd memory the garbage collector never moves; each fd's commands are
// serialized.
//
// Migrate is MIGRATE_ID: the kernel moves the id and its queued events,
// but a queued connection request's own kernel id stays on the file the
// listener left (ucma made it there), where closing that file would
// destroy it and reject the request. So the fabric keeps the fds a
// listener left open until the listener is destroyed (their Close
// destroys the ids they hold, as closing would) and moves each request's
// id to the fd the request is read on. The kernel wakes no reader for
// moved events (ucma wakes the file's pollers when it queues an event, not
// when MIGRATE_ID moves some), so Migrate does: it wakes a GetEvent waiting
// on the new channel, and the source is a fabric.MigrateNotifier, whose
// hook a reactor serving the channel installs at Register: Migrate calls
// it, and the reactor reads the channel on its loop (a batch at a time,
// until a read comes short), as if epoll had reported the fd. An
// application polling the fd itself is not told: it reads after Migrate,
// as librdmacm's do after rdma_migrate_id.
//
// The data path is pure-Go verbs over /dev/infiniband/uverbsN (package
// internal/uverbs: the write(2) command ABI) with cmrt's own user-space
// providers for rxe and siw (internal/provider/rxe, internal/provider/siw:
// the queues those drivers map into the process; posting and polling make
// no system call but the drivers' doorbell). CreateQP gives an id a QP
// with its own protection domain and two completion queues, each with a
// completion channel, or the shared queues the caller made with CreateCQ
// on the same device (ibv_create_cq; a UD QP's receive queue stays its
// own: EOPNOTSUPP), and moves it as librdmacm moves rdma_create_qp's QPs
// (see verbs_qp.go): an active RC id's CONNECT_RESPONSE is handled by the
// fabric and reported as ESTABLISHED. Work requests posted after the
// connection ends (once its DISCONNECTED, REJECTED, UNREACHABLE or
// CONNECT_ERROR is read, after a local Disconnect, or on a fatal async
// event) complete at once with WCWRFlushErr; a CONNECT_RESPONSE whose QP
// transitions fail becomes CONNECT_ERROR with the failing call's -errno
// (librdmacm reports -1). CQ descriptors are readable while completions
// are queued, for a reactor. A UD QP is attached to each group its id
// joins as a full member once the MULTICAST_JOIN is read (an attach that
// fails turns the event into MULTICAST_ERROR). Devices of other drivers (mlx5, irdma, efa,
// ...) give EOPNOTSUPP naming the provider they would need; PROVIDERS.md
// says what one implements.
//
// Applications that drive their own QPs (outside cmrt) pass their QP
// numbers in ConnParam.QPNum and use Endpoint.InitQPAttr for the
// attributes of each transition, as rdma_init_qp_attr; the flows of such
// QP-less ids are those of librdmacm without rdma_create_qp:
//
//   - RC, active: CONNECT_RESPONSE after Connect; call Establish (the
//     kernel sends the RTU). The passive side gets ESTABLISHED when the
//     RTU arrives.
//   - RC, passive: CONNECT_REQUEST on the listener's channel with a new id;
//     Accept (valid=1, which also sets the uid events are reported with);
//     ESTABLISHED follows.
//   - REJECTED carries the IB reject reason (28 after Reject, 8 when nobody
//     listens); UNREACHABLE −ETIMEDOUT; DISCONNECTED on both sides.
//   - UD: Connect sends a SIDR REQ and gets ESTABLISHED with the peer's
//     QP number and Q_Key; Accept sends the SIDR REP and returns, with no
//     event on the passive side; Reject gives UNREACHABLE with status 2,
//     the SIDR status IB_SIDR_REJECT (not 1, which is IB_SIDR_UNSUPPORTED).
//   - Multicast: Join gives MULTICAST_JOIN with the group's UD parameters
//     (QP number 0xFFFFFF, Q_Key, address handle).
//
// QP numbers must be real, or at least unique per pair of nodes: the IB CM
// rejects a connection whose remote QP number it already has a connection
// with (REJ reason 10, stale connection). On iWARP devices (siw, cxgb4,
// irdma) the kernel's iw_cm looks the QP up by number, so Connect and
// Accept of a QP-less id fail with EINVAL (the request is then refused by
// the kernel, which the peer sees as REJECTED -ECONNRESET); listening,
// address and route resolution work.
//
// Read depths of 0xFF (the device maximum) are resolved against the
// device's caps; sysfs does not publish them, so they come from a table of
// known drivers (rxe and siw 128, mlx4/mlx5 16) and are 1 for unknown
// drivers; Devices reports them in fabric.Device's MaxQPRdAtom and
// MaxQPInitRdAtom.
package kernel
