package reactor

import (
	"github.com/rs/zerolog"
)

// Options configure a Reactor. Build them with the With* functions; New
// applies them over fresh defaults.
type Options struct {
	// Workers is the size of the worker pool; 0 runs handlers inline on
	// the loop goroutine. Default 0.
	Workers int
	// MaxPending bounds the events taken from channels and not yet handled;
	// past it the reactor stops reading until half are handled. Default 4096.
	MaxPending int
	// Batch is how many events the loop takes from one channel per
	// readiness report, for fairness between channels. Default 64.
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

// WithWorkers runs handlers on a pool of n workers (0: inline on the loop).
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
