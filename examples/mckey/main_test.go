package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as mckey: with runEnv set it runs main.
const runEnv = "CMRT_MCKEY_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runEnv) != "" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type proc struct {
	cmd  *exec.Cmd
	out  *bufio.Scanner
	seen []string
}

func mckey(t *testing.T, args ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Args[0] = "mckey"
	cmd.Env = append(os.Environ(), runEnv+"=1")
	r, w := io.Pipe()
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait(); w.Close() }()
	return &proc{cmd: cmd, out: bufio.NewScanner(r)}
}

// until reads output lines up to one starting with prefix.
func (p *proc) until(t *testing.T, prefix string) {
	t.Helper()
	for p.out.Scan() {
		p.seen = append(p.seen, p.out.Text())
		if strings.HasPrefix(p.out.Text(), prefix) {
			return
		}
	}
	t.Fatalf("no %q in output:\n%s", prefix, strings.Join(p.seen, "\n"))
}

// finish reads the rest of the output and returns it all with the exit
// code.
func (p *proc) finish() (string, int) {
	for p.out.Scan() {
		p.seen = append(p.seen, p.out.Text())
	}
	for p.cmd.ProcessState == nil {
		time.Sleep(10 * time.Millisecond)
	}
	return strings.Join(p.seen, "\n") + "\n", p.cmd.ProcessState.ExitCode()
}

func group() string {
	return fmt.Sprintf("239.%d.%d.%d", 1+rand.IntN(250), rand.IntN(256), 1+rand.IntN(250))
}

func lines(s ...string) string { return strings.Join(s, "\n") + "\n" }

// A sender and three receivers, each a process.
func TestSenderAndReceivers(t *testing.T) {
	g := group()
	joined := "mckey: joined dgid: ::ffff:" + g + " mlid 0x12b8 sl 0"
	var recv []*proc
	for k := 0; k < 3; k++ {
		args := []string{"-m", g, "-b", "127.0.0.1", "-T", "30", "-C", "20", "-S", "500"}
		if k == 2 {
			args = append(args, "-c", "2") // two ids in one process
		}
		p := mckey(t, args...)
		p.until(t, joined)
		if k == 2 {
			p.until(t, joined)
		}
		recv = append(recv, p)
	}
	snd := mckey(t, "-m", g, "-b", "127.0.0.1", "-s", "-o", "-l", "-C", "20", "-S", "500")
	out, code := snd.finish()
	want := lines("mckey: starting client", "mckey: joining", joined, "initiating data transfers",
		"data transfers complete", "test complete", "return status 0")
	if code != 0 || out != want {
		t.Fatalf("sender exit %d, output:\n%s\nwant:\n%s", code, out, want)
	}
	for k, p := range recv {
		out, code := p.finish()
		want := lines("mckey: starting server", "mckey: joining", joined)
		if k == 2 {
			want += joined + "\n"
		}
		want += lines("receiving data transfers", "data transfers complete", "test complete", "return status 0")
		if code != 0 || out != want {
			t.Errorf("receiver %d exit %d, output:\n%s\nwant:\n%s", k, code, out, want)
		}
	}
}

func TestReceiverTimeout(t *testing.T) {
	p := mckey(t, "-m", group(), "-b", "127.0.0.1", "-T", "0.2", "-C", "3")
	out, code := p.finish()
	if code != 146 || !strings.Contains(out, "mckey: failed polling CQ") || !strings.HasSuffix(out, "return status -110\n") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

const usageText = "\t-m multicast_address\n\t[-M unmapped_multicast_address]\n\t replaces -m and requires -b\n" +
	"\t[-s(ender)]\n\t[-b bind_address]\n\t[-c connections]\n\t[-C message_count]\n\t[-S message_size]\n" +
	"\t[-p port_space - 0x111 for UDP (default), 0x2 for IPOIB]\n\t[-o join as a send-only full-member]\n" +
	"\t[-l join without multicast loopback]\n\t[-T seconds to wait for the messages (cmrt extension; 0: forever)]\n"

// Failures print what mckey.c prints (stdout; getopt's and perror's lines
// on stderr, perror's with cmrt's account) and exit with the C program's
// status.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		argv0          string
		env            []string
		args           []string
		rc             int
		stdout, stderr string // stdout exactly; stderr's prefix ("" exactly)
	}{
		{"mckey", nil, []string{"-h"}, 1, "usage: mckey\n" + usageText, "mckey: invalid option -- 'h'\n"},
		{"./mckey", nil, []string{"-m"}, 1, "usage: ./mckey\n" + usageText, "./mckey: option requires an argument -- 'm'\n"},
		{"/tmp/go-build7/b001/exe/mckey", nil, []string{"-s"}, 1, "usage: mckey\n" + usageText, ""},
		{"mckey", nil, []string{"-M", "ff05::1"}, 1, "unmapped multicast address requires binding to source address\n", ""},
		{"mckey", nil, []string{"-M", "ff05::1", "-b", "::1"}, 1, "mckey: unmapped (AF_IB) multicast addresses are not supported\n", ""},
		{"mckey", nil, []string{"-m", "239.1.1.1", "-b", "192.0.2.254"}, 255,
			lines("mckey: starting server", "mckey: joining", "test complete", "return status -1"),
			"mckey: addr bind failure: Cannot assign requested address (cmrt: "},
		{"mckey", nil, []string{"-m", "no-such-host.invalid"}, 254,
			lines("mckey: starting server", "getaddrinfo failed (Name or service not known) - invalid hostname or IP address",
				"test complete", "return status -2"), ""},
		{"mckey", []string{"CMRT_FABRIC=bogus"}, []string{"-m", "239.1.1.1"}, 1, "", "No RDMA devices were detected (cmrt: create_event_channel: no fabric CMRT_FABRIC=\"bogus\""},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, os.Args[0], c.args...)
		cmd.Args[0] = c.argv0
		cmd.Env = append(append(os.Environ(), runEnv+"=1"), c.env...)
		var out, errs strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errs
		err := cmd.Run()
		cancel()
		rc := 0
		if ee, ok := err.(*exec.ExitError); ok {
			rc = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if rc != c.rc || out.String() != c.stdout || !strings.HasPrefix(errs.String(), c.stderr) || (c.stderr == "" && errs.String() != "") {
			t.Errorf("%s %q: exit %d, want %d\nstdout %q\nwant   %q\nstderr %q\nwant   %q...", c.argv0, c.args, rc, c.rc, out.String(), c.stdout, errs.String(), c.stderr)
		}
	}
}
