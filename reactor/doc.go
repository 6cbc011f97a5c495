// Package reactor multiplexes CM event channels, and the completion queues
// of the data path, on one epoll loop and dispatches their events and work
// completions to handlers, inline on the loop or on a private ants worker
// pool.
//
// Each registered channel has a handler (an id.Handler, typically a
// handlers.Mux). When a channel's descriptor is readable the loop takes up
// to Options.Batch events from it and dispatches each: inline, the handler
// runs on the loop goroutine; with workers, events are appended to a
// mailbox per id and a worker drains the mailbox, so the events of one id
// are always handled one at a time and in the order they happened, while
// different ids run in parallel. The reactor acknowledges each event after
// its handler returns (also when it panics), so Destroy of an id waits
// exactly for its handlers. Completion queues (RegisterCQ) work the same
// way: each queue's completions are handled one at a time, in order.
//
// The reactor never drops an event. When Options.MaxPending events are
// taken but not yet handled, it stops reading channels (events wait in the
// channels, where they belong) and reports ErrOverload once per episode
// through Options.OnError; it resumes at half that. Close(ctx) is idempotent:
// it stops reading, waits for the events already taken to be handled and
// for running handlers to return, then releases the pool.
package reactor
