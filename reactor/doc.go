// Package reactor multiplexes CM event channels, and the completion queues
// of the data path, on one epoll loop and dispatches their events and work
// completions to handlers, inline on the loop or on up to Options.Workers
// worker goroutines. The loop (internal/evloop, which the software fabric runs on too)
// waits in the Go netpoller: an idle reactor holds a parked goroutine, not
// a thread blocked in epoll_wait.
//
// Each registered channel has a handler (an id.Handler, typically a
// handlers.Mux). When a channel's descriptor is readable the loop takes up
// to Options.Batch events from it (and, while the channel is the loop's
// only registration and no task waits, batch after batch without a wait)
// and dispatches each: inline, the handler
// runs on the loop goroutine; with workers, the batch is appended to a
// mailbox per id (under one lock per batch, not per event) and a worker
// drains the mailbox, so the events of one id are always handled one at a
// time and in the order they happened, while different ids run in
// parallel. With workers the loop only claims each event (id.TakeClaim:
// it counts the event against its id, so that Destroy and Migrate wait for
// it) and the worker delivers it before its handler (advances the id's
// state, journals it and fills the Event: id.DeliverClaimed), so that the
// event's memory and the id's lock stay on the worker's CPU; an event whose
// id is destroyed in between is dropped unhandled. A CONNECT_REQUEST is
// delivered by the loop, which makes its new id. The journal's clock is
// read once per batch: the records of a batch's events share that time (or
// a later record's). Workers are started when a mailbox becomes runnable and exit
// when none is: an idle reactor holds only its parked loop goroutine. The
// package does not use, nor touch, ants' process-wide default pool. The reactor acknowledges each event after
// its handler returns (also when it panics). Completion queues
// (RegisterCQ) work the same way: each queue's completions are handled one
// at a time, in order.
//
// While a handler of one of an id's events runs, Destroy, Migrate and
// LeaveMulticast of that id return without waiting for the events being
// handled nor for those queued behind them in the id's mailbox, whoever
// calls them: a handler may destroy its own id, inline or on a worker, and
// the events still queued for the destroyed id are acknowledged without
// their handlers. The id is finalized when the last is acknowledged; a
// goroutine that must know that no handler of the id still runs (before
// it frees what they use) waits on id.ID.Done, which a handler must not
// do. With no handler of the id running, Destroy waits for the id's events
// the reactor has taken, as librdmacm's rdma_destroy_id does.
//
// The *id.Event a handler gets (like the *id.WC a completion handler gets)
// is the reactor's and is reused for a later event once the handler
// returns, so dispatch allocates nothing: it is valid only while the
// handler runs. Keep what you need from it (ID, Type, Status, the
// PrivateData slice, which is the event's own), not the pointer. Ack in a
// handler is optional; outside it, it fails with EINVAL. A CONNECT_REQUEST
// handler that panics or returns an error without answering the request
// gets it rejected and its new id destroyed (see id.Event.Handle).
//
// The reactor owns what it polls: it registers a duplicate of each channel's
// or queue's descriptor, which it closes itself, so a descriptor number
// reused after a close can never be confused with a registered one. A
// channel.Channel that is closed, and a completion queue that is destroyed
// (DestroyQP, or Destroy of its id), lose their registration by themselves;
// Unregister and UnregisterCQ of them return nil.
//
// The reactor never drops an event. When Options.MaxPending events are
// taken but not yet handled, it stops reading channels (events wait in the
// channels, where they belong) and reports ErrOverload once per episode
// through Options.OnError (or Options.OnOverload); it resumes at half that.
// OnError otherwise receives only the handlers' failures (returned errors
// and recovered panics), which never stop the reactor. Close(ctx) is
// idempotent: it stops reading, waits for the events already taken to be
// handled and for running handlers to return, and for the workers to exit; at
// ctx's deadline it returns ctx's error, and what is left is released when
// the blocked handler returns.
package reactor
