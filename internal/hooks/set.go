// Package hooks holds the functions a channel, a queue or an event source
// calls on one event of its life (its close, a migrate): added and removed
// from any goroutine, called without the set's lock, so that a function
// may add or remove functions, or read its owner.
package hooks

import "sync"

// Set is a set of functions. The zero Set is empty and open.
type Set struct {
	mu     sync.Mutex
	closed bool
	next   uint64
	fs     map[uint64]func()
}

// Add adds f. The returned stop removes it and reports whether it was
// still in the set (not yet taken by Close, nor stopped). On a closed set
// Add keeps nothing, and stop reports false.
func (s *Set) Add(f func()) (stop func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return func() bool { return false }
	}
	if s.fs == nil {
		s.fs = make(map[uint64]func())
	}
	s.next++
	key := s.next
	s.fs[key] = f
	return func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		_, ok := s.fs[key]
		delete(s.fs, key)
		return ok
	}
}

// Run calls the functions in the set, each once, in no particular order,
// without the set's lock. A function added while Run runs may or may not
// be called by it. Run on an empty set allocates nothing.
func (s *Set) Run() {
	s.mu.Lock()
	if len(s.fs) == 0 {
		s.mu.Unlock()
		return
	}
	fs := make([]func(), 0, len(s.fs))
	for _, f := range s.fs {
		fs = append(fs, f)
	}
	s.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Close closes the set to Add and empties it. It returns the functions it
// held, for an owner that calls them once on its close; a second Close
// returns none.
func (s *Set) Close() []func() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	fs := make([]func(), 0, len(s.fs))
	for _, f := range s.fs {
		fs = append(fs, f)
	}
	s.fs = nil
	return fs
}

// Len reports how many functions the set holds.
func (s *Set) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.fs)
}
