// Package handlers is a typed registry of CM event handlers: a Mux holds
// one handler per event type and a default for the rest, and is itself an
// id.Handler, so a reactor (or any loop over a channel) can dispatch to it.
//
// Registration may happen at any time, also while events are dispatched:
// the table is copied on write and read without a lock. Registering a nil
// handler or an event type out of range is a programming error and panics,
// as net/http's ServeMux does.
package handlers

import (
	"fmt"
	"sync"
	"sync/atomic"

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
	mu sync.Mutex // serializes writers
	t  atomic.Pointer[table]
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

// Handle registers h for events of type t, replacing any handler before.
func (m *Mux) Handle(t id.EventType, h id.Handler) *Mux {
	if t < 0 || t >= fabric.NumEventTypes {
		panic(fmt.Sprintf("handlers: event type %d out of range", t))
	}
	if h == nil {
		panic("handlers: nil handler for " + t.String())
	}
	return m.update(func(tb *table) { tb.byType[t] = h })
}

// HandleFunc registers f for events of type t.
func (m *Mux) HandleFunc(t id.EventType, f func(*id.Event) error) *Mux {
	if f == nil {
		panic("handlers: nil handler for " + t.String())
	}
	return m.Handle(t, Func(f))
}

// Remove unregisters the handler of type t.
func (m *Mux) Remove(t id.EventType) *Mux {
	if t < 0 || t >= fabric.NumEventTypes {
		panic(fmt.Sprintf("handlers: event type %d out of range", t))
	}
	return m.update(func(tb *table) { tb.byType[t] = nil })
}

// Default registers h for every event type without a handler of its own.
func (m *Mux) Default(h id.Handler) *Mux {
	if h == nil {
		panic("handlers: nil default handler")
	}
	return m.update(func(tb *table) { tb.def = h })
}

// DefaultFunc registers f as the default handler.
func (m *Mux) DefaultFunc(f func(*id.Event) error) *Mux { return m.Default(Func(f)) }

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
