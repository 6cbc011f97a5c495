package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cmrt/cmrt/examples/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

// server starts the program as a server on a free loopback port and
// returns its address and a stop function that waits for it to end.
func server(t testing.TB, extra ...string) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	rc := make(chan int, 1)
	out, errs := &tooltest.Buffer{}, &tooltest.Buffer{}
	go func() { rc <- run(ctx, append([]string{"-b", "127.0.0.1", "-p", "0"}, extra...), out, errs, ready) }()
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

func TestUnaryAndStreaming(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"one connection", []string{"-n", "200", "-S", "100"}},
		{"large messages", []string{"-n", "20", "-S", "1000000"}},
		{"many connections", []string{"-c", "64", "-n", "128", "-S", "64"}},
		{"tcp", []string{"-T", "s", "-c", "4", "-n", "100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var srvArgs []string
			if tc.args[0] == "-T" {
				srvArgs = tc.args[:2]
			}
			addr, stop := server(t, srvArgs...)
			defer stop()
			host, port, _ := net.SplitHostPort(addr)
			out, errs := &tooltest.Buffer{}, &tooltest.Buffer{}
			if rc := run(context.Background(), append([]string{"-s", host, "-p", port}, tc.args...), out, errs, nil); rc != 0 {
				t.Fatalf("client exit %d: %s %s", rc, out, errs)
			}
			if !strings.Contains(out.String(), "unary: ") || !strings.Contains(out.String(), "stream: ") {
				t.Fatalf("output %q", out)
			}
		})
	}
}

// BenchmarkUnary measures gRPC unary calls of 64 bytes, one at a time on
// one connection (-benchtime sets the count), over rsockets and over TCP
// in the same run; it reports requests/s.
func BenchmarkUnary(b *testing.B) {
	for _, impl := range []string{"rsocket", "tcp"} {
		b.Run("impl="+impl, func(b *testing.B) {
			var extra []string
			c := config{}
			if impl == "tcp" {
				extra, c.tcp = []string{"-T", "s"}, true
			}
			addr, stop := server(b, extra...)
			defer stop()
			cc, err := newClient(c, addr)
			if err != nil {
				b.Fatal(err)
			}
			defer cc.Close()
			in, out := wrapperspb.Bytes(payload(0, 64)), new(wrapperspb.BytesValue)
			ctx := context.Background()
			if err := cc.Invoke(ctx, unaryMethod, in, out); err != nil { // connect
				b.Fatal(err)
			}
			b.ResetTimer()
			t0 := time.Now()
			for k := 0; k < b.N; k++ {
				if err := cc.Invoke(ctx, unaryMethod, in, out, grpc.WaitForReady(true)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "req/s")
		})
	}
}
