// Package journal is cmrt's record of CM calls and events, and the pure
// model of an id's states that the records are checked against: the
// rdma_cm(7) state diagram as functions (CallAllowed, EventAllowed,
// AfterEvent, Apply), a ring of records (Journal) with observers and JSON
// lines, Replay and ReplayCheck to fold records into each id's State, and
// Check to find every record that breaks the model.
//
// It imports only package fabric (for the event and QP types): package id
// writes the records, tools (cmd/cmrt, fuzzers) read and check them.
//
// # Records
//
// Every id records into a Journal (Default, or the one given with
// id.WithJournal; ids born from a request use their listener's). A Record
// is made for every CM call on an id, successful or not (create, bind,
// ..., destroy: the Call names), for every event reported for it (when the
// event is handed to the user, by a channel, a reactor or a synchronous
// call), and when a synchronous call is abandoned by its context (cancel).
// Its fields, and their names in the JSON lines WriteJSON, ObserveJSON and
// WriteRecordsJSON write through zerolog (ReadJSON reads them back):
//
//	seq     Seq      uint64  1, 2, ... in the order the records were made
//	time    Time     int64   nanoseconds since the Unix epoch (the wall
//	                         clock at the journal's creation plus the
//	                         monotonic time since: never backwards)
//	id      ID       uint64  the id's handle (id.ID.Handle), never reused
//	ch      Channel  uint64  the number of the channel the id reports to
//	                         (id.ChannelNumber; a synchronous id's private
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
// record holds, and Check checks whole journals against the model
// of legal call and event sequences (CallAllowed, EventAllowed).
package journal
