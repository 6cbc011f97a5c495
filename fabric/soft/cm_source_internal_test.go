package soft

import (
	"context"
	"runtime"
	"testing"

	"github.com/cmrt/cmrt/fabric"
)

// TestSourceQueueStartsSmall: a source (the private channel of every
// synchronous id) starts with room for one event, about 400 bytes, where
// it allocated eight (3 KiB) it never used; more events than that wait in
// order, the FIFO grown to hold them.
func TestSourceQueueStartsSmall(t *testing.T) {
	f := New(WithName("source-queue"))
	defer f.Quiesce()
	const n = 200
	srcs := make([]fabric.EventSource, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for k := range srcs {
		s, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		srcs[k] = s
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 1024 {
		t.Errorf("%d bytes allocated per source, want at most 1024", per)
	}
	for _, s := range srcs {
		_ = s.Close()
	}

	s, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	q := &s.(*source).q
	for k := range 9 {
		if err := q.Push(&fabric.RawEvent{UID: uint64(k + 1), Type: fabric.EventEstablished}); err != nil {
			t.Fatal(err)
		}
	}
	var ev fabric.RawEvent
	for k := range 9 {
		if err := s.Next(context.Background(), false, &ev); err != nil || ev.UID != uint64(k+1) {
			t.Fatalf("event %d: uid %d, %v", k, ev.UID, err)
		}
	}
	if err := s.Next(context.Background(), false, &ev); err == nil {
		t.Fatalf("a tenth event: uid %d", ev.UID)
	}
}

// TestSourceQueueMoves: a source's FIFO pops with evq.Move, copying the
// event and clearing only the pointers its slot holds, like every queue of
// raw events (finding 31); made with ring.NewQueue it copied and zeroed all
// 376 bytes of the slot per event, on every channel of the fabric.
func TestSourceQueueMoves(t *testing.T) {
	f := New(WithName("source-moves"))
	defer f.Quiesce()
	s, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !s.(*source).q.Moves() {
		t.Error("the source's FIFO copies and zeroes each slot: want evq.Move")
	}
}

// TestSourceOpenAllocs: opening a source (every synchronous id opens its
// private one) makes the source with its FIFO in it, the FIFO's ring and
// its wake-up channel: three allocations, where a FIFO of its own made
// four.
func TestSourceOpenAllocs(t *testing.T) {
	f := New(WithName("source-allocs"))
	defer f.Quiesce()
	got := testing.AllocsPerRun(200, func() {
		s, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
	})
	if got > 3 {
		t.Errorf("Open and Close of a source: %v allocations, want at most 3", got)
	}
}
