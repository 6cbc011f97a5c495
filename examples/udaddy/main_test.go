package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmrt/cmrt/examples/internal/tooltest"
)

// The test binary doubles as udaddy: with runEnv set it runs main.
const runEnv = "CMRT_UDADDY_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// udaddy starts the program with args.
func udaddy(t *testing.T, args ...string) (*exec.Cmd, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Args[0] = "udaddy"
	cmd.Env = append(os.Environ(), runEnv+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, &out
}

func freePort(t *testing.T) string {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return strconv.Itoa(c.LocalAddr().(*net.UDPAddr).Port)
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func lines(s ...string) string { return strings.Join(s, "\n") + "\n" }

func TestServerClient(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"ipoib-3conns", []string{"-P", "ipoib", "-c", "3", "-C", "5", "-S", "1000"}},
		{"ps-number-tos", []string{"-p", "0x111", "-t", "0x20", "-S", "1", "-C", "1"}},
		{"no-messages", []string{"-C", "0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := freePort(t)
			srv, sout := udaddy(t, append([]string{"-b", "127.0.0.1", "-port", port}, c.args...)...)
			tooltest.WaitBoundUDP(t, mustAtoi(t, port)) // listen follows the bind
			cli, cout := udaddy(t, append([]string{"-s", "127.0.0.1", "-port", port}, c.args...)...)
			if err := cli.Wait(); err != nil {
				t.Fatalf("client: %v\n%s", err, cout)
			}
			if err := srv.Wait(); err != nil {
				t.Fatalf("server: %v\n%s", err, sout)
			}
			wantCli := lines("udaddy: starting client", "udaddy: connecting", "initiating data transfers",
				"receiving data transfers", "data transfers complete", "test complete", "return status 0")
			wantSrv := lines("udaddy: starting server", "receiving data transfers", "sending replies",
				"data transfers complete", "test complete", "return status 0")
			if c.name == "no-messages" {
				wantCli = lines("udaddy: starting client", "udaddy: connecting", "test complete", "return status 0")
				wantSrv = lines("udaddy: starting server", "test complete", "return status 0")
			}
			if cout.String() != wantCli {
				t.Errorf("client output:\n%s\nwant:\n%s", cout, wantCli)
			}
			if sout.String() != wantSrv {
				t.Errorf("server output:\n%s\nwant:\n%s", sout, wantSrv)
			}
		})
	}
}

// TestNoServer: nothing holds the port, the host says so at once (ICMP port
// unreachable) and the connect is UNREACHABLE with status 1
// (IB_SIDR_UNSUPPORTED), as udaddy reports it on the kernel's rdma_cm when
// no server listens.
func TestNoServer(t *testing.T) {
	cli, out := udaddy(t, "-s", "127.0.0.1", "-port", freePort(t))
	err := cli.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 { // the status, 1, & 0xff
		t.Fatalf("exit: %v\n%s", err, out)
	}
	want := lines("udaddy: starting client", "udaddy: connecting",
		"udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: 1", "test complete", "return status 1")
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
}

// exec runs the program as argv0 with args to its end.
func execAs(t *testing.T, argv0 string, env []string, args ...string) (rc int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Args[0] = argv0
	cmd.Env = append(append(os.Environ(), runEnv+"=1"), env...)
	var out, errs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errs
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errs.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errs.String()
}

var mtuRE = regexp.MustCompile(`active mtu \d+`)

const usageText = "\t[-s server_address]\n\t[-b bind_address]\n\t[-f address_format]\n\t    name, ip, ipv6, or gid\n" +
	"\t[-P port_space]\n\t    udp or ipoib\n\t[-c connections]\n\t[-C message_count]\n\t[-S message_size]\n" +
	"\t[-t type_of_service]\n\t[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]\n" +
	"\t[-port rdma_cm_port (cmrt extension, default 7174)]\n"

// Failures print what udaddy.c prints (stdout; getopt's and perror's
// lines on stderr, perror's with cmrt's account) and exit with the C
// program's status.
func TestErrors(t *testing.T) {
	port := freePort(t)
	for _, c := range []struct {
		argv0          string
		env            []string
		args           []string
		rc             int
		stdout, stderr string // stdout exactly; stderr's prefix ("" exactly)
	}{
		{"udaddy", nil, []string{"-h"}, 1, "usage: udaddy\n" + usageText, "udaddy: invalid option -- 'h'\n"},
		{"./udaddy", nil, []string{"-port"}, 1, "usage: ./udaddy\n" + usageText, "./udaddy: option '-port' requires an argument\n"},
		{"/usr/bin/udaddy", nil, []string{"-s"}, 1, "usage: /usr/bin/udaddy\n" + usageText, "/usr/bin/udaddy: option requires an argument -- 's'\n"},
		{"/tmp/go-build42/b001/exe/udaddy", nil, []string{"-x"}, 1, "usage: udaddy\n" + usageText, "udaddy: invalid option -- 'x'\n"},
		{"udaddy", nil, []string{"-s", "127.0.0.1", "-S", "70000", "-port", port}, 234, // -EINVAL
			lines("udaddy: starting client", "udaddy: connecting", "udaddy: message_size 70000 is larger than active mtu N",
				"test complete", "return status -22"), ""},
		{"udaddy", nil, []string{"-b", "192.0.2.254", "--port=" + port}, 255,
			lines("udaddy: starting server", "test complete", "return status -1"),
			"udaddy: bind address failed: Cannot assign requested address (cmrt: "},
		{"udaddy", nil, []string{"-s", "no-such-host.invalid"}, 254,
			lines("udaddy: starting client", "udaddy: getaddrinfo error: Name or service not known", "test complete", "return status -2"), ""},
		{"udaddy", []string{"CMRT_FABRIC=bogus"}, nil, 1, "", "No RDMA devices were detected (cmrt: create_event_channel: no fabric CMRT_FABRIC=\"bogus\""},
	} {
		rc, stdout, stderr := execAs(t, c.argv0, c.env, c.args...)
		stdout = mtuRE.ReplaceAllString(stdout, "active mtu N") // the loopback's MTU less the headers
		if rc != c.rc || stdout != c.stdout || !strings.HasPrefix(stderr, c.stderr) || (c.stderr == "" && stderr != "") {
			t.Errorf("%s %q: exit %d, want %d\nstdout %q\nwant   %q\nstderr %q\nwant   %q...", c.argv0, c.args, rc, c.rc, stdout, c.stdout, stderr, c.stderr)
		}
	}
}
