package rsocket

import (
	"io"
	"net"
	"runtime"
	"testing"
	"time"
)

// TestManyConnectionsFewGoroutines opens 1000 connections (2000 ends in
// this process), moves a message over each, and checks that the library's
// goroutines do not grow with them: the reactor and the fabric's loops
// serve them all.
func TestManyConnectionsFewGoroutines(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 50
	}
	opts := []Option{WithRecvBuffer(4096), WithSendBuffer(4096), WithSQSize(16), WithRQSize(16)}
	l, err := Listen("tcp", "127.0.0.1:0", opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// One connection first, so the engine and the fabric run already.
	warm, err := Dial("tcp", l.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer warm.Close()
	warmPeer, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer warmPeer.Close()
	base := runtime.NumGoroutine()

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for k := 0; k < n; k++ {
		d, err := Dial("tcp", l.Addr().String(), opts...)
		if err != nil {
			t.Fatalf("connection %d: %v", k, err)
		}
		a, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, d, a)
	}
	buf := make([]byte, 2)
	for k := 0; k < len(conns); k += 2 {
		if _, err := conns[k].Write([]byte{byte(k), byte(k >> 8)}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(conns[k+1], buf); err != nil || buf[0] != byte(k) || buf[1] != byte(k>>8) {
			t.Fatalf("connection %d: %v %v", k/2, buf, err)
		}
	}
	// Transient goroutines (timers firing, a waiter's receive claim
	// lingering, pool workers) come and go, more of them on a loaded
	// machine: allow a few, and give them a bounded while to end. A
	// goroutine per connection end would leave 2*n.
	settle := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > base+5 && time.Now().Before(settle) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := runtime.NumGoroutine(); got > base+5 {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines with %d more connections, %d before:\n%s", got, 2*n, base, buf[:runtime.Stack(buf, true)])
	}
	t.Logf("%d goroutines for %d connection ends (%d before)", runtime.NumGoroutine(), 2*n+2, base)
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
