package soft

import (
	"sync"
	"testing"
	"time"
)

// idleProbe is an idleOwner that records when its grace period ended.
type idleProbe struct {
	mu    sync.Mutex
	it    idleTimer
	fired chan time.Time
}

func (p *idleProbe) idleFired() {
	p.mu.Lock()
	due := p.it.due()
	p.mu.Unlock()
	if due {
		p.fired <- time.Now()
	}
}

// TestIdleTimerMoves: a grace period armed again before it ends ends a
// full period after the last arm (the timer left set moves on), a
// disarmed one never ends, and one armed again after a disarm ends.
func TestIdleTimerMoves(t *testing.T) {
	const grace = 40 * time.Millisecond
	p := &idleProbe{fired: make(chan time.Time, 4)}
	arm := func() {
		p.mu.Lock()
		p.it.arm(grace, p)
		p.mu.Unlock()
	}
	var last time.Time
	for k := 0; k < 6; k++ { // 6 arms 15 ms apart: 90 ms, over two periods
		// Read before the arm, whose deadline is then at least last +
		// grace: read after it, a preempted test saw the period end
		// less than grace after its reading, the timer right.
		last = time.Now()
		arm()
		time.Sleep(15 * time.Millisecond)
	}
	select {
	case at := <-p.fired:
		if d := at.Sub(last); d < grace {
			t.Fatalf("ended %v after the last arm, want at least %v", d, grace)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the grace period never ended")
	}

	arm()
	p.mu.Lock()
	p.it.disarm()
	p.mu.Unlock()
	select {
	case <-p.fired:
		t.Fatal("a disarmed grace period ended")
	case <-time.After(3 * grace):
	}
	arm()
	select {
	case <-p.fired:
	case <-time.After(5 * time.Second):
		t.Fatal("a grace period armed after a disarm never ended")
	}
	p.mu.Lock()
	p.it.stop()
	p.mu.Unlock()
}

// TestIdleRearmNoAlloc: a client making one connection at a time takes
// and releases the fabric's loop for each; the release arms the grace
// period, which allocated a timer and two closures each time.
func TestIdleRearmNoAlloc(t *testing.T) {
	f := New(WithName("idle-alloc"), WithIdleGrace(time.Hour))
	defer f.Quiesce()
	l, err := f.eng.acquire()
	if err != nil {
		t.Fatal(err)
	}
	f.eng.release(l) // the first arm makes the timer
	allocs := testing.AllocsPerRun(100, func() {
		l, err := f.eng.acquire()
		if err != nil {
			t.Fatal(err)
		}
		f.eng.release(l)
	})
	if allocs != 0 {
		t.Errorf("acquire and release of an idle loop: %.0f allocations, want 0", allocs)
	}
}
