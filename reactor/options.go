package reactor

import (
	"github.com/rs/zerolog"
)

// Options configure a Reactor. Build them with the With* functions; New
// applies them over fresh defaults.
//
// # A high-concurrency server
//
// A reactor is one loop goroutine; the settings decide what runs on it.
//
//   - Workers: 0 (inline, the default) is the cheapest per event (no
//     hand-off, no lock) and suits handlers that never block: they answer a
//     connection request, post work, record state and return. Handlers that
//     block or work for long (create QPs and register memory per
//     connection, call out to storage or other servers) need workers, about
//     runtime.GOMAXPROCS(0) of them, more only if they wait on I/O: an
//     inline handler that blocks stops every channel of the reactor.
//     Workers run at once whenever events wait, so workers whose handlers
//     are all quick cost each other the lines they share between CPUs
//     (the journal, the run queue): on two CPUs four such workers
//     dispatch 1.65x slower than one (BENCHMARKS.md, finding 40). Events
//     of one id are handled one at a time and in order either way; workers
//     start when events arrive and exit when none wait, so a large value
//     costs nothing while idle. A worker whose handlers have been quick
//     takes the events of several ids at once (up to 16), leaving at
//     least one waiting id per worker to the others: a handler that then
//     blocks holds those events back until it returns, and its worker
//     goes back to one id at a time.
//   - MaxPending bounds the events taken from channels and not handled yet,
//     that is the memory a burst can hold in the reactor. Give it at least
//     the burst of connection requests you expect (a listen backlog's
//     worth, times the listeners); past it reading pauses until half are
//     handled, and events wait in their channels: nothing is lost, but
//     frequent pauses (OnOverload, Stats.Overloads) mean the handlers are
//     too slow for the load, and more Workers, or more reactors, are the
//     answer, not a larger bound.
//   - Batch is how many events one channel gives per readiness report
//     when the loop has other registrations (or tasks) to turn to; a
//     channel alone on its reactor is read batch after batch without a
//     wait. Lower it only to share the loop more fairly among many busy
//     channels.
//   - OnOverload (or OnError, for ErrOverload) should count and alert, not
//     log per event; Logger receives anomalies only.
//
// Past what one loop goroutine reads (a few million events a second
// inline, less with workers), run several reactors, each with its own
// channels, and spread the ids over them (id.ID.Migrate moves an accepted
// id to another channel).
type Options struct {
	// Workers is the most goroutines that run handlers at once; 0 runs
	// handlers inline on the loop goroutine. Default 0. Workers are
	// started when events wait and exit when none do.
	Workers int
	// MaxPending bounds the events taken from channels and not yet handled;
	// past it the reactor stops reading until half are handled. Default 4096.
	MaxPending int
	// Batch is how many events the loop takes from one channel per
	// readiness report, for fairness between channels; a channel alone
	// on the reactor (no other registration, no task queued) is read
	// batch after batch without a wait. Default 64.
	Batch int
	// Logger receives anomalies (panics, overload, epoll errors), never a
	// line per event; entries carry component=reactor. Default
	// zerolog.Nop().
	Logger zerolog.Logger
	// OnError, if set, is called (from the goroutine that saw it) with
	// what went wrong in a handler: an error a handler returned
	// (*HandlerError, *CompletionError) or a panic recovered from one
	// (*PanicError). Neither stops the reactor, which goes on with the next
	// event: they are the handlers' failures, not the reactor's. Unless
	// OnOverload is set, OnError also receives ErrOverload, which is no
	// handler's failure but a notice that reading paused (the reactor
	// resumes by itself); tell it apart with errors.Is(err, ErrOverload).
	// It must not block.
	OnError func(error)
	// OnOverload, if set, is called (on the loop goroutine) instead of
	// OnError(ErrOverload) each time reading pauses because MaxPending
	// events wait for handlers. It must not block.
	OnOverload func()
}

// Option sets an option.
type Option func(*Options)

func defaults() Options {
	return Options{MaxPending: 4096, Batch: 64, Logger: zerolog.Nop()}
}

// WithWorkers runs handlers on up to n worker goroutines (0: inline on the
// loop). See Options for how to choose n.
func WithWorkers(n int) Option { return func(o *Options) { o.Workers = max(n, 0) } }

// WithMaxPending sets Options.MaxPending.
func WithMaxPending(n int) Option { return func(o *Options) { o.MaxPending = n } }

// WithBatch sets Options.Batch.
func WithBatch(n int) Option { return func(o *Options) { o.Batch = n } }

// WithLogger sets Options.Logger.
func WithLogger(l zerolog.Logger) Option { return func(o *Options) { o.Logger = l } }

// WithErrorHandler sets Options.OnError.
func WithErrorHandler(f func(error)) Option { return func(o *Options) { o.OnError = f } }

// WithOverloadHandler sets Options.OnOverload: overload notices go to f
// instead of OnError, which then receives handler failures only.
func WithOverloadHandler(f func()) Option { return func(o *Options) { o.OnOverload = f } }

// WithOptions replaces all options at once.
func WithOptions(opts Options) Option { return func(o *Options) { *o = opts } }
