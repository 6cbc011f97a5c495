package main

import (
	"strconv"
	"strings"
	"testing"

	"github.com/cmrt/cmrt/examples/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

// TestGoGo runs a Go server and a Go client as programs: riostream watches
// memory the fabric writes, which the race detector (the tests' build)
// would rightly report, so the pair runs as a separate build without it.
func TestGoGo(t *testing.T) {
	bin := tooltest.Build(t, "github.com/cmrt/cmrt/examples/riostream")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-S", "64", "-C", "1", "-I", "200", "-T", "v"}, "custom    64      1       200     25k"},
		{[]string{"-S", "4096", "-C", "30", "-T", "v"}, "custom    4k      30      1       240k"},
		{[]string{"-S", "1048576", "-C", "3", "-T", "v"}, "custom    1m      3       1       6m"},
	} {
		t.Run(tc.args[1], func(t *testing.T) {
			port := strconv.Itoa(tooltest.FreePorts(t, 1))
			args := append([]string{"-p", port}, tc.args...)
			srv := tooltest.Start(t, bin, append([]string{"-b", "127.0.0.1"}, args...)...)
			tooltest.WaitListening(t, tooltest.PortArg(t, args))
			cli := tooltest.Start(t, bin, append([]string{"-s", "127.0.0.1"}, args...)...)
			if rc := cli.Wait(); rc != 0 {
				t.Fatalf("client exit %d: %s %s", rc, cli.Stdout, cli.Stderr)
			}
			if rc := srv.Wait(); rc != 0 {
				t.Fatalf("server exit %d: %s %s", rc, srv.Stdout, srv.Stderr)
			}
			for _, out := range []string{srv.Stdout.String(), cli.Stdout.String()} {
				lines := strings.Split(strings.TrimSpace(out), "\n")
				if len(lines) != 2 || !strings.HasPrefix(lines[1], tc.want) {
					t.Fatalf("output %q, want a line starting %q", out, tc.want)
				}
			}
		})
	}
}

func TestUsage(t *testing.T) {
	out, errs := &tooltest.Buffer{}, &tooltest.Buffer{}
	if rc := run([]string{"-T", "s"}, out, errs); rc != 1 || !strings.Contains(out.String(), "usage: riostream") {
		t.Fatalf("rc %d, %q", rc, out)
	}
}
