// Package id is the RDMA communication identifier: the Go counterpart of
// librdmacm's struct rdma_cm_id and the calls around rdma_create_id(3).
//
// An ID is created on an event channel (asynchronous: every operation that
// completes later reports an Event on the channel) or on no channel
// (synchronous: a private per-id channel is created, and calls that produce
// an event block until it arrives; the event then stays readable through
// ID.Event until the next CM call on that id).
//
// Semantics follow librdmacm and the kernel's rdma_cm: event numbers and
// names, port spaces, connection parameters, private-data limits and the
// errno values (every error satisfies errors.Is(err, syscall.EXXX) with the
// errno librdmacm would set). Destroy waits until every event reported for
// the id has been acknowledged; CONNECT_REQUEST events count against the
// listener.
//
// Where events come from is a Fabric: the software fabric (package
// fabric/soft, iWARP over TCP, no hardware or privileges needed) or the
// kernel's RDMA CM (package fabric/kernel). This package defines the
// interfaces a fabric implements (Fabric, EventSource, Endpoint); fabrics
// register themselves with Register, and ids created without a channel use
// the default fabric (CMRT_FABRIC selects one by name).
//
// The runtime is event-sourced: an id's State is the fold of the calls made
// on it and the events reported for it (see Apply), and every call and event
// is recorded in a Journal.
package id
