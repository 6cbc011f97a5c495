package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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
			time.Sleep(300 * time.Millisecond) // let it listen
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

func TestNoServer(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the SIDR retries (7.75 s)")
	}
	cli, out := udaddy(t, "-s", "127.0.0.1", "-port", freePort(t))
	err := cli.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v\n%s", err, out)
	}
	want := lines("udaddy: starting client", "udaddy: connecting",
		"udaddy: event: RDMA_CM_EVENT_UNREACHABLE, error: -110", "test complete", "return status -110")
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out, want)
	}
}

func TestErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-s", "127.0.0.1", "-S", "70000"}, "udaddy: message_size 70000 is larger than active mtu"},
		{[]string{"-x"}, "usage:"},
		{[]string{"-b", "192.0.2.254"}, "udaddy: bind address failed:"},
		{[]string{"-s", "no-such-host.invalid"}, "getaddrinfo"},
	} {
		cmd, out := udaddy(t, c.args...)
		err := cmd.Wait()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("%v: exit %v\n%s", c.args, err, out)
		}
		if !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: output %q, want %q", c.args, out, c.want)
		}
	}
}
