package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmrt/cmrt/examples/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

// pair runs a server and a client with the same arguments and returns
// their outputs after checking both succeeded.
func pair(t *testing.T, args ...string) (srv, cli string) {
	t.Helper()
	port := strconv.Itoa(tooltest.FreePorts(t, 1))
	args = append([]string{"-p", port}, args...)
	sout, serr := &tooltest.Buffer{}, &tooltest.Buffer{}
	src := make(chan int, 1)
	go func() { src <- run(append([]string{"-b", "127.0.0.1"}, args...), sout, serr) }()
	tooltest.WaitListening(t, tooltest.PortArg(t, args))
	cout, cerr := &tooltest.Buffer{}, &tooltest.Buffer{}
	if rc := run(append([]string{"-s", "127.0.0.1"}, args...), cout, cerr); rc != 0 {
		t.Fatalf("client exit %d: %s %s", rc, cout, cerr)
	}
	select {
	case rc := <-src:
		if rc != 0 {
			t.Fatalf("server exit %d: %s %s", rc, sout, serr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("server did not end")
	}
	return sout.String(), cout.String()
}

// resultLines returns the table lines after the header.
func resultLines(t *testing.T, out string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "name      bytes   xfers   iters   total       time     Gb/sec    usec/xfer") {
		t.Fatalf("no table: %q", out)
	}
	return lines[1:]
}

func TestCustomVerified(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // start of the result line
	}{
		{"64B", []string{"-S", "64", "-C", "50", "-T", "v"}, "custom    64      50      1       6.2k"},
		{"1MiB", []string{"-S", "1048576", "-C", "3", "-I", "2", "-T", "v"}, "custom    1m      3       2       12m"},
		{"odd-inline0", []string{"-S", "10000", "-C", "20", "-i", "0", "-B", "4096", "-T", "v"}, "custom    9.7k    20      1       390k"},
		{"tcp", []string{"-S", "4096", "-C", "10", "-T", "s", "-T", "v"}, "custom    4k      10      1       80k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli := pair(t, tc.args...)
			for _, out := range []string{srv, cli} {
				lines := resultLines(t, out)
				if len(lines) != 1 || !strings.HasPrefix(lines[0], tc.want) {
					t.Fatalf("result %q, want a line starting %q", lines, tc.want)
				}
			}
		})
	}
}

// TestDefaultSizes runs rstream's default tests (latency, then bandwidth on
// a second connection, 64 B to 1 MiB), over TCP sockets to keep it short:
// the rsocket path of the same code is what TestCustomVerified covers.
func TestDefaultSizes(t *testing.T) {
	if testing.Short() {
		t.Skip("long")
	}
	srv, cli := pair(t, "-T", "s")
	for _, out := range []string{srv, cli} {
		var names []string
		for _, l := range resultLines(t, out) {
			names = append(names, strings.Fields(l)[0])
		}
		if got := strings.Join(names, " "); got != "64_lat 4k_lat 64k_lat 1m_lat 64_bw 4k_bw 64k_bw 1m_bw" {
			t.Fatalf("tests run: %s", got)
		}
	}
}

func TestUsage(t *testing.T) {
	out, errs := &tooltest.Buffer{}, &tooltest.Buffer{}
	if rc := run([]string{"-T", "x"}, out, errs); rc != 1 || !strings.Contains(out.String(), "usage: rstream") {
		t.Fatalf("rc %d, %q", rc, out)
	}
	if rc := run([]string{"-q"}, out, errs); rc != 1 || !strings.Contains(errs.String(), "invalid option -- 'q'") {
		t.Fatalf("rc %d, %q", rc, errs)
	}
}

func TestConnectRefused(t *testing.T) {
	port := strconv.Itoa(tooltest.FreePorts(t, 1))
	out, errs := &tooltest.Buffer{}, &tooltest.Buffer{}
	if rc := run([]string{"-s", "127.0.0.1", "-p", port, "-S", "64", "-C", "1"}, out, errs); rc != 1 ||
		!strings.HasPrefix(errs.String(), "rconnect: Connection refused") {
		t.Fatalf("rc %d, %q", rc, errs)
	}
}
