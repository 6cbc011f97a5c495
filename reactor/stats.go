package reactor

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// LatencySampling is how often the reactor times a handler: one event in
// LatencySampling (those whose journal sequence number is a multiple of
// it) and one work completion in LatencySampling. A clock reading costs
// 30-100 ns on the virtual machines this project is measured on (vDSO
// clock_gettime; a quarter to half of an inline dispatch): reading it
// twice for every event would double the dispatch, and one in 16 cost 4
// to 12 ns per event (BENCHMARKS.md, "What is slow and why", finding 31).
// One in 64 costs 1-3 ns and still gives a histogram whose quantiles and
// mean are those of all handlers (a reactor dispatching a thousand events
// a second times some 15 a second).
const LatencySampling = 64

// latencyBuckets is how many finite buckets the handler latency histogram
// has: upper bounds 2^10 ns (1.024 µs) to 2^30 ns (1.07 s), doubling.
const latencyBuckets = 21

// latencyMinShift is log2 of the first bucket's upper bound in nanoseconds.
const latencyMinShift = 10

// latency is a reactor's handler latency histogram: sampled, lock-free,
// without allocation. Buckets are not cumulative; the last one counts the
// handlers slower than the last bound.
type latency struct {
	base    time.Time     // the clock's origin: time.Since reads the monotonic clock once
	wcs     atomic.Uint64 // completions seen, to pick one in LatencySampling
	sumNs   atomic.Uint64
	buckets [latencyBuckets + 1]atomic.Uint64
}

// begin returns when a handler starts, or 0 if it is not sampled. The
// event's journal sequence number picks the sample: it is spread evenly
// over ids and channels, and reading it costs nothing.
func (l *latency) begin(seq uint64) int64 {
	if seq%LatencySampling != 0 {
		return 0
	}
	return l.now()
}

// beginWC is begin for a work completion.
func (l *latency) beginWC() int64 {
	if l.wcs.Add(1)%LatencySampling != 0 {
		return 0
	}
	return l.now()
}

// now is nanoseconds on the monotonic clock since base, at least 1. It is
// kept out of line so that begin and end, which call it for one event in
// LatencySampling, are inlined into the dispatch path.
//
//go:noinline
func (l *latency) now() int64 {
	if l.base.IsZero() {
		return 0 // a Reactor not made by New
	}
	return int64(time.Since(l.base)) + 1
}

// end records a handler that began at t0 (begin's result).
func (l *latency) end(t0 int64) {
	if t0 != 0 {
		l.record(t0)
	}
}

// record adds a sampled handler that began at t0 to the histogram.
func (l *latency) record(t0 int64) {
	d := uint64(max(l.now()-t0, 0))
	l.sumNs.Add(d)
	l.buckets[latencyBucket(d)].Add(1)
}

// latencyBucket returns the bucket of a duration in nanoseconds: the first
// whose upper bound is at least d.
func latencyBucket(d uint64) int {
	if d <= 1<<latencyMinShift {
		return 0
	}
	return min(bits.Len64(d-1)-latencyMinShift, latencyBuckets)
}

// Latency is a snapshot of a reactor's handler latency histogram, from
// HandlerLatency. Handlers are sampled (see LatencySampling): Count is the
// number of handlers timed, not of events handled.
type Latency struct {
	// Bounds are the buckets' upper bounds, inclusive, in increasing
	// order: 1.024 µs, doubling up to 1.07 s.
	Bounds []time.Duration
	// Counts holds, for each bound, the timed handlers that took longer
	// than the previous bound and at most this one (not cumulative), and
	// one more count at the end: those slower than the last bound.
	Counts []uint64
	// Count is the number of timed handlers: the sum of Counts.
	Count uint64
	// Sum is the time the timed handlers took, in all.
	Sum time.Duration
}

// HandlerLatency returns the histogram of the time handlers (of events and
// of work completions) took, from the start of the handler to its return
// or panic, on a sample of them. It reads atomic counters and takes no
// lock: a snapshot taken while handlers run may count a handler in a
// bucket but not yet in Sum.
func (r *Reactor) HandlerLatency() Latency {
	l := Latency{
		Bounds: make([]time.Duration, latencyBuckets),
		Counts: make([]uint64, latencyBuckets+1),
	}
	for k := range l.Bounds {
		l.Bounds[k] = time.Duration(1) << (latencyMinShift + k)
	}
	for k := range l.Counts {
		l.Counts[k] = r.lat.buckets[k].Load()
		l.Count += l.Counts[k]
	}
	l.Sum = time.Duration(r.lat.sumNs.Load())
	return l
}
