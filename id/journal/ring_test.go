package journal

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestAddConcurrentWithReaders: writers add records while readers select
// them, on rings small enough to wrap many times. Every record a reader
// gets is whole (its fields written by one Add) and records come out in
// strictly increasing Seq without a gap; once the writers are done the
// ring holds exactly the newest records.
func TestAddConcurrentWithReaders(t *testing.T) {
	for _, capacity := range []int{1, 7, 64} {
		j := New(capacity)
		const writers, per = 4, 3000
		var wg sync.WaitGroup
		var stop atomic.Bool
		for g := 1; g <= writers; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 1; k <= per; k++ {
					j.Add(Record{ID: uint64(g), Parent: uint64(k), Channel: uint64(g*1_000_000 + k)})
				}
			}()
		}
		var rwg sync.WaitGroup
		for r := 0; r < 2; r++ {
			rwg.Add(1)
			go func() {
				defer rwg.Done()
				for !stop.Load() {
					recs := j.Select(nil)
					if len(recs) > capacity {
						t.Errorf("cap %d: %d records", capacity, len(recs))
						return
					}
					for k, r := range recs {
						if r.Channel != r.ID*1_000_000+r.Parent {
							t.Errorf("cap %d: torn record %+v", capacity, r)
							return
						}
						if k > 0 && r.Seq != recs[k-1].Seq+1 {
							t.Errorf("cap %d: seq %d after %d", capacity, r.Seq, recs[k-1].Seq)
							return
						}
					}
					runtime.Gosched()
				}
			}()
		}
		wg.Wait()
		stop.Store(true)
		rwg.Wait()
		recs := j.Records()
		if j.Len() != writers*per || len(recs) != capacity || recs[len(recs)-1].Seq != writers*per {
			t.Fatalf("cap %d: len %d, %d records, last %d", capacity, j.Len(), len(recs), recs[len(recs)-1].Seq)
		}
		if j.Dropped() != uint64(writers*per-capacity) {
			t.Fatalf("cap %d: dropped %d", capacity, j.Dropped())
		}
	}
}

// TestRecordTimeIsWallClockAndMonotonic: a record's time is the wall
// clock's (within the test's bounds) and never goes backwards.
func TestRecordTimeIsWallClockAndMonotonic(t *testing.T) {
	j := New(128)
	lo := time.Now().UnixNano()
	for k := 0; k < 100; k++ {
		j.Add(Record{})
	}
	hi := time.Now().UnixNano()
	recs := j.Records()
	for k, r := range recs {
		if r.Time < lo-int64(time.Millisecond) || r.Time > hi+int64(time.Millisecond) {
			t.Fatalf("record time %d outside [%d, %d]", r.Time, lo, hi)
		}
		if k > 0 && r.Time < recs[k-1].Time {
			t.Fatal("time went backwards")
		}
	}
	if j.Dropped() != 0 {
		t.Fatalf("dropped %d", j.Dropped())
	}
}

// BenchmarkAdd adds records from every P at once: the journal, against the
// mutex and time.Now per record it had before (impl=mutex).
func BenchmarkAdd(b *testing.B) {
	b.Run("impl=journal", func(b *testing.B) {
		j := New(DefaultCapacity)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				j.Add(Record{ID: 1, Kind: KindEvent})
			}
		})
	})
	b.Run("impl=mutex", func(b *testing.B) {
		var mu sync.Mutex
		var seq atomic.Uint64
		ring := make([]Record, DefaultCapacity)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				r := Record{ID: 1, Kind: KindEvent}
				r.Time = time.Now().UnixNano()
				mu.Lock()
				r.Seq = seq.Add(1)
				ring[(r.Seq-1)%uint64(len(ring))] = r
				mu.Unlock()
			}
		})
	})
}

