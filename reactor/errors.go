package reactor

import (
	"errors"
	"fmt"
	"reflect"

	"github.com/cmrt/cmrt/id"
)

// Errors of the reactor.
var (
	// ErrClosed is returned by calls on a closed reactor.
	ErrClosed = errors.New("reactor: closed")
	// ErrOverload is reported through Options.OnError (unless
	// Options.OnOverload is set) when MaxPending events are waiting for
	// handlers; reading pauses until half are done. It is a notice, not a
	// failure: no event is lost and the reactor resumes by itself.
	ErrOverload = errors.New("reactor: overload: handlers are behind, reading paused")
	// ErrRegistered is returned when a channel is registered twice.
	ErrRegistered = errors.New("reactor: channel already registered")
	// ErrNotRegistered is returned by Unregister for an unknown channel
	// (and by UnregisterCQ for an unknown queue) that is still open.
	ErrNotRegistered = errors.New("reactor: channel not registered")
)

// HandlerError is a non-nil error a handler returned.
type HandlerError struct {
	// ID is the handle of the event's id.
	ID uint64
	// Type is the event's type.
	Type id.EventType
	// Err is what the handler returned.
	Err error
}

// Error implements error.
func (e *HandlerError) Error() string {
	return fmt.Sprintf("reactor: handler of %s for id %d: %v", e.Type, e.ID, e.Err)
}

// Unwrap returns the handler's error.
func (e *HandlerError) Unwrap() error { return e.Err }

// PanicError is a panic recovered from a handler; the event was
// acknowledged and the reactor goes on. ID and Type are zero for a
// completion handler's panic.
type PanicError struct {
	ID    uint64
	Type  id.EventType
	Value any
}

// Error implements error.
func (e *PanicError) Error() string {
	return fmt.Sprintf("reactor: handler of %s for id %d panicked: %v", e.Type, e.ID, e.Value)
}

// CompletionError is a non-nil error a completion handler returned.
type CompletionError struct {
	// WC is the completion.
	WC id.WC
	// Err is what the handler returned.
	Err error
}

// Error implements error.
func (e *CompletionError) Error() string {
	return fmt.Sprintf("reactor: completion handler of wr %d (%s): %v", e.WC.WRID, e.WC.Status, e.Err)
}

// Unwrap returns the handler's error.
func (e *CompletionError) Unwrap() error { return e.Err }

// isNil reports whether h is nil or holds a nil func or pointer, which
// would panic when called.
func isNil(h any) bool {
	if h == nil {
		return true
	}
	switch v := reflect.ValueOf(h); v.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}
