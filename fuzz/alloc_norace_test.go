//go:build !race

package fuzz

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/id/journal"
	"github.com/cmrt/cmrt/internal/fakefab"
	"github.com/cmrt/cmrt/reactor"
)

// TestPoolDispatchAllocatesNothing: dispatching an event on a reactor's
// workers allocates nothing, from the fabric through the id layer, the
// journal and the mailboxes to the handler. A regression test: since commit
// e76a6d0 the worker's popped item escaped to the heap (reactor/reactor.go
// worker passed &it.wc to handleWC), one allocation per event; fixed in
// df1cbfa. (The race detector allocates: !race only.)
func TestPoolDispatchAllocatesNothing(t *testing.T) {
	f := fakefab.New("fuzz", false)
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	r, err := reactor.New(reactor.WithWorkers(4), reactor.WithMaxPending(1<<16))
	if err != nil {
		t.Fatal(err)
	}
	var done atomic.Int64
	if err := r.Register(ch, handlers.Func(func(*id.Event) error { done.Add(1); return nil })); err != nil {
		t.Fatal(err)
	}
	var eps []*fakefab.Endpoint
	var ids []*id.ID
	for k := 0; k < 64; k++ {
		cm, err := id.Create(ch, nil, id.PSTCP, id.WithJournal(journal.New(16)))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cm)
		eps = append(eps, cm.Endpoint().(*fakefab.Endpoint))
	}
	run := func(n int) {
		base := done.Load()
		for k := 0; k < n; k++ {
			eps[k%len(eps)].Inject(id.EventUser, 0, nil)
			if k%256 == 255 {
				for done.Load()-base < int64(k)-4096 {
					runtime.Gosched()
				}
			}
		}
		for done.Load()-base < int64(n) {
			runtime.Gosched()
		}
	}
	run(8192) // warm up pools and maps
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	const n = 50000
	run(n)
	runtime.ReadMemStats(&after)
	_ = r.Close(context.Background())
	for _, cm := range ids {
		_ = cm.Destroy()
	}
	_ = ch.Close()
	if per := float64(after.Mallocs-before.Mallocs) / n; per > 0.1 {
		t.Fatalf("%.2f allocations per event dispatched on workers, want 0", per)
	}
}
