package uverbs

import (
	"context"
	"errors"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A pipe stands in for a completion channel: the test writes 8-byte
// records as the kernel queues notifications.
func testChannel(t *testing.T) (*CompChannel, int) {
	t.Helper()
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	ch, err := NewCompChannel(p[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ch.Close(); unix.Close(p[1]) })
	return ch, p[1]
}

func TestCompChannelTryRead(t *testing.T) {
	ch, w := testChannel(t)
	if got, err := ch.TryRead(); got || err != nil {
		t.Fatalf("empty: %v %v", got, err)
	}
	if _, err := unix.Write(w, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 2; k++ {
		if got, err := ch.TryRead(); !got || err != nil {
			t.Fatalf("record %d: %v %v", k, got, err)
		}
	}
	if got, _ := ch.TryRead(); got {
		t.Fatal("third record")
	}
	if allocs := testing.AllocsPerRun(100, func() { _, _ = ch.TryRead() }); allocs != 0 {
		t.Fatalf("TryRead allocates %v", allocs)
	}
}

func TestCompChannelWait(t *testing.T) {
	ch, w := testChannel(t)
	var ready atomic.Bool
	done := make(chan error, 1)
	go func() { done <- ch.Wait(context.Background(), ready.Load) }()
	select {
	case err := <-done:
		t.Fatalf("returned before ready: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	ready.Store(true)
	if _, err := unix.Write(w, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the notification")
	}
}

func TestCompChannelWaitCancelAndClose(t *testing.T) {
	ch, _ := testChannel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := ch.Wait(ctx, func() bool { return false }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	}
	// A later wait is not hurt by the earlier deadline.
	done := make(chan error, 1)
	go func() { done <- ch.Wait(context.Background(), func() bool { return false }) }()
	time.Sleep(20 * time.Millisecond)
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, os.ErrClosed) {
			t.Fatalf("after close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Close")
	}
	if err := ch.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestCompChannelKick(t *testing.T) {
	ch, _ := testChannel(t)
	var ready atomic.Bool
	done := make(chan error, 1)
	go func() { done <- ch.Wait(context.Background(), ready.Load) }()
	time.Sleep(20 * time.Millisecond)
	ready.Store(true)
	ch.Kick()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after Kick")
	}
	// A Kick without a waiter does not make the next Wait fail.
	ch.Kick()
	ready.Store(false)
	go func() { done <- ch.Wait(context.Background(), ready.Load) }()
	time.Sleep(20 * time.Millisecond)
	ready.Store(true)
	ch.Kick()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
