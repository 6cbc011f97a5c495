package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cmrt/cmrt/examples/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

func server(t *testing.T) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	rc := make(chan int, 1)
	out, errs := &tooltest.Buffer{}, &tooltest.Buffer{}
	go func() { rc <- run(ctx, []string{"-b", "127.0.0.1", "-p", "0"}, out, errs, ready) }()
	select {
	case addr = <-ready:
	case code := <-rc:
		cancel()
		t.Fatalf("server exit %d: %s %s", code, out, errs)
	}
	return addr, func() {
		cancel()
		select {
		case code := <-rc:
			if code != 0 {
				t.Errorf("server exit %d: %s", code, errs)
			}
		case <-time.After(30 * time.Second):
			t.Error("server did not stop")
		}
	}
}

func TestEcho(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"small", []string{"-n", "50", "-S", "10"}},
		{"large bodies", []string{"-n", "10", "-S", "3000000"}},
		{"many connections", []string{"-c", "50", "-n", "200", "-S", "1000"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, stop := server(t)
			defer stop()
			host, port, _ := net.SplitHostPort(addr)
			out, errs := &tooltest.Buffer{}, &tooltest.Buffer{}
			if rc := run(context.Background(), append([]string{"-s", host, "-p", port}, tc.args...), out, errs, nil); rc != 0 {
				t.Fatalf("client exit %d: %s %s", rc, out, errs)
			}
			if !strings.HasPrefix(out.String(), "hello over rsocket from ") || !strings.Contains(out.String(), "echo: ") {
				t.Fatalf("output %q", out)
			}
		})
	}
}

// TestKeepAliveReuse: the client's Transport reuses its rsocket for
// sequential requests, and the server sees the client's address.
func TestKeepAliveReuse(t *testing.T) {
	addr, stop := server(t)
	defer stop()
	hc := newClient(1)
	defer hc.CloseIdleConnections()
	var first string
	for k := 0; k < 5; k++ {
		resp, err := hc.Get("http://" + addr + "/hello")
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%d %q %v", resp.StatusCode, b, err)
		}
		if k == 0 {
			first = string(b)
		} else if string(b) != first {
			t.Fatalf("request %d on another connection: %q, first %q", k, b, first)
		}
	}
}
