package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/examples/internal/tooltest"
	"github.com/cmrt/cmrt/fabric/soft"
)

// pingData is what rping prints for ping n of size bytes with -v.
func pingData(n, size int) string {
	b := []byte(fmt.Sprintf(rpingMsgFmt, n))
	c := byte(65 + n%58)
	for len(b) < size-1 {
		b = append(b, c)
		if c++; c > 122 {
			c = 65
		}
	}
	return string(b)
}

// server starts an rping server; its stdout and stderr are collected
// apart.
func server(ctx context.Context, t *testing.T, args ...string) (out, errs *tooltest.Buffer, rc <-chan int) {
	t.Helper()
	out, errs = &tooltest.Buffer{}, &tooltest.Buffer{}
	ch := make(chan int, 1)
	go func() { ch <- runContext(ctx, append([]string{"-s", "-d"}, args...), out, errs) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "rdma_listen") {
		if time.Now().After(deadline) {
			t.Fatalf("server did not start: %s %s", out.String(), errs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	tooltest.WaitListening(t, tooltest.PortArg(t, args)) // listen follows the line
	return out, errs, ch
}

func wait(t *testing.T, rc <-chan int) int {
	t.Helper()
	select {
	case v := <-rc:
		return v
	case <-time.After(30 * time.Second):
		t.Fatal("server did not end")
	}
	return -1
}

func TestPing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   map[string]string
		count int
		size  int
	}{
		{name: "default", count: 3, size: 64},
		{name: "large-crc", count: 5, size: 65535, env: map[string]string{tool.EnvSoftCRC: "1"}},
		{name: "min-p2p", count: 2, size: rpingMinBufSize, env: map[string]string{tool.EnvSoftP2P: "read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			port := strconv.Itoa(tooltest.FreePorts(t, 1))
			args := []string{"-a", "127.0.0.1", "-p", port, "-C", strconv.Itoa(tc.count), "-S", strconv.Itoa(tc.size), "-v"}
			sout, serr, src := server(context.Background(), t, args...)
			cout, cerr := &tooltest.Buffer{}, &tooltest.Buffer{}
			crc := run(append([]string{"-c", "-V"}, args...), cout, cerr)
			srv := wait(t, src)
			var want, wantS strings.Builder
			for n := 0; n < tc.count; n++ {
				fmt.Fprintf(&want, "ping data: %s\n", pingData(n, tc.size))
				fmt.Fprintf(&wantS, "server ping data: %s\n", pingData(n, tc.size))
			}
			if crc != 0 || cout.String() != want.String() || cerr.String() != "client DISCONNECT EVENT...\n" {
				t.Errorf("client rc %d\nstdout:\n%s\nstderr:\n%s\nwant:\n%s", crc, cout.String(), cerr.String(), want.String())
			}
			var got strings.Builder
			for _, l := range strings.SplitAfter(sout.String(), "\n") {
				if strings.HasPrefix(l, "server ping data: ") {
					got.WriteString(l)
				}
			}
			if srv != 0 || got.String() != wantS.String() ||
				serr.String() != "server DISCONNECT EVENT...\nwait for RDMA_READ_ADV state 10\n" {
				t.Errorf("server rc %d\nstdout:\n%s\nstderr:\n%s", srv, sout.String(), serr.String())
			}
		})
	}
	soft.Default().Quiesce()
	goleak.VerifyNone(t)
}

// TestPersistent serves two clients, one after the other, then stops.
func TestPersistent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	port := strconv.Itoa(tooltest.FreePorts(t, 1))
	_, serr, src := server(ctx, t, "-P", "-a", "127.0.0.1", "-p", port)
	for k := 0; k < 2; k++ {
		out, errs := &tooltest.Buffer{}, &tooltest.Buffer{}
		if rc := run([]string{"-c", "-a", "127.0.0.1", "-p", port, "-C", "2", "-V"}, out, errs); rc != 0 {
			t.Fatalf("client %d: rc %d %s %s", k, rc, out.String(), errs.String())
		}
	}
	cancel()
	if rc := wait(t, src); rc != 0 {
		t.Fatalf("persistent server rc %d: %s", rc, serr.String())
	}
	soft.Default().Quiesce()
	goleak.VerifyNone(t)
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		rc   int
		msg  string
	}{
		{[]string{"-c", "-a", "127.0.0.1", "-p", strconv.Itoa(tooltest.FreePorts(t, 1)), "-C", "1"}, 255, "cma event RDMA_CM_EVENT_REJECTED, error -111"},
		{[]string{"-v"}, 22, "rping -s [-vVd]"},
		{[]string{"-s", "-S", "10"}, 22, "Invalid size 10"},
		{[]string{"-s", "-C", "-1"}, 22, "Invalid count -1"},
		{[]string{"-s", "-x"}, 22, "rping -c"},
		{[]string{"-c", "-a", "no-such-host.invalid"}, 254, "getaddrinfo failed (Name or service not known) - invalid hostname or IP address\n"},
		{[]string{"-s", "-a", "192.0.2.254", "-p", "7174"}, 255, "rdma_bind_addr: Cannot assign requested address (cmrt: "},
	} {
		out := &tooltest.Buffer{}
		if rc := run(tc.args, out, out); rc != tc.rc || !strings.Contains(out.String(), tc.msg) {
			t.Errorf("%v: rc %d, want %d with %q:\n%s", tc.args, rc, tc.rc, tc.msg, out.String())
		}
	}
	// No fabric: no event channel, and rping returns the errno.
	t.Setenv("CMRT_FABRIC", "bogus")
	var out, errs tooltest.Buffer
	if rc := run([]string{"-s"}, &out, &errs); rc != 19 || out.String() != "" ||
		!strings.HasPrefix(errs.String(), "No RDMA devices were detected (cmrt: create_event_channel: no fabric CMRT_FABRIC=\"bogus\"") {
		t.Errorf("no fabric: rc %d, want 19 (ENODEV)\nstdout %q\nstderr %q", rc, out.String(), errs.String())
	}
	soft.Default().Quiesce()
	goleak.VerifyNone(t)
}
