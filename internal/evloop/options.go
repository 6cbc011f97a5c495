package evloop

import "github.com/rs/zerolog"

type options struct {
	name       string
	log        zerolog.Logger
	maxEvents  int
	taskBudget int
	onExit     func()
}

// Option configures a Loop.
type Option func(*options)

// WithName names the loop in its log lines (the "loop" field). Default
// "loop".
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithLogger sets the logger for the loop's anomalies (a failing
// epoll_wait, a failed wakeup), never a line per event. Default
// zerolog.Nop().
func WithLogger(l zerolog.Logger) Option { return func(o *options) { o.log = l } }

// WithMaxEvents bounds the readiness reports taken per epoll_wait. Default
// 128.
func WithMaxEvents(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.maxEvents = n
		}
	}
}

// WithTaskBudget bounds the tasks run per wakeup (checked between batches
// of queued tasks), so that tasks that keep queueing more cannot starve
// the descriptors. Default 1024.
func WithTaskBudget(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.taskBudget = n
		}
	}
}

// WithOnExit sets a function the loop goroutine calls as it exits, after
// the last task and before the loop's descriptors close: the owner
// releases there what the loop's handlers held.
func WithOnExit(f func()) Option { return func(o *options) { o.onExit = f } }
