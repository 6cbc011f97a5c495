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
// the id has been acknowledged; CONNECT_REQUEST events count against the
// listener.
//
// GetAddrInfo and CreateEP are rdma_getaddrinfo and rdma_create_ep: a
// synchronous id bound (passive) or resolved (active), with its QP.
//
// Where events come from is a Fabric: the software fabric (package
// fabric/soft, iWARP over TCP, no hardware or privileges needed) or the
// kernel's RDMA CM (package fabric/kernel). This package defines the
// interfaces a fabric implements (Fabric, EventSource, Endpoint); fabrics
// register themselves with Register, and ids created without a channel use
// the default fabric (CMRT_FABRIC selects one by name).
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
// on it and the events reported for it (see Apply), and every call and event
// is recorded in a Journal.
//
// # Journal
//
// Every id records into a Journal (DefaultJournal, or the one given with
// WithJournal; ids born from a request use their listener's). A Record is
// made for every CM call on an id, successful or not (create, bind, ...,
// destroy: the Call names), for every event reported for it (when the
// event is handed to the user, by a channel, a reactor or a synchronous
// call), and when a synchronous call is abandoned by its context (cancel).
// Its fields, and their names in the JSON lines WriteJSON, ObserveJSON and
// WriteRecordsJSON write through zerolog (ReadJSON reads them back):
//
//	seq     Seq      uint64  1, 2, ... in the order the records were made
//	time    Time     int64   nanoseconds since the Unix epoch
//	id      ID       uint64  the id's handle (ID.Handle), never reused
//	ch      Channel  uint64  the number of the channel the id reports to
//	                         (ChannelNumber; a synchronous id's private
//	                         channel has one too); only migrate changes it
//	parent  Parent   uint64  the listener's handle, on the CONNECT_REQUEST
//	                         that created the id and on its later calls
//	                         (omitted when 0)
//	kind    Kind             "call", "event" or "cancel"
//	qp      QPType           "RC" or "UD"
//	call    Call             the call, as librdmacm names it without
//	                         "rdma_" ("resolve_addr"); calls only
//	event   Event            rdma_event_str's name; events only
//	type    Event    int32   the event number; events only
//	status  Status   int32   the event's status, or the failed call's errno
//	                         (0: the call succeeded)
//	state   State            the id's state after the record ("ESTABLISHED")
//
// A CONNECT_REQUEST is recorded for the new id (with parent set), on the
// listener's channel; the new id of a synchronous listener is then migrated
// to a private channel of its own, as librdmacm does, and the journal shows
// that migrate. Records of one id are in the order they happened; a record
// is made while the id's lock is held, so nothing is recorded for an id
// after its destroy except calls failing with EINVAL (events the fabric
// reports meanwhile are dropped).
//
// Journal.Select, RecordsOf and RecordsOfChannel give views of the records
// still in the ring, Observe and ObserveFilter see them live. Replay folds
// records into each id's state, ReplayCheck also verifies the State every
// record holds, and CheckJournal checks whole journals against the model
// of legal call and event sequences (CallAllowed, EventAllowed).
package id
