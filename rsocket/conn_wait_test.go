package rsocket

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// pingPong sends rounds messages of n bytes from c1 and echoes them from
// c2, checking each. It fails the test if that takes more than 30 s,
// also when the connections' deadlines fail to end a blocked call.
func pingPong(t *testing.T, c1, c2 *Conn, rounds, n int) {
	t.Helper()
	done := make(chan error, 2)
	go func() {
		buf := make([]byte, n)
		for k := 0; k < rounds; k++ {
			if _, err := io.ReadFull(c2, buf); err != nil {
				done <- fmt.Errorf("echo: round %d: %w", k, err)
				return
			}
			if _, err := c2.Write(buf); err != nil {
				done <- fmt.Errorf("echo: round %d: %w", k, err)
				return
			}
		}
		done <- nil
	}()
	go func() {
		out, in := make([]byte, n), make([]byte, n)
		for k := 0; k < rounds; k++ {
			out[k%n] = byte(k)
			if _, err := c1.Write(out); err != nil {
				done <- fmt.Errorf("round %d: Write: %w", k, err)
				return
			}
			if _, err := io.ReadFull(c1, in); err != nil {
				done <- fmt.Errorf("round %d: Read: %w", k, err)
				return
			}
			if in[k%n] != byte(k) {
				done <- fmt.Errorf("round %d: echo %d, want %d", k, in[k%n], byte(k))
				return
			}
		}
		done <- nil
	}()
	timeout := time.After(30 * time.Second)
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatal("ping-pong still running after 30 s")
		}
	}
}

// TestBlockedReadWokenByQueue checks that on the software fabric the
// reactor polls neither queue of a connection, and that blocked calls are
// woken by the queues themselves: messages flow, Writes blocking for
// credits and buffer included.
func TestBlockedReadWokenByQueue(t *testing.T) {
	c1, c2, stop := pipe(t, WithRecvBuffer(4096), WithRQSize(16))
	defer stop()
	for _, c := range []*Conn{c1, c2} {
		c.mu.Lock()
		reg := c.cqReg
		c.mu.Unlock()
		if reg || !c.direct {
			t.Fatalf("reactor polls the queues: %v, callers wait on them: %v", reg, c.direct)
		}
	}
	c1.SetDeadline(time.Now().Add(20 * time.Second))
	c2.SetDeadline(time.Now().Add(20 * time.Second))
	pingPong(t, c1, c2, 200, 64)
	pingPong(t, c1, c2, 20, 6000)
}

// TestWaitsFollowDeclaration checks that what the fabric declares
// (fabric.InProcessCompleter), not its name, decides how a blocked
// caller waits: on a fabric declaring its completions made in process,
// even one named "kernel", callers wait on the queues (direct) without
// spinning and the reactor does not poll them; on one that does not
// declare it, even a software one, the reactor polls the queues and
// callers spin for DefaultPollTime, then wait for the reactor's wake-up.
// Messages flow either way, Writes blocking for credits included.
func TestWaitsFollowDeclaration(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      *immFabric
		direct bool
	}{
		{"in process, named kernel", kernFabric, true},
		{"not declared in process", outFabric, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c1, c2, stop := pipe(t, WithFabric(tc.f), WithRecvBuffer(4096), WithRQSize(16))
			defer stop()
			wantPoll := DefaultPollTime
			if tc.direct {
				wantPoll = 0
			}
			for _, c := range []*Conn{c1, c2} {
				c.mu.Lock()
				reg, direct, poll := c.cqReg, c.direct, c.cfg.pollTime
				c.mu.Unlock()
				if direct != tc.direct || reg == tc.direct || poll != wantPoll {
					t.Fatalf("callers wait on the queues: %v, reactor polls them: %v, poll time %v; want %v, %v, %v",
						direct, reg, poll, tc.direct, !tc.direct, wantPoll)
				}
			}
			c1.SetDeadline(time.Now().Add(20 * time.Second))
			c2.SetDeadline(time.Now().Add(20 * time.Second))
			pingPong(t, c1, c2, 100, 64)
			pingPong(t, c1, c2, 10, 6000)
		})
	}
}

