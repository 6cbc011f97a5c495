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
	go func() { ch <- run(argv(args...), out, out) }()
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
			crc := run(argv(append([]string{"-s", "127.0.0.1", "-p", port}, tc.args...)...), cout, cout)
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

// argv is the command line of the program run as "ucmatose".
func argv(args ...string) []string { return append([]string{"ucmatose"}, args...) }

const usageText = "\t[-s server_address]\n\t[-b bind_address]\n\t[-f address_format]\n\t    name, ip, ipv6, or gid\n" +
	"\t[-P port_space]\n\t    tcp or ib\n\t[-c connections]\n\t[-C message_count]\n\t[-S message_size]\n" +
	"\t[-t type_of_service]\n\t[-p port_number]\n\t[-m(igrate)]\n\t[-a ack_timeout]\n"

// Failures print what cmatose.c prints (stdout) and perror's words with
// cmrt's account (stderr), and exit with the C program's status.
func TestErrors(t *testing.T) {
	port := strconv.Itoa(tooltest.FreePorts(t, 1))
	for _, c := range []struct {
		name           string
		env            string // CMRT_FABRIC
		args           []string
		rc             int
		stdout, stderr string // stdout exactly; stderr's prefix ("" exactly)
	}{
		{"no-server", "", []string{"-s", "127.0.0.1", "-p", port}, 145,
			"cmatose: starting client\ncmatose: connecting\ncmatose: event: RDMA_CM_EVENT_REJECTED, error: -111\n" +
				"test complete\nreturn status -111\n", ""},
		{"bad-option", "", []string{"-h"}, 1, "usage: ucmatose\n" + usageText, "ucmatose: invalid option -- 'h'\n"},
		{"no-argument", "", []string{"-p"}, 1, "usage: ucmatose\n" + usageText, "ucmatose: option requires an argument -- 'p'\n"},
		{"unresolvable", "", []string{"-s", "no-such-host.invalid"}, 254,
			"cmatose: starting client\ncmatose: getaddrinfo error: Name or service not known\ntest complete\nreturn status -2\n", ""},
		{"bad-service", "", []string{"-p", "no-such-service"}, 248,
			"cmatose: starting server\ncmatose: getrdmaaddr error: Servname not supported for ai_socktype\ntest complete\nreturn status -8\n", ""},
		{"bind-failure", "", []string{"-b", "192.0.2.254", "-p", port}, 255,
			"cmatose: starting server\ntest complete\nreturn status -1\n",
			"cmatose: bind address failed: Cannot assign requested address (cmrt: "},
		{"no-fabric", "bogus", nil, 1, "", `No RDMA devices were detected (cmrt: create_event_channel: no fabric CMRT_FABRIC="bogus" (registered: "kernel" (github.com/cmrt/cmrt/fabric/kernel), "soft" (github.com/cmrt/cmrt/fabric/soft)): no such device)` + "\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("CMRT_FABRIC", c.env)
			var out, errs tooltest.Buffer
			rc := run(argv(c.args...), &out, &errs)
			if rc != c.rc || out.String() != c.stdout || !strings.HasPrefix(errs.String(), c.stderr) ||
				(c.stderr == "" && errs.String() != "") {
				t.Errorf("exit %d, want %d\nstdout %q\nwant   %q\nstderr %q\nwant   %q...", rc, c.rc, out.String(), c.stdout, errs.String(), c.stderr)
			}
		})
	}
	checkLeaks(t)
}

// The program shows argv[0] as it was invoked, as C does.
func TestArgv0(t *testing.T) {
	bin := tooltest.Build(t, "github.com/cmrt/cmrt/examples/ucmatose")
	p := tooltest.StartAs(t, bin, "./ucmatose", "-x")
	if rc := p.Wait(); rc != 1 || !strings.HasPrefix(p.Stdout.String(), "usage: ./ucmatose\n\t[-s server_address]\n") ||
		p.Stderr.String() != "./ucmatose: invalid option -- 'x'\n" {
		t.Errorf("exit %d\nstdout %q\nstderr %q", rc, p.Stdout, p.Stderr)
	}
}
