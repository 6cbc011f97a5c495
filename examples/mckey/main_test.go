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
	if code != 1 || !strings.Contains(out, "mckey: failed polling CQ") || !strings.HasSuffix(out, "return status -110\n") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}

func TestErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-M", "ff05::1"}, "unmapped multicast address requires binding to source address"},
		{[]string{"-M", "ff05::1", "-b", "::1"}, "not supported"},
		{[]string{"-s"}, "usage:"},
		{[]string{"-m", "239.1.1.1", "-b", "192.0.2.254"}, "mckey: addr bind failure:"},
		{[]string{"-m", "no-such-host.invalid"}, "getaddrinfo failed"},
	}
	for _, c := range cases {
		out, code := mckey(t, c.args...).finish()
		if code != 1 || !strings.Contains(out, c.want) {
			t.Errorf("%v: exit %d, output:\n%s\nwant %q", c.args, code, out, c.want)
		}
	}
}
