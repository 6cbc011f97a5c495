package soft

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// acquiredLoop returns a loop of a new fabric named name, held until the
// test ends, when it is released and the fabric quiesced.
func acquiredLoop(t *testing.T, name string) *loop {
	t.Helper()
	f := New(WithName(name))
	t.Cleanup(f.Quiesce)
	l, err := f.eng.acquire()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.eng.release(l) })
	return l
}

// timerPops is how many entries due l's timer heap has taken in all.
func timerPops(l *loop) uint64 {
	l.pt.mu.Lock()
	defer l.pt.mu.Unlock()
	return l.pt.pops
}

// waitTimerPops waits until l has taken n entries due in all.
func waitTimerPops(t *testing.T, l *loop, n uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for timerPops(l) < n {
		if time.Now().After(deadline) {
			t.Fatalf("the loop took %d timers due, want %d", timerPops(l), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// checkHeap fails unless pt.h is a heap whose entries know their index.
func checkHeap(t *testing.T, pt *pathTimers) {
	t.Helper()
	for i, e := range pt.h {
		if (e.p == nil) == (e.c == nil) {
			t.Fatalf("entry %d: path %p, connection %p: want one", i, e.p, e.c)
		}
		if idx := entryIdx(&e); int(idx) != i+1 {
			t.Fatalf("entry %d: tidx %d", i, idx)
		}
		if i > 0 && pt.h[(i-1)/2].when > e.when {
			t.Fatalf("entry %d (%d) before its parent (%d)", i, e.when, pt.h[(i-1)/2].when)
		}
	}
}

// entryIdx is the index + 1 the entry's path or connection holds.
func entryIdx(e *ptEntry) int32 {
	if e.p != nil {
		return e.p.tidx
	}
	return e.c.tidx
}

// entryGen is the generation of the entry's path or connection now.
func entryGen(e *ptEntry) uint32 {
	if e.p != nil {
		return e.p.tgen
	}
	return e.c.tgen
}

// TestPathTimersHeap: arms, re-arms and stops of many paths' and
// connections' timers in random order keep the heap ordered and each
// one's index right, and the entries come out due in deadline order,
// each timer's last arm only.
func TestPathTimersHeap(t *testing.T) {
	for _, n := range []int{1, 2, 3, 17, 200} {
		pt := &pathTimers{fired: func() {}}
		rng := rand.New(rand.NewPCG(uint64(n), 1))
		paths := make([]*rcPath, n)
		conns := make([]*conn, n)
		want := map[any]int64{} // the live arm's deadline, by path or connection
		for k := range paths {
			paths[k], conns[k] = &rcPath{}, &conn{}
		}
		far := int64(time.Hour) // never due while the test runs: the runtime timer stays idle
		for range 8 * n {
			p, c := paths[rng.IntN(n)], conns[rng.IntN(n)]
			when := far + rng.Int64N(1000)
			switch rng.IntN(6) {
			case 0, 1:
				p.tgen++
				pt.add(p, when, p.tgen, ptRelease)
				want[p] = when
			case 2:
				pt.remove(p)
				delete(want, p)
			case 3, 4:
				c.tgen = (c.tgen | 1) + 2
				pt.addConn(c, when, c.tgen)
				want[c] = when
			case 5:
				pt.removeConn(c)
				delete(want, c)
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
			var key any = e.c
			if e.p != nil {
				key = e.p
			}
			if idx, gen := entryIdx(&e), entryGen(&e); idx != 0 || want[key] != e.when || e.gen != gen {
				t.Fatalf("n=%d: entry at %d of a timer armed for %d (tidx %d, gen %d of %d)", n, e.when, want[key], idx, e.gen, gen)
			}
			delete(want, key)
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
	l := acquiredLoop(t, "path-timers")

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
		before := timerPops(l)
		if tc.held {
			p.arm(short, ptRepeatRTR)
			waitTimerPops(t, l, before+1)
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
	l := acquiredLoop(t, "path-timers-alloc")
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

// TestConnTimerStale: a connection's own timer (the connect and request
// timeouts, the linger) acts once, on the loop, for its last arm, and never
// after the connection stopped it, armed it again or closed, also when
// its entry was already taken due and its fire waits for the connection's
// lock (held here) while that happens. With a time.AfterFunc per arm, a
// fire already posted to the loop when the timer was stopped or armed
// again ran onTimeout anyway: a connection whose Reply came as its connect
// timeout expired was closed right after it was established.
func TestConnTimerStale(t *testing.T) {
	l := acquiredLoop(t, "conn-timers")

	var mu sync.Mutex
	var seen []*conn
	connTimerHook = func(c *conn) bool {
		mu.Lock()
		seen = append(seen, c)
		mu.Unlock()
		return false // no socket: onTimeout is not run
	}
	defer func() { connTimerHook = nil }()
	const short = time.Millisecond
	cases := []struct {
		name    string
		between func(c *conn)
		held    bool // between runs after the entry was taken due, its fire waiting for c.mu
		fires   bool
	}{
		{"fires", func(*conn) {}, true, true},
		{"stopped before due", func(c *conn) { c.stopTimer() }, false, false},
		{"armed again before due", func(c *conn) { c.armTimer(short) }, false, true},
		{"stopped after taken", func(c *conn) { c.stopTimer() }, true, false},
		{"stopped and armed again after taken", func(c *conn) { c.stopTimer(); c.armTimer(time.Hour) }, true, false},
		{"armed again after taken", func(c *conn) { c.armTimer(time.Hour) }, true, false},
		{"closed after taken", func(c *conn) { c.state = csClosed }, true, false},
	}
	for _, tc := range cases {
		c := &conn{l: l}
		c.mu.Lock()
		before := timerPops(l)
		if tc.held {
			c.armTimer(short)
			waitTimerPops(t, l, before+1)
		} else {
			c.armTimer(50 * time.Millisecond)
		}
		tc.between(c)
		c.mu.Unlock()
		// A sentinel due after anything above: once it fired, every
		// earlier entry was taken and its fire has run.
		s := &conn{l: l}
		s.mu.Lock()
		s.armTimer(60 * time.Millisecond)
		s.mu.Unlock()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			done := slices.Contains(seen, s)
			mu.Unlock()
			if done {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the sentinel never fired", tc.name)
			}
			time.Sleep(time.Millisecond)
		}
		l.call(func() {}) // the loop's task that fired the sentinel is over
		mu.Lock()
		got := slices.DeleteFunc(seen, func(x *conn) bool { return x == s })
		seen = nil
		mu.Unlock()
		switch {
		case len(got) > 1 || (len(got) == 1 && got[0] != c):
			t.Errorf("%s: %d fires (%v), want at most one, of the connection", tc.name, len(got), got)
		case tc.fires && len(got) == 0:
			t.Errorf("%s: did not fire", tc.name)
		case !tc.fires && len(got) == 1:
			t.Errorf("%s: fired", tc.name)
		}
		c.mu.Lock()
		c.stopTimer()
		if c.tgen&1 != 0 {
			t.Errorf("%s: armed after a stop (generation %d)", tc.name, c.tgen)
		}
		c.mu.Unlock()
	}
}

// TestConnTimerArmNoAlloc: arming and stopping a connection's own timer
// allocates nothing once its loop's heap has room (time.AfterFunc made a
// timer and a closure per arm: two allocations per connection at the
// initiator, for its connect timeout, and two at the end that
// disconnects, for its linger).
func TestConnTimerArmNoAlloc(t *testing.T) {
	l := acquiredLoop(t, "conn-timers-alloc")
	c := &conn{l: l}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armTimer(time.Hour)
	c.stopTimer()
	allocs := testing.AllocsPerRun(100, func() {
		c.armTimer(time.Hour)
		c.armTimer(time.Hour)
		c.stopTimer()
	})
	if allocs != 0 {
		t.Errorf("arm, arm again and stop: %.1f allocations, want 0", allocs)
	}
}
