package reactor_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/panjf2000/ants/v2"

	"github.com/cmrt/cmrt/handlers"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/reactor"
)

// dispatchBatch is how many events benchDispatch queues before it lets the
// reactor read them.
const dispatchBatch = 8192

// benchDispatch measures events per second and allocations per event from
// an event channel's fd through epoll to a handler, inline or on a pool.
//
// It measures the reactor alone, from a pre-filled channel: with the timer
// stopped it queues dispatchBatch events on 64 ids (round robin) while the
// channel is not registered; with the timer running it registers the
// channel and waits (parked on a Go channel, not spinning) until the
// handler has seen the last of them; with the timer stopped again it
// unregisters. So the reactor drains a full channel (its only one: batch
// after batch without a wait), on a machine where no injecting goroutine
// competes for the CPU, and the inline figure is one core's. cpu-ns/op is
// the process's CPU time (all threads: loop, workers, GC) per event over
// the same intervals. (An earlier version injected
// while the reactor ran and spun on runtime.Gosched to keep 4096 events in
// flight: its figures swung 0.4-2.2x between repetitions.)
func benchDispatch(b *testing.B, workers int, opts ...reactor.Option) {
	const nids = 64
	fx := newFixture(b, nids, append([]reactor.Option{reactor.WithWorkers(workers), reactor.WithMaxPending(1 << 16)}, opts...)...)
	var done, goal atomic.Int64
	finished := make(chan struct{}, 1)
	h := handlers.Func(func(*id.Event) error {
		if done.Add(1) == goal.Load() {
			finished <- struct{}{}
		}
		return nil
	})
	eps := make([]interface {
		Inject(id.EventType, int32, []byte) bool
	}, nids)
	for k, cm := range fx.ids {
		eps[k] = ep(cm)
	}
	var cpu time.Duration
	run := func(n int, timed bool) {
		for k := 0; k < n; k++ {
			eps[k%nids].Inject(id.EventUser, 0, nil)
		}
		goal.Store(done.Load() + int64(n))
		if timed {
			b.StartTimer()
			cpu -= cpuTime()
		}
		if err := fx.r.Register(fx.ch, h); err != nil {
			b.Fatal(err)
		}
		<-finished
		if timed {
			cpu += cpuTime()
			b.StopTimer()
		}
		if err := fx.r.Unregister(fx.ch); err != nil {
			b.Fatal(err)
		}
	}
	run(dispatchBatch, false) // warm up pools and maps
	b.ReportAllocs()
	b.ResetTimer()
	b.StopTimer()
	for left := b.N; left > 0; left -= dispatchBatch {
		run(min(left, dispatchBatch), true)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// cpuTime returns the CPU time the process has used (user and system, all
// threads). On a machine shared with other work, CPU time per event moves
// less than wall time: it is what the events cost, not how long they
// waited for a CPU.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func BenchmarkDispatchInline(b *testing.B) { benchDispatch(b, 0) }
func BenchmarkDispatchPool4(b *testing.B)  { benchDispatch(b, 4) }
func BenchmarkDispatchPool8(b *testing.B)  { benchDispatch(b, 8) }

// BenchmarkDispatchPool1 is the pool's hand-off alone: the loop and one
// worker, so that no two workers share a line (the journal's ring and
// counter, the run queue's lock, an id whose events move between
// workers). The pool of 4 beyond it is what handlers running at once on
// both CPUs cost each other; make bench reports the two side by side
// (BENCHMARKS.md, finding 40).
func BenchmarkDispatchPool1(b *testing.B) { benchDispatch(b, 1) }

// BenchmarkDispatchInlineBatch256 is DispatchInline with Options.Batch 256
// (the default is 64). A channel alone on its reactor is read batch after
// batch without a wait (see Options), so the two should not differ: a
// check that Batch does not matter there.
func BenchmarkDispatchInlineBatch256(b *testing.B) { benchDispatch(b, 0, reactor.WithBatch(256)) }

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

// BenchmarkLineTransfer measures the machine's floor under the pool's
// figure: what it costs to move one cache line from one CPU to the other.
// Two goroutines, on the two Ps a 2-CPU machine has and so on its two
// CPUs, take turns writing one word, each spinning until the other's write
// arrives; ns/transfer is half the round trip. Every pool event crosses
// from the loop's CPU to a worker's, and each line it writes there (its
// mailbox item, the id's lock and counters, its journal record) is such a
// transfer, which an inline dispatch, on one CPU, never pays: benchreport
// divides the pool's CPU per event beyond the inline dispatch's by this
// figure, in the same run (BENCHMARKS.md, "What bounds the rows not met").
// It is skipped with fewer than two Ps, where a spinning goroutine would
// hold the only one until preempted.
func BenchmarkLineTransfer(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs two Ps")
	}
	var line struct {
		_ [64]byte // the word alone on its line, whatever the allocator's alignment
		v atomic.Int64
		_ [64]byte
	}
	n := int64(b.N)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for k := int64(0); k < n; k++ {
			for line.v.Load() != 2*k+1 {
			}
			line.v.Store(2*k + 2)
		}
	}()
	b.ResetTimer()
	for k := int64(0); k < n; k++ {
		for line.v.Load() != 2*k {
		}
		line.v.Store(2*k + 1)
	}
	<-done
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/transfer")
}

// The two benchmarks below decided how the reactor starts a worker for a
// mailbox that became runnable while fewer than Options.Workers run (under
// load, running workers go from mailbox to mailbox without any hand-off,
// either way): a plain goroutine (what the reactor does) against handing
// the mailbox to an idle worker of a private ants pool. Each iteration
// starts one piece of work and waits for it to signal, as an idle reactor
// does for the first event of a burst.

// BenchmarkHandoffGoroutine starts a goroutine per piece of work.
func BenchmarkHandoffGoroutine(b *testing.B) {
	done := make(chan struct{})
	fn := func() { done <- struct{}{} }
	b.ReportAllocs()
	for b.Loop() {
		go fn()
		<-done
	}
}

// BenchmarkHandoffAntsInvoke hands each piece of work to a private ants
// pool of 4 (ants.NewPoolWithFuncGeneric, non-blocking).
func BenchmarkHandoffAntsInvoke(b *testing.B) {
	done := make(chan struct{})
	pool, err := ants.NewPoolWithFuncGeneric(4, func(int) { done <- struct{}{} }, ants.WithNonblocking(true))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Release()
	b.ReportAllocs()
	for b.Loop() {
		if err := pool.Invoke(0); err != nil {
			b.Fatal(err)
		}
		<-done
	}
}
