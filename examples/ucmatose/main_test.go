package main

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/examples/internal/tool"
	"github.com/cmrt/cmrt/examples/internal/tooltest"
	"github.com/cmrt/cmrt/fabric/soft"
)

// serve runs the server in the background until it prints its start line.
func serve(t *testing.T, args ...string) (out *tooltest.Buffer, rc <-chan int) {
	t.Helper()
	out = &tooltest.Buffer{}
	ch := make(chan int, 1)
	go func() { ch <- run(args, out, out) }()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "starting server") {
		if time.Now().After(deadline) {
			t.Fatalf("server did not start: %s", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	tooltest.WaitListening(t, tooltest.PortArg(t, args)) // listen follows the line
	return out, ch
}

func waitRC(t *testing.T, rc <-chan int, out *tooltest.Buffer) int {
	t.Helper()
	select {
	case v := <-rc:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("program did not end: %s", out.String())
	}
	return -1
}

const serverOut = `cmatose: starting server
initiating data transfers
completing sends
receiving data transfers
data transfers complete
cmatose: disconnecting
disconnected
test complete
return status 0
`

const clientOut = `cmatose: starting client
cmatose: connecting
receiving data transfers
sending replies
data transfers complete
test complete
return status 0
`

func checkLeaks(t *testing.T) {
	soft.Default().Quiesce()
	goleak.VerifyNone(t)
}

func TestServerClient(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{name: "default"},
		{name: "4x50x70000-migrate", args: []string{"-c", "4", "-C", "50", "-S", "70000", "-m"}},
		{name: "crc-p2p-write", env: map[string]string{tool.EnvSoftCRC: "1", tool.EnvSoftP2P: "write"}},
		{name: "p2p-read-ib", env: map[string]string{tool.EnvSoftP2P: "read"}, args: []string{"-P", "ib", "-t", "0x10", "-a", "14"}},
		{name: "no-messages", args: []string{"-C", "0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			port := strconv.Itoa(tooltest.FreePorts(t, 1))
			sargs := append([]string{"-b", "127.0.0.1", "-p", port}, tc.args...)
			sout, src := serve(t, sargs...)
			cout := &tooltest.Buffer{}
			crc := run(append([]string{"-s", "127.0.0.1", "-p", port}, tc.args...), cout, cout)
			srv := waitRC(t, src, sout)
			wantS, wantC := serverOut, clientOut
			if strings.Contains(tc.name, "migrate") {
				wantS = strings.Replace(wantS, "cmatose: disconnecting", "migrating to new event channel\ncmatose: disconnecting", 1)
				wantC = strings.Replace(wantC, "test complete", "migrating to new event channel\ntest complete", 1)
			}
			if tc.name == "no-messages" {
				wantS = "cmatose: starting server\ncmatose: disconnecting\ndisconnected\ntest complete\nreturn status 0\n"
				wantC = "cmatose: starting client\ncmatose: connecting\ntest complete\nreturn status 0\n"
			}
			if crc != 0 || cout.String() != wantC {
				t.Errorf("client rc %d, output:\n%s\nwant:\n%s", crc, cout.String(), wantC)
			}
			if srv != 0 || sout.String() != wantS {
				t.Errorf("server rc %d, output:\n%s\nwant:\n%s", srv, sout.String(), wantS)
			}
		})
	}
	checkLeaks(t)
}

func TestErrors(t *testing.T) {
	t.Run("no-server", func(t *testing.T) {
		out := &tooltest.Buffer{}
		rc := run([]string{"-s", "127.0.0.1", "-p", strconv.Itoa(tooltest.FreePorts(t, 1))}, out, out)
		if rc == 0 || !strings.Contains(out.String(), "cmatose: event: RDMA_CM_EVENT_REJECTED, error: -111") ||
			!strings.HasSuffix(out.String(), "return status -111\n") {
			t.Fatalf("rc %d:\n%s", rc, out.String())
		}
	})
	t.Run("bad-option", func(t *testing.T) {
		out := &tooltest.Buffer{}
		if rc := run([]string{"-x"}, out, out); rc != 1 || !strings.Contains(out.String(), "usage: ucmatose") {
			t.Fatalf("rc %d:\n%s", rc, out.String())
		}
	})
	t.Run("unresolvable", func(t *testing.T) {
		out := &tooltest.Buffer{}
		if rc := run([]string{"-s", "no-such-host.invalid"}, out, out); rc == 0 || !strings.Contains(out.String(), "getaddrinfo error") {
			t.Fatalf("rc %d:\n%s", rc, out.String())
		}
	})
	checkLeaks(t)
}
