// Package share counts the users of an object that several others hold
// (a completion queue that QPs share) and refuses its destruction while
// any uses it, as ibv_destroy_cq refuses a queue QPs still name.
package share

import "sync"

// Count is the users of a shared object and whether it was destroyed.
// The zero value has no users and is not destroyed. It is safe for
// concurrent use.
type Count struct {
	mu        sync.Mutex
	users     int
	destroyed bool
}

// Acquire counts a new user and reports true, or reports false once the
// object is destroyed.
func (c *Count) Acquire() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.destroyed {
		return false
	}
	c.users++
	return true
}

// Release gives back a user that Acquire counted.
func (c *Count) Release() {
	c.mu.Lock()
	c.users--
	c.mu.Unlock()
}

// Destroy marks the object destroyed when no one uses it: it returns 0
// and false then, the number of users (nothing changed) while there are
// any, and again true if the object was destroyed already.
func (c *Count) Destroy() (users int, again bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.destroyed:
		return 0, true
	case c.users > 0:
		return c.users, false
	}
	c.destroyed = true
	return 0, false
}
