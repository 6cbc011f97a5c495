package goid

import "testing"

func TestIDDistinguishesGoroutines(t *testing.T) {
	me := ID()
	if me == 0 || ID() != me {
		t.Fatalf("ID() = %d, not stable", me)
	}
	other := make(chan uint64)
	go func() { other <- ID() }()
	if o := <-other; o == 0 || o == me {
		t.Fatalf("another goroutine has id %d, this one %d", o, me)
	}
}
