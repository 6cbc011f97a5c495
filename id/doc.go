// Package id is the RDMA communication identifier: the Go counterpart of
// librdmacm's struct rdma_cm_id and the calls around rdma_create_id(3).
//
// An ID is created on an event channel (asynchronous: every operation that
// completes later reports an Event on the channel) or on no channel
// (synchronous: a private per-id channel is created, and calls that produce
// an event block until it arrives; the event then stays readable through
// ID.Event, and keeps its content after the next CM call on that id, which
// acknowledges it). A synchronous call whose event has a non-zero status
// fails with the errno librdmacm sets (Event.Err gives the same error and
// names the status): REJECTED gives ECONNREFUSED, a negative status its
// errno, and a rejected UD connect, UNREACHABLE with status 2
// (IB_SIDR_REJECT), gives errno 2, ENOENT ("no such file or directory").
//
// Semantics follow librdmacm and the kernel's rdma_cm: event numbers and
// names, port spaces, connection parameters, private-data limits and the
// errno values (every error satisfies errors.Is(err, syscall.EXXX) with the
// errno librdmacm would set). Destroy waits until every event reported for
// the id has been acknowledged (CONNECT_REQUEST events count against the
// listener), except while a handler of one of them runs: then the id is
// finalized, and ID.Done closed, when the last is acknowledged.
//
// GetAddrInfo and CreateEP are rdma_getaddrinfo and rdma_create_ep: a
// synchronous id bound (passive) or resolved (active), with its QP.
//
// Where events come from is a fabric: the software fabric (package
// fabric/soft, iWARP over TCP, no hardware or privileges needed) or the
// kernel's RDMA CM (package fabric/kernel). Package fabric holds the
// contract a fabric implements (fabric.Fabric, EventSource, Endpoint and
// the verbs interfaces) and the registry; ids created without a channel
// use the default fabric (CMRT_FABRIC selects one by name).
//
// The names a program types (port spaces, event types, ConnParam, the
// states, the verbs types MR, QP, CQ, WC and their flags) are declared in
// package fabric or id/journal and re-declared here, so that a program
// needs no other import than id.
//
// # UD
//
// UD ids (PSUDP, PSIPoIB, and PSIB with QP type UD) have no connection:
// Connect sends a service ID resolution request (SIDR REQ) and Accept or
// Reject answers it; the passive side gets no event after its answer. The
// active side gets ESTABLISHED with the peer's QP number, Q_Key and address
// handle (Event.UD), or UNREACHABLE, as the kernel's rdma_cm reports it:
// status 2 (IB_SIDR_REJECT) after the listener's Reject, status 1
// (IB_SIDR_UNSUPPORTED) when nothing listens for the port space on that
// port, -ETIMEDOUT when no answer comes within the fabric's retry budget;
// or ADDR_ERROR -EINVAL when the peer's Q_Key is not RDMA_UDP_QKEY. On the
// software fabric the retry budget is 7.75 s by default
// (fabric/soft.WithSIDRRetry), and a destination host with no socket on the
// port answers at once (ICMP port unreachable, status 1); on the kernel
// fabric the IB CM's SIDR timeout applies.
//
// The runtime is event-sourced: an id's State is the fold of the calls made
// on it and the events reported for it, and every call and event is
// recorded in a journal (package id/journal: the records, the pure state
// model, replay and the model check). Ids record into journal.Default
// unless given another with WithJournal; ids born from a request use their
// listener's.
package id
