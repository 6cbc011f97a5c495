package soft

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// checkHeap fails unless pt.h is a heap whose entries know their index.
func checkHeap(t *testing.T, pt *pathTimers) {
	t.Helper()
	for i, e := range pt.h {
		if int(e.p.tidx) != i+1 {
			t.Fatalf("entry %d: tidx %d", i, e.p.tidx)
		}
		if i > 0 && pt.h[(i-1)/2].when > e.when {
			t.Fatalf("entry %d (%d) before its parent (%d)", i, e.when, pt.h[(i-1)/2].when)
		}
	}
}

// TestPathTimersHeap: arms, re-arms and stops of many paths in random
// order keep the heap ordered and each path's index right, and the
// entries come out due in deadline order, each path's last arm only.
func TestPathTimersHeap(t *testing.T) {
	for _, n := range []int{1, 2, 3, 17, 200} {
		pt := &pathTimers{fired: func() {}}
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		paths := make([]*rcPath, n)
		want := map[*rcPath]int64{} // the live arm's deadline
		for k := range paths {
			paths[k] = &rcPath{}
		}
		far := int64(time.Hour) // never due while the test runs: the runtime timer stays idle
		for range 4 * n {
			p := paths[rng.IntN(n)]
			switch rng.IntN(3) {
			case 0, 1:
				when := far + rng.Int64N(1000)
				p.tgen++
				pt.add(p, when, p.tgen, ptRelease)
				want[p] = when
			case 2:
				pt.remove(p)
				delete(want, p)
			}
			checkHeap(t, pt)
		}
		if len(pt.h) != len(want) {
			t.Fatalf("n=%d: %d entries, want %d", n, len(pt.h), len(want))
		}
		due := pt.takeDue(far+500, nil)
		rest := pt.takeDue(far+2000, nil)
		checkHeap(t, pt)
		var whens []int64
		for _, e := range slices.Concat(due, rest) {
			if e.p.tidx != 0 || want[e.p] != e.when || e.gen != e.p.tgen {
				t.Fatalf("n=%d: entry at %d of a path armed for %d (tidx %d, gen %d of %d)", n, e.when, want[e.p], e.p.tidx, e.gen, e.p.tgen)
			}
			delete(want, e.p)
			whens = append(whens, e.when)
		}
		for _, e := range due {
			if e.when > far+500 {
				t.Fatalf("n=%d: %d taken due at %d", n, e.when, far+500)
			}
		}
		if !slices.IsSorted(whens) || len(want) != 0 || len(pt.h) != 0 {
			t.Fatalf("n=%d: taken out of order or left: %v, %d left", n, whens, len(want))
		}
		pt.mu.Lock()
		if pt.t != nil {
			pt.t.Stop()
		}
		pt.mu.Unlock()
	}
}

