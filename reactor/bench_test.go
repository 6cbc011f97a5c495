package reactor_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// benchDispatch measures events per second and allocations per event from
// an event source's fd through epoll to a handler, inline or on a pool.
func benchDispatch(b *testing.B, workers int) {
	const nids = 64
	fx := newFixture(b, nids, reactor.WithWorkers(workers), reactor.WithMaxPending(1<<16))
	var done atomic.Int64
	_ = fx.r.Register(fx.ch, handlers.Func(func(*id.Event) error { done.Add(1); return nil }))
	eps := make([]interface {
		Inject(id.EventType, int32, []byte) bool
	}, nids)
	for k, cm := range fx.ids {
		eps[k] = ep(cm)
	}
	// Warm up pools and maps.
	for k := 0; k < 4096; k++ {
		eps[k%nids].Inject(id.EventUser, 0, nil)
	}
	for done.Load() < 4096 {
		runtime.Gosched()
	}
	done.Store(0)
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		eps[k%nids].Inject(id.EventUser, 0, nil)
		if k%256 == 255 {
			for done.Load() < int64(k)-4096 {
				runtime.Gosched()
			}
		}
	}
	for done.Load() < int64(b.N) {
		runtime.Gosched()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func BenchmarkDispatchInline(b *testing.B) { benchDispatch(b, 0) }
func BenchmarkDispatchPool4(b *testing.B)  { benchDispatch(b, 4) }

// BenchmarkGoChannelFanout is the baseline: the same number of events
// handed to four goroutines through buffered Go channels, keyed by id.
func BenchmarkGoChannelFanout(b *testing.B) {
	type event struct {
		id  int
		typ id.EventType
	}
	var done atomic.Int64
	chans := make([]chan event, 4)
	var wg sync.WaitGroup
	for k := range chans {
		chans[k] = make(chan event, 4096)
		wg.Add(1)
		go func(c chan event) {
			defer wg.Done()
			for range c {
				done.Add(1)
			}
		}(chans[k])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for k := 0; k < b.N; k++ {
		chans[k%4] <- event{id: k % 64, typ: id.EventUser}
	}
	for _, c := range chans {
		close(c)
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}
