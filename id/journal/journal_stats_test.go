package journal_test

import (
	"sync"
	"syscall"
	"testing"

	"github.com/cmrt/cmrt/fabric"
	"github.com/cmrt/cmrt/id/journal"
)

func TestTallyCounts(t *testing.T) {
	j := journal.New(4)
	j.Add(journal.Record{ID: 1, Kind: journal.KindCall, Call: journal.CallCreate}) // before the tally: not counted
	tl := j.Tally()
	defer tl.Stop()
	recs := []journal.Record{
		{ID: 1, Kind: journal.KindCall, Call: journal.CallConnect},
		{ID: 2, Kind: journal.KindCall, Call: journal.CallConnect},
		{ID: 1, Kind: journal.KindCall, Call: journal.CallConnect, Status: int32(syscall.EINVAL)},
		{ID: 1, Kind: journal.KindEvent, Event: fabric.EventRejected, Status: 28},
		{ID: 3, Kind: journal.KindEvent, Event: fabric.EventRejected, Status: 28},
		{ID: 3, Kind: journal.KindEvent, Event: fabric.EventConnectError, Status: -int32(syscall.ETIMEDOUT)},
		{ID: 3, Kind: journal.KindEvent, Event: fabric.EventUser, Status: -1},
		{ID: 4, Kind: journal.KindCancel},
	}
	for _, r := range recs {
		j.Add(r)
	}
	want := map[journal.TallyKey]uint64{
		{Kind: journal.KindCall, Call: journal.CallConnect}:                                           2,
		{Kind: journal.KindCall, Call: journal.CallConnect, Status: int32(syscall.EINVAL)}:            1,
		{Kind: journal.KindEvent, Event: fabric.EventRejected, Status: 28}:                            2,
		{Kind: journal.KindEvent, Event: fabric.EventConnectError, Status: -int32(syscall.ETIMEDOUT)}: 1,
		{Kind: journal.KindEvent, Event: fabric.EventUser, Status: -1}:                                1,
		{Kind: journal.KindCancel}: 1,
	}
	got := map[journal.TallyKey]uint64{}
	tl.Each(func(k journal.TallyKey, n uint64) { got[k] = n })
	if len(got) != len(want) {
		t.Errorf("%d keys, want %d: %v", len(got), len(want), got)
	}
	for k, n := range want {
		if got[k] != n || tl.Count(k) != n {
			t.Errorf("%+v: Each %d, Count %d, want %d", k, got[k], tl.Count(k), n)
		}
	}
	tl.Stop()
	tl.Stop()
	j.Add(recs[0])
	if n := tl.Count(want0()); n != 2 {
		t.Errorf("after Stop: %d connects counted, want 2", n)
	}
}

func want0() journal.TallyKey {
	return journal.TallyKey{Kind: journal.KindCall, Call: journal.CallConnect}
}

// TestTallyFull checks that records of more keys than the table holds are
// counted as Uncounted, and the others still exactly.
func TestTallyFull(t *testing.T) {
	j := journal.New(1)
	tl := j.Tally()
	defer tl.Stop()
	const keys = 600
	for s := 0; s < keys; s++ {
		j.Add(journal.Record{ID: 1, Kind: journal.KindEvent, Event: fabric.EventRejected, Status: int32(s)})
	}
	n := 0
	tl.Each(func(journal.TallyKey, uint64) { n++ })
	if n != 512 || tl.Uncounted() != keys-512 {
		t.Errorf("%d keys, %d uncounted; want 512 and %d", n, tl.Uncounted(), keys-512)
	}
}

// TestTallyConcurrent counts from many goroutines at once (run with -race):
// every record is counted once.
func TestTallyConcurrent(t *testing.T) {
	j := journal.New(64)
	tl := j.Tally()
	defer tl.Stop()
	const goroutines, each = 8, 2000
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < each; k++ {
				j.Add(journal.Record{ID: uint64(g*each + k), Kind: journal.KindEvent, Event: fabric.EventType(k % 4), Status: int32(k % 3)})
			}
		}(g)
	}
	wg.Wait()
	var total uint64
	tl.Each(func(_ journal.TallyKey, n uint64) { total += n })
	if total != goroutines*each || tl.Uncounted() != 0 {
		t.Errorf("counted %d, uncounted %d; want %d", total, tl.Uncounted(), goroutines*each)
	}
	want := uint64(0)
	for k := 0; k < each; k++ {
		if k%4 == 1 && k%3 == 1 {
			want += goroutines
		}
	}
	if n := tl.Count(journal.TallyKey{Kind: journal.KindEvent, Event: 1, Status: 1}); n != want {
		t.Errorf("event 1 status 1: %d, want %d", n, want)
	}
}

// TestTallyNoAlloc checks that counting adds no allocation to Add.
func TestTallyNoAlloc(t *testing.T) {
	j := journal.New(64)
	tl := j.Tally()
	defer tl.Stop()
	r := journal.Record{ID: 7, Kind: journal.KindEvent, Event: fabric.EventEstablished}
	j.Add(r)
	if a := testing.AllocsPerRun(1000, func() { j.Add(r) }); a != 0 {
		t.Errorf("Add with a tally allocates %v times", a)
	}
}

// BenchmarkAdd and BenchmarkAddTallied give what a Tally adds to each
// record: one observer call, a table lookup and an atomic add.
func BenchmarkAdd(b *testing.B) { benchAdd(b, false) }

// BenchmarkAddTallied is BenchmarkAdd with a Tally counting.
func BenchmarkAddTallied(b *testing.B) { benchAdd(b, true) }

func benchAdd(b *testing.B, tallied bool) {
	j := journal.New(1 << 12)
	if tallied {
		defer j.Tally().Stop()
	}
	r := journal.Record{ID: 7, Kind: journal.KindEvent, Event: fabric.EventEstablished}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			j.Add(r)
		}
	})
}