// TestAddAtSharesOneReadingNeverBackwards: records added with one clock
// reading (a reactor's batch) share its time, and a reading older than a
// record already made is raised to that record's time, so that times never
// go backwards in sequence order.
func TestAddAtSharesOneReadingNeverBackwards(t *testing.T) {
	j := New(16)
	lo := time.Now().UnixNano()
	early := Now()
	a := j.AddAt(Record{ID: 1}, early)
	b := j.AddAt(Record{ID: 2}, early)
	for deadline := time.Now().Add(5 * time.Second); Now() < early+Stamp(time.Millisecond); {
		if time.Now().After(deadline) {
			t.Fatal("the clock did not move")
		}
		runtime.Gosched()
	}
	c := j.Add(Record{ID: 3})
	d := j.AddAt(Record{ID: 4}, early) // a batch stamped before c
	hi := time.Now().UnixNano()
	recs := j.Records()
	if len(recs) != 4 || recs[0].Seq != a || recs[1].Seq != b || recs[2].Seq != c || recs[3].Seq != d {
		t.Fatalf("records %v", recs)
	}
	if recs[0].Time != recs[1].Time {
		t.Fatalf("one reading, two times: %d %d", recs[0].Time, recs[1].Time)
	}
	if recs[2].Time < recs[1].Time+int64(time.Millisecond) {
		t.Fatalf("a later reading %d is not later than %d", recs[2].Time, recs[1].Time)
	}
	if recs[3].Time != recs[2].Time {
		t.Fatalf("an early reading after a later record: time %d, want %d (never backwards)", recs[3].Time, recs[2].Time)
	}
	for _, r := range recs {
		if r.Time < lo-int64(time.Millisecond) || r.Time > hi+int64(time.Millisecond) {
			t.Fatalf("record time %d outside [%d, %d]", r.Time, lo, hi)
		}
	}
}

// TestAddEventAtIsAddAt: an event's record added field by field
// (AddEventAt) is the record AddAt makes of the same fields, in the ring
// and for observers (Kind KindEvent, no Parent, no Call), whatever the slot
// held before (a ring of 2 written over several times, with records whose
// Parent and Call are set); its time follows AddAt's rule, and it is
// whole when readers copy it while writers add (the ring of 1 under
// TestAddConcurrentWithReaders' check, here with AddEventAt).
func TestAddEventAtIsAddAt(t *testing.T) {
	j := New(2)
	var seen []Record
	stop := j.Observe(func(r Record) { seen = append(seen, r) })
	defer stop()
	at := Now()
	for k := uint64(1); k <= 5; k++ {
		// A call record with every field set, then an event's.
		j.AddAt(Record{ID: 100 + k, Parent: 7, Channel: 8, Kind: KindCall, QPType: 2, Call: CallConnect, Status: -5, State: StateConnect}, at)
		want := Record{ID: k, Channel: 40 + k, Kind: KindEvent, QPType: 1, Event: 9, Status: int32(-k), State: StateConnectResponse}
		seq := j.AddEventAt(want.ID, want.Channel, want.QPType, want.Event, want.Status, want.State, at)
		recs := j.Records()
		want.Seq, want.Time = seq, recs[0].Time
		if len(recs) != 2 || recs[1] != want {
			t.Fatalf("round %d: records %+v, want the event's %+v last", k, recs, want)
		}
		if got := seen[len(seen)-1]; got != want {
			t.Fatalf("round %d: observed %+v, want %+v", k, got, want)
		}
	}

	// Writers and readers at once on a ring of 1: each record read is
	// one writer's.
	j = New(1)
	var wg sync.WaitGroup
	var done atomic.Bool
	for g := uint64(1); g <= 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := uint64(1); k <= 2000; k++ {
				j.AddEventAt(g, g*1_000_000+k, 1, 9, int32(k), StateConnectResponse, Now())
			}
		}()
	}
	go func() { wg.Wait(); done.Store(true) }()
	for !done.Load() {
		for _, r := range j.Select(nil) {
			if r.Channel/1_000_000 != r.ID || int32(r.Channel%1_000_000) != r.Status || r.Kind != KindEvent {
				t.Fatalf("torn record %+v", r)
			}
		}
		runtime.Gosched()
	}
	if j.Len() != 8000 {
		t.Fatalf("len %d, want 8000", j.Len())
	}
}