// TestPathTimerStale: a path timer acts once, on the loop, for its
// path's last arm, and never after the path stopped it, armed it again,
// died or was replaced, also when its entry was already taken due and
// its fire waits for the connection's lock (held here) while that
// happens. A fire that checked only that the path is alive and armed
// ran the earlier arm's function on the later one.
func TestPathTimerStale(t *testing.T) {
	f := New(WithName("path-timers"))
	defer f.Quiesce()
	l, err := f.eng.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer f.eng.release(l)

	var mu sync.Mutex
	type fired struct {
		p    *rcPath
		what pathTimer
	}
	var seen []fired
	pathTimerHook = func(p *rcPath, what pathTimer) {
		mu.Lock()
		seen = append(seen, fired{p, what})
		mu.Unlock()
	}
	defer func() { pathTimerHook = nil }()
	took := func() fired {
		mu.Lock()
		defer mu.Unlock()
		s := seen
		seen = nil
		if len(s) > 1 {
			t.Fatalf("%d fires, want at most 1: %v", len(s), s)
		}
		if len(s) == 0 {
			return fired{}
		}
		return s[0]
	}
	pops := func() uint64 {
		l.pt.mu.Lock()
		defer l.pt.mu.Unlock()
		return l.pt.pops
	}
	// waitPops waits until the loop has taken n entries due in all.
	waitPops := func(n uint64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for pops() < n {
			if time.Now().After(deadline) {
				t.Fatalf("the loop took %d timers due, want %d", pops(), n)
			}
			time.Sleep(time.Millisecond)
		}
	}
	const short = time.Millisecond
	cases := []struct {
		name string
		// between runs with c.mu held after the entry was taken due
		// (held: while its fire waits for the lock; else: before it is due).
		between func(c *conn, p *rcPath)
		held    bool
		want    pathTimer // 0xff: none
	}{
		{"fires", func(*conn, *rcPath) {}, true, ptRepeatRTR},
		{"stopped before due", func(_ *conn, p *rcPath) { p.stopTimer() }, false, 0xff},
		{"armed again before due", func(_ *conn, p *rcPath) { p.arm(short, ptRelease) }, false, ptRelease},
		{"stopped after taken", func(_ *conn, p *rcPath) { p.stopTimer() }, true, 0xff},
		{"stopped and armed again after taken", func(_ *conn, p *rcPath) { p.stopTimer(); p.arm(time.Hour, ptRelease) }, true, 0xff},
		{"armed again after taken", func(_ *conn, p *rcPath) { p.arm(time.Hour, ptRelease) }, true, 0xff},
		{"died after taken", func(_ *conn, p *rcPath) { p.dead = true }, true, 0xff},
		{"replaced after taken", func(c *conn, _ *rcPath) { c.newPath(0) }, true, 0xff},
	}
	for _, tc := range cases {
		c := &conn{l: l} // not in RTS: the timers' functions find nothing to do
		c.mu.Lock()
		p := c.newPath(0)
		before := pops()
		if tc.held {
			p.arm(short, ptRepeatRTR)
			waitPops(before + 1)
			tc.between(c, p)
		} else {
			p.arm(50*time.Millisecond, ptRepeatRTR)
			tc.between(c, p)
		}
		c.mu.Unlock()
		// A sentinel on another path, due after anything above: once it
		// fired, every earlier entry was taken and its fire has run.
		s := &conn{l: l}
		s.mu.Lock()
		sp := s.newPath(0)
		sp.arm(60*time.Millisecond, ptRTRTimeout)
		s.mu.Unlock()
		deadline := time.Now().Add(10 * time.Second)
		var got []fired
		for {
			mu.Lock()
			got = slices.Clone(seen)
			mu.Unlock()
			if slices.ContainsFunc(got, func(f fired) bool { return f.p == sp }) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the sentinel never fired", tc.name)
			}
			time.Sleep(time.Millisecond)
		}
		l.call(func() {}) // the loop's task that fired the sentinel is over
		mu.Lock()
		seen = slices.DeleteFunc(seen, func(f fired) bool { return f.p == sp })
		mu.Unlock()
		got1 := took()
		switch {
		case tc.want == 0xff && got1.p != nil:
			t.Errorf("%s: fired %d, want nothing", tc.name, got1.what)
		case tc.want != 0xff && (got1.p != p || got1.what != tc.want):
			t.Errorf("%s: fired %v, want %d on the path", tc.name, got1, tc.want)
		}
		c.mu.Lock()
		c.dp.stopTimer()
		p.stopTimer()
		c.mu.Unlock()
	}
}

// TestPathTimerArmNoAlloc: arming and stopping a path's timer allocates
// nothing once its loop's heap has room (time.AfterFunc made a timer and
// a closure per arm).
func TestPathTimerArmNoAlloc(t *testing.T) {
	f := New(WithName("path-timers-alloc"))
	defer f.Quiesce()
	l, err := f.eng.acquire()
	if err != nil {
		t.Fatal(err)
	}
	defer f.eng.release(l)
	c := &conn{l: l}
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.newPath(0)
	p.arm(time.Hour, ptRelease)
	p.stopTimer()
	allocs := testing.AllocsPerRun(100, func() {
		p.arm(time.Hour, ptRelease)
		p.arm(time.Hour, ptRepeatRTR)
		p.stopTimer()
	})
	if allocs != 0 {
		t.Errorf("arm, arm again and stop: %.1f allocations, want 0", allocs)
	}
}
