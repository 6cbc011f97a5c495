package hooks

import (
	"sync"
	"testing"
)

func TestSetAddStopRun(t *testing.T) {
	var s Set
	var a, b int
	stopA := s.Add(func() { a++ })
	stopB := s.Add(func() { b++ })
	s.Run()
	if a != 1 || b != 1 {
		t.Fatalf("after Run: a=%d b=%d, want 1 1", a, b)
	}
	if !stopA() {
		t.Fatal("stop of a held function reported false")
	}
	if stopA() {
		t.Fatal("a second stop reported true")
	}
	s.Run()
	if a != 1 || b != 2 {
		t.Fatalf("after stop and Run: a=%d b=%d, want 1 2", a, b)
	}
	if got := s.Len(); got != 1 {
		t.Fatalf("Len %d, want 1", got)
	}
	fs := s.Close()
	if len(fs) != 1 {
		t.Fatalf("Close returned %d functions, want 1", len(fs))
	}
	fs[0]()
	if b != 3 {
		t.Fatalf("b=%d after calling what Close returned, want 3", b)
	}
	if stopB() {
		t.Fatal("stop after Close reported true: Close had taken it")
	}
	if len(s.Close()) != 0 {
		t.Fatal("a second Close returned functions")
	}
	stopC := s.Add(func() { t.Fatal("a function added to a closed set ran") })
	if stopC() {
		t.Fatal("stop of a function added to a closed set reported true")
	}
	s.Run()
	if s.Len() != 0 {
		t.Fatal("a closed set holds a function")
	}
}

// TestSetRunWithoutLock: a function may add and stop functions of its
// own set while Run calls it (Run holds no lock then).
func TestSetRunWithoutLock(t *testing.T) {
	var s Set
	var stop func() bool
	stop = s.Add(func() {
		stop()
		s.Add(func() {})
	})
	s.Run()
	if s.Len() != 1 {
		t.Fatalf("Len %d, want 1 (the first removed itself, added another)", s.Len())
	}
}

// TestSetConcurrentClose: Adds racing Close (under -race): after Close
// the set holds nothing, whichever way each Add went.
func TestSetConcurrentClose(t *testing.T) {
	for round := 0; round < 200; round++ {
		var s Set
		var wg sync.WaitGroup
		stops := make([]func() bool, 8)
		for k := range stops {
			wg.Add(1)
			go func() { defer wg.Done(); stops[k] = s.Add(func() {}) }()
		}
		fs := s.Close()
		wg.Wait()
		held := 0
		for _, stop := range stops {
			if stop() {
				held++
			}
		}
		if held != 0 || s.Len() != 0 {
			t.Fatalf("round %d: %d functions still held after Close (Len %d)", round, held, s.Len())
		}
		if len(fs) > len(stops) {
			t.Fatalf("round %d: Close returned %d functions of %d added", round, len(fs), len(stops))
		}
	}
}

func TestSetRunEmptyNoAlloc(t *testing.T) {
	var s Set
	if n := testing.AllocsPerRun(100, s.Run); n != 0 {
		t.Fatalf("Run of an empty set: %v allocations, want 0", n)
	}
}