// TestBlockedCallsKicked checks the waits on a queue whose every
// completion another poller takes first (deafFabric: the queue's Wait
// never reports; the reactor polls the queues): the other poller's
// handling, the deadline and Close must each wake the blocked caller.
// Writes block too (small buffers and credits).
func TestBlockedCallsKicked(t *testing.T) {
	t.Run("messages", func(t *testing.T) {
		c1, c2, stop := pipe(t, WithFabric(deafFabric), WithRecvBuffer(4096), WithRQSize(16))
		defer stop()
		if !c1.direct || !c2.direct {
			t.Fatal("callers do not wait on the queues")
		}
		// The reactor polls the queues too, and takes what the deaf
		// waits never see.
		for _, c := range []*Conn{c1, c2} {
			if err := c.eng.r.RegisterCQ(&c.spoll, noCompletions{}); err != nil {
				t.Fatal(err)
			}
			if err := c.eng.r.RegisterCQ(&c.rpoll, noCompletions{}); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			c.cqReg = true // Close unregisters them
			c.mu.Unlock()
		}
		c1.SetDeadline(time.Now().Add(20 * time.Second))
		c2.SetDeadline(time.Now().Add(20 * time.Second))
		pingPong(t, c1, c2, 200, 64)
		pingPong(t, c1, c2, 20, 6000) // more than the peer's buffer: Writes wait for credits
	})
	t.Run("deadline", func(t *testing.T) {
		c1, _, stop := pipe(t, WithFabric(deafFabric))
		defer stop()
		c1.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		done := make(chan error, 1)
		go func() {
			_, err := c1.Read(make([]byte, 1))
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Read: %v, want a deadline error", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Read still blocked 10 s after its deadline")
		}
	})
	t.Run("deadline set while blocked", func(t *testing.T) {
		c1, _, stop := pipe(t, WithFabric(deafFabric))
		defer stop()
		done := make(chan error, 1)
		go func() {
			_, err := c1.Read(make([]byte, 1))
			done <- err
		}()
		waitArmed(t, c1, &c1.rwait)
		c1.SetReadDeadline(time.Now())
		select {
		case err := <-done:
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.Fatalf("Read: %v, want a deadline error", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Read still blocked 10 s after its deadline")
		}
	})
	t.Run("close", func(t *testing.T) {
		c1, _, stop := pipe(t, WithFabric(deafFabric))
		defer stop()
		var wg sync.WaitGroup
		wg.Add(1)
		var rerr error
		go func() {
			defer wg.Done()
			_, rerr = c1.Read(make([]byte, 1))
		}()
		waitArmed(t, c1, &c1.rwait)
		c1.Close()
		wg.Wait()
		if !errors.Is(rerr, net.ErrClosed) {
			t.Fatalf("Read: %v, want net.ErrClosed", rerr)
		}
	})
}

// waitArmed waits until a caller waits on w.
func waitArmed(t *testing.T, c *Conn, w *cqWait) {
	t.Helper()
	for t0 := time.Now(); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		armed := w.armed
		c.mu.Unlock()
		if armed {
			return
		}
		if time.Since(t0) > 10*time.Second {
			t.Fatal("no caller waits after 10 s")
		}
	}
}

// TestCQWaitAfterFunc checks the kick that a fabric reading on the
// waiting goroutine asks for (cqWait.AfterFunc): run once by the kick of
// an armed wait, at once if the wait was kicked already, never after
// stop (which reports whether it prevented the run), and without
// allocating once made.
func TestCQWaitAfterFunc(t *testing.T) {
	var mu sync.Mutex // stands for Conn.mu
	w := &cqWait{done: make(chan struct{}), armed: true}
	runs := 0
	f := func() { runs++ }

	stop := w.AfterFunc(f)
	mu.Lock()
	w.kick()
	w.kick() // a second kick of the same wait runs nothing
	mu.Unlock()
	if runs != 1 {
		t.Fatalf("kick ran f %d times, want 1", runs)
	}
	if stop() {
		t.Fatal("stop after the kick reported that it prevented f")
	}

	// Already kicked: f runs at once.
	w.AfterFunc(f)
	if runs != 2 {
		t.Fatalf("AfterFunc on a kicked wait ran f %d times in all, want 2", runs)
	}

	// The next wait (a new channel, as block makes): stop prevents f.
	w.done, w.kicked = make(chan struct{}), false
	stop = w.AfterFunc(f)
	if !stop() {
		t.Fatal("stop before the kick reported that f was not prevented")
	}
	mu.Lock()
	w.kick()
	mu.Unlock()
	if runs != 2 {
		t.Fatalf("f ran after stop (%d runs)", runs)
	}

	w.done, w.kicked = make(chan struct{}), false
	if n := testing.AllocsPerRun(100, func() { w.AfterFunc(f)() }); n != 0 {
		t.Errorf("AfterFunc and stop: %.0f allocations, want 0", n)
	}
}
