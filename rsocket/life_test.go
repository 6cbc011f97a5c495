package rsocket

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestAbruptDisconnectGivesReset: a peer that disconnects without
// rsockets' DISCONNECT message (a crash, a cut link) is a reset, not an
// end of stream, after the data that came before.
func TestAbruptDisconnectGivesReset(t *testing.T) {
	c1, c2, stop := pipe(t)
	defer stop()
	if _, err := c1.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(c2, buf); err != nil {
		t.Fatal(err)
	}
	if err := c1.cm.Disconnect(); err != nil { // the transport only
		t.Fatal(err)
	}
	_, err := c2.Read(buf)
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Read after the peer vanished: %v, want ECONNRESET", err)
	}
	if _, err := c2.Write(buf); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("Write: %v, want ECONNRESET", err)
	}
}

func TestKeepalive(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testKeepalive(t, tr.opts) })
	}
}

func testKeepalive(t *testing.T, opts []Option) {
	c1, c2, stop := pipe(t, with(opts, WithKeepalive(5*time.Millisecond))...)
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c1.mu.Lock()
		c1.pollCQs()
		n := c1.keepalives
		c1.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keepalives in 10 s", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Keepalives are invisible to the peer's reader.
	if _, err := c1.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	if n, err := c2.Read(b); n != 1 || err != nil {
		t.Fatalf("Read = %d, %v", n, err)
	}
}

func TestListenerClose(t *testing.T) {
	l, err := Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// An established connection nobody accepted is closed with the
	// listener: the dialer reads the end.
	c, err := Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 1))
		errc <- err
	}()
	if err := l.Close(); err != nil { // the Read may be blocked already or not
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if err != io.EOF {
			t.Fatalf("Read: %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Read still blocked")
	}
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := Dial("tcp", l.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("Dial a closed listener: %v", err)
	}
}

func TestDialContextCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := DialContext(ctx, "tcp", "127.0.0.1:1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("DialContext: %v", err)
	}
	for _, tc := range []struct{ network, addr string }{{"udp", "127.0.0.1:1"}, {"tcp", "127.0.0.1"}, {"tcp", "127.0.0.1:0"}} {
		if _, err := Dial(tc.network, tc.addr); err == nil {
			t.Errorf("Dial(%q, %q) succeeded", tc.network, tc.addr)
		}
	}
	if _, err := Listen("unix", "/tmp/x"); err == nil {
		t.Error("Listen unix succeeded")
	}
}

// TestAcceptedBacklogFull: requests beyond the backlog are rejected while
// nobody accepts.
func TestAcceptedBacklogFull(t *testing.T) {
	l, err := Listen("tcp", "127.0.0.1:0", WithBacklog(2))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for k := 0; k < 2; k++ {
		c, err := Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if c, err := Dial("tcp", l.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("third Dial: %v, want ECONNREFUSED", err)
	}
	a, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
}

func TestIPv6Loopback(t *testing.T) {
	l, err := Listen("tcp6", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	defer l.Close()
	errc := make(chan error, 1)
	go func() {
		a, err := l.Accept()
		if err == nil {
			_, err = a.Write([]byte("v6"))
			a.Close()
		}
		errc <- err
	}()
	c, err := Dial("tcp6", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "v6" {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if got := c.RemoteAddr().String(); got != l.Addr().String() {
		t.Fatalf("RemoteAddr %s, listener %s", got, l.Addr())
	}
}

// TestReadAfterCloseWithData: data that arrived is not handed out after
// Close.
func TestReadAfterCloseWithData(t *testing.T) {
	c1, c2, stop := pipe(t)
	defer stop()
	if _, err := c1.Write([]byte("unread")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(c2, b); err != nil { // the rest is here now
		t.Fatal(err)
	}
	c2.Close()
	if n, err := c2.Read(b); n != 0 || !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Read after Close = %d, %v", n, err)
	}
}
