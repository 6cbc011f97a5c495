package rsocket

import (
	"flag"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Benchmarks: rsocket against Go's TCP net.Conn on loopback, measured in
// the same run (BENCHMARKS.md, section "rsocket"). -rsbench.sizes picks the
// message sizes.
var benchSizes = flag.String("rsbench.sizes", "64,4096,1048576", "message sizes of the rsocket benchmarks")

func sizes(b *testing.B) []int {
	var out []int
	for _, f := range strings.Split(*benchSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("-rsbench.sizes: %q", f)
		}
		out = append(out, n)
	}
	return out
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.Itoa(n>>20) + "MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}

// benchPair returns a connected pair of the implementation impl
// ("rsocket", "rsocket-1MiB" or "tcp").
func benchPair(b *testing.B, impl string) (c1, c2 net.Conn, stop func()) {
	b.Helper()
	switch impl {
	case "rsocket":
		x, y, s := pipe(b)
		return x, y, s
	case "rsocket-1MiB": // rstream's buffers: SO_SNDBUF/SO_RCVBUF 512 KiB, doubled
		x, y, s := pipe(b, WithRecvBuffer(1<<20), WithSendBuffer(1<<20))
		return x, y, s
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		ch <- c
	}()
	d, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	a := <-ch
	return d, a, func() { d.Close(); a.Close(); l.Close() }
}

// BenchmarkPingPong measures the round trip of an n-byte message and its
// echo (Write, then io.ReadFull of the echo), reporting the p50 and p99
// round trip besides the mean. rsocket runs with rsockets' default buffers
// (128 KiB) and with rstream's (1 MiB).
func BenchmarkPingPong(b *testing.B) {
	for _, n := range sizes(b) {
		for _, impl := range []string{"rsocket", "rsocket-1MiB", "tcp"} {
			b.Run("size="+sizeName(n)+"/impl="+impl, func(b *testing.B) {
				c1, c2, stop := benchPair(b, impl)
				defer stop()
				go func() { // the echo
					buf := make([]byte, n)
					for {
						if _, err := io.ReadFull(c2, buf); err != nil {
							return
						}
						if _, err := c2.Write(buf); err != nil {
							return
						}
					}
				}()
				buf := make([]byte, n)
				rtt := make([]time.Duration, 0, b.N)
				b.SetBytes(int64(2 * n))
				b.ResetTimer()
				for k := 0; k < b.N; k++ {
					t0 := time.Now()
					if _, err := c1.Write(buf); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(c1, buf); err != nil {
						b.Fatal(err)
					}
					rtt = append(rtt, time.Since(t0))
				}
				b.StopTimer()
				slices.Sort(rtt)
				b.ReportMetric(float64(rtt[len(rtt)/2].Nanoseconds())/1e3, "p50-us")
				b.ReportMetric(float64(rtt[len(rtt)*99/100].Nanoseconds())/1e3, "p99-us")
			})
		}
	}
}

// BenchmarkStream measures one-way streaming of n-byte writes: the
// receiver reads everything with a buffer of the same size (at least
// 64 KiB). rsocket runs with rsockets' default buffers (128 KiB) and with
// rstream's (1 MiB).
func BenchmarkStream(b *testing.B) {
	for _, n := range sizes(b) {
		for _, impl := range []string{"rsocket", "rsocket-1MiB", "tcp"} {
			b.Run("size="+sizeName(n)+"/impl="+impl, func(b *testing.B) {
				c1, c2, stop := benchPair(b, impl)
				defer stop()
				total := int64(b.N) * int64(n)
				done := make(chan error, 1)
				go func() {
					buf := make([]byte, max(n, 64<<10))
					var got int64
					for got < total {
						k, err := c2.Read(buf)
						got += int64(k)
						if err != nil {
							done <- err
							return
						}
					}
					done <- nil
				}()
				buf := make([]byte, n)
				b.SetBytes(int64(n))
				b.ResetTimer()
				for k := 0; k < b.N; k++ {
					if _, err := c1.Write(buf); err != nil {
						b.Fatal(err)
					}
				}
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
