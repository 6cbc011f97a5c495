package share

import (
	"sync"
	"testing"
)

// TestCount: Destroy is refused while a user holds the object, works once
// every user released it, is reported as a repeat after, and Acquire
// fails from then on; concurrent users balance.
func TestCount(t *testing.T) {
	var c Count
	if !c.Acquire() || !c.Acquire() {
		t.Fatal("Acquire on a live object failed")
	}
	if n, again := c.Destroy(); n != 2 || again {
		t.Fatalf("Destroy with two users: %d, %v", n, again)
	}
	c.Release()
	if n, again := c.Destroy(); n != 1 || again {
		t.Fatalf("Destroy with one user: %d, %v", n, again)
	}
	c.Release()
	if n, again := c.Destroy(); n != 0 || again {
		t.Fatalf("Destroy with no user: %d, %v", n, again)
	}
	if n, again := c.Destroy(); n != 0 || !again {
		t.Fatalf("second Destroy: %d, %v", n, again)
	}
	if c.Acquire() {
		t.Fatal("Acquire after Destroy succeeded")
	}

	var d Count
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if d.Acquire() {
					d.Release()
				}
			}
		}()
	}
	wg.Wait()
	if n, again := d.Destroy(); n != 0 || again {
		t.Fatalf("after balanced users: Destroy %d, %v", n, again)
	}
}
