// Package handlers is a typed registry of CM event handlers: a Mux holds
// one handler per event type and a default for the rest, and is itself an
// id.Handler, so a reactor (or any loop over a channel) can dispatch to it.
//
// Registration may happen at any time, also while events are dispatched:
// the table is copied on write and read without a lock. Registering a nil
// handler, or for an event type out of range, is refused as every cmrt
// call refuses a bad argument, with EINVAL: the registration is not made
// and Err reports it. The registration methods return the Mux so that they
// chain, so the error waits in the Mux: reactor.Register refuses a Mux
// whose Err is not nil, and a program that dispatches by itself checks
// Err once its handlers are registered.
package handlers

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id"
)

// Func adapts an ordinary function to id.Handler.
type Func func(ev *id.Event) error

// HandleEvent calls f(ev).
func (f Func) HandleEvent(ev *id.Event) error { return f(ev) }

// table is an immutable snapshot of a Mux's handlers.
type table struct {
	byType [fabric.NumEventTypes]id.Handler
	def    id.Handler
}

// Mux dispatches each event to the handler registered for its type, or to
// the default handler; an event with neither is acknowledged and ignored.
// The zero value is ready to use.
type Mux struct {
	mu  sync.Mutex // serializes writers
	t   atomic.Pointer[table]
	err error // the first refused registration, under mu
}

// New returns an empty Mux.
func New() *Mux { return new(Mux) }

func (m *Mux) update(fn func(*table)) *Mux {
	m.mu.Lock()
	defer m.mu.Unlock()
	var next table
	if cur := m.t.Load(); cur != nil {
		next = *cur
	}
	fn(&next)
	m.t.Store(&next)
	return m
}

// refuse records a refused registration (Err keeps the first) and leaves
// the table as it is.
func (m *Mux) refuse(format string, args ...any) *Mux {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = fmt.Errorf("handlers: "+format+": %w", append(args, syscall.EINVAL)...)
	}
	return m
}

// Err returns the first registration the Mux refused (a nil handler, an
// event type out of range), wrapping EINVAL, or nil.
func (m *Mux) Err() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// isNil reports whether h is nil or holds a nil func or pointer, which
// would panic when called.
func isNil(h id.Handler) bool {
	if h == nil {
		return true
	}
	switch v := reflect.ValueOf(h); v.Kind() {
	case reflect.Func, reflect.Pointer, reflect.Map, reflect.Chan, reflect.Slice, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// Handle registers h for events of type t, replacing any handler before.
// A nil h, or a type out of range, is refused (see Err).
func (m *Mux) Handle(t id.EventType, h id.Handler) *Mux {
	if t < 0 || t >= fabric.NumEventTypes {
		return m.refuse("event type %d out of range", int32(t))
	}
	if isNil(h) {
		return m.refuse("nil handler for %s", t)
	}
	return m.update(func(tb *table) { tb.byType[t] = h })
}

// HandleFunc registers f for events of type t. A nil f is refused (see
// Err).
func (m *Mux) HandleFunc(t id.EventType, f func(*id.Event) error) *Mux {
	if f == nil {
		return m.refuse("nil handler for %s", t)
	}
	return m.Handle(t, Func(f))
}

// Remove unregisters the handler of type t. A type out of range is
// refused (see Err).
func (m *Mux) Remove(t id.EventType) *Mux {
	if t < 0 || t >= fabric.NumEventTypes {
		return m.refuse("event type %d out of range", int32(t))
	}
	return m.update(func(tb *table) { tb.byType[t] = nil })
}

// Default registers h for every event type without a handler of its own.
// A nil h is refused (see Err).
func (m *Mux) Default(h id.Handler) *Mux {
	if isNil(h) {
		return m.refuse("nil default handler")
	}
	return m.update(func(tb *table) { tb.def = h })
}

// DefaultFunc registers f as the default handler. A nil f is refused (see
// Err).
func (m *Mux) DefaultFunc(f func(*id.Event) error) *Mux {
	if f == nil {
		return m.refuse("nil default handler")
	}
	return m.Default(Func(f))
}

// Lookup returns the handler that events of type t go to, or nil.
func (m *Mux) Lookup(t id.EventType) id.Handler {
	tb := m.t.Load()
	if tb == nil {
		return nil
	}
	if t >= 0 && t < fabric.NumEventTypes && tb.byType[t] != nil {
		return tb.byType[t]
	}
	return tb.def
}

// HandleEvent implements id.Handler.
func (m *Mux) HandleEvent(ev *id.Event) error {
	if h := m.Lookup(ev.Type); h != nil {
		return h.HandleEvent(ev)
	}
	return nil
}
