package netlink

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"
)

// These tests need no privilege: subscribing to rtnetlink groups is allowed
// for everybody.

func TestMonitorReadEmpty(t *testing.T) {
	m, err := Subscribe(context.Background(), GroupIPv6Route)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Fd() < 0 {
		t.Fatalf("Fd() = %d", m.Fd())
	}
	var buf [4]Change
	for range 100 { // tolerate unrelated route churn on a busy host
		n, err := m.Read(buf[:])
		if errors.Is(err, syscall.EAGAIN) {
			if n != 0 {
				t.Fatalf("Read = %d with EAGAIN", n)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("Read never returned EAGAIN")
}

func TestMonitorNextUnblocks(t *testing.T) {
	m, err := Subscribe(context.Background(), GroupIPv6Route)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()

	// Context cancellation wakes Next.
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		for {
			_, err := m.Next(ctx)
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := waitErr(t, errc); !errors.Is(err, context.Canceled) {
		t.Errorf("Next after cancel: %v, want context.Canceled", err)
	}

	// A deadline wakes Next.
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	for {
		if _, err := m.Next(ctx); err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("Next past deadline: %v", err)
			}
			break
		}
	}

	// Close wakes Next.
	go func() {
		for {
			_, err := m.Next(context.Background())
			if err != nil {
				errc <- err
				return
			}
		}
	}()
	time.Sleep(20 * time.Millisecond)
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waitErr(t, errc); !errors.Is(err, ErrClosed) {
		t.Errorf("Next after Close: %v, want ErrClosed", err)
	}
}

func TestMonitorContextCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	m, err := Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for m.Fd() != -1 {
		if time.Now().After(deadline) {
			t.Fatal("cancelling the Subscribe context did not close the monitor")
		}
		time.Sleep(time.Millisecond)
	}
	var buf [1]Change
	if _, err := m.Read(buf[:]); !errors.Is(err, ErrClosed) {
		t.Errorf("Read after context cancellation: %v, want ErrClosed", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("Close after context cancellation: %v", err)
	}
	if _, err := Subscribe(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Subscribe with a cancelled context: %v", err)
	}
	if _, err := Subscribe(context.Background(), 0); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("Subscribe(group 0): %v, want EINVAL", err)
	}
}

func waitErr(t *testing.T, errc <-chan error) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal("Next did not return")
		return nil
	}
}
