package main

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cmrt/cmrt/examples/internal/tooltest"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

type result struct {
	rc             int
	stdout, stderr string
}

// start runs cmtime with args. Its result's stderr leaves out the
// progress lines of steps that ran past a second (a loaded machine: a
// make test under -race saw a cm connect step take longer), which the
// tests do not assert: TestProgress does.
func start(args ...string) <-chan result {
	done := make(chan result, 1)
	go func() {
		var out, errs tooltest.Buffer
		rc := run(append([]string{"cmtime"}, args...), &out, &errs)
		done <- result{rc, out.String(), progressRE.ReplaceAllString(errs.String(), "")}
	}()
	return done
}

// progressRE matches a progress line as progress.update writes it off a
// terminal.
var progressRE = regexp.MustCompile(`(?m)^cmtime: [a-z ]+: \d+/\d+ \(\d+%\)\n`)

func cmtime(args ...string) result { return <-start(args...) }

var rowRE = regexp.MustCompile(`^(.{13})  ((?: {0,9}\d+ ){5} {0,9}\d+)$`)

// skeleton replaces the numbers of the table rows with "#".
func skeleton(out string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if m := rowRE.FindStringSubmatch(strings.TrimSuffix(l, "\n")); m != nil {
			l = strings.TrimSpace(m[1]) + " #\n"
		}
		b.WriteString(l)
	}
	return b.String()
}

// tables parses the tables in out: for each, step -> the six columns.
func tables(t *testing.T, out string) []map[string][6]uint64 {
	t.Helper()
	var ts []map[string][6]uint64
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "step ") {
			ts = append(ts, map[string][6]uint64{})
			continue
		}
		m := rowRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var row [6]uint64
		for k, f := range strings.Fields(m[2]) {
			v, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				t.Fatalf("row %q: %v", l, err)
			}
			row[k] = v
		}
		ts[len(ts)-1][strings.TrimSpace(m[1])] = row
	}
	return ts
}

const header = "step             avg/iter  total(us)    us/conn    sum(us)    max(us)    min(us)\n"

// table is the skeleton of a table.
func table(kind string, conns, threads int) string {
	s := fmt.Sprintf("%-7s        %10d\nthreads        %10d\n", kind, conns, threads) + header
	for _, n := range stepNames {
		s += n + " #\n"
	}
	return s
}

func clientRun(conns int, bind, first bool) string {
	s := "\tCreating IDs\n"
	if bind {
		s += "\tBinding addresses\n"
	}
	s += "\tResolving addresses\n\tResolving routes\n\tCreating QPs\n"
	if first {
		s += allocating
	}
	s += "\tConnecting\n\tDisconnecting\n\tDestroying QPs\n\tDestroying IDs\n"
	return s
}

// allocating is the line of the first run with real QPs, which makes the
// completion queue they all share, as rdma-core's cmtime prints it.
const allocating = "\tAllocating verbs resources\n"

func TestServerClient(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		oob  int // -1: default (port+1), 0: none, 1: explicit
	}{
		{"defaults", []string{"-c", "20"}, -1},
		{"threads-mimic", []string{"-c", "20", "-n", "4", "-m", "300"}, -1},
		{"bind", []string{"-c", "10", "-b", "127.0.0.1", "-q", "77"}, -1},
		{"no-sync", []string{"-c", "10"}, 0},
		{"oob-port", []string{"-c", "5", "-r", "1", "-t", "500"}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := tooltest.FreePorts(t, 3)
			args := append([]string{"-p", strconv.Itoa(port)}, c.args...)
			wait := port + 1
			switch c.oob {
			case 0:
				args, wait = append(args, "-O", "0"), port
			case 1:
				args, wait = append(args, "-O", strconv.Itoa(port+2)), port+2
			}
			done := start(args...)
			tooltest.WaitListening(t, wait)
			cli := cmtime(append(args, "-s", "127.0.0.1")...)
			srv := <-done
			if cli.rc != 0 || srv.rc != 0 || cli.stderr != "" || srv.stderr != "" {
				t.Fatalf("client: exit %d\n%s%s\nserver: exit %d\n%s%s", cli.rc, cli.stdout, cli.stderr, srv.rc, srv.stdout, srv.stderr)
			}

			bind := c.name == "bind"
			n := strings.Join(c.args[1:2], "")
			conns, _ := strconv.Atoi(n)
			threads := 1
			if c.name == "threads-mimic" {
				threads = 4
			}
			qpTest := fmt.Sprintf("Connect (%d) QPs test\n", conns)
			acceptTest := fmt.Sprintf("Accept (%d) QPs test\n", conns)
			kind := "qp_conn"
			if c.name == "threads-mimic" {
				qpTest = fmt.Sprintf("Connect (%d) simulated QPs test (delay 300 us)\n", conns)
				acceptTest = fmt.Sprintf("Accept (%d) simulated QPs test (delay 300 us)\n", conns)
				kind = "cm_conn"
			}
			var wantCli, wantSrv string
			if c.oob == 0 {
				wantCli = qpTest + clientRun(conns, bind, true) + table(kind, conns, threads)
				wantSrv = acceptTest + "\tAccepting\n" + allocating + "\tDisconnecting\n" + table(kind, conns, threads)
			} else {
				// The warm-up creates real QPs, also before a simulated test.
				wantCli = "Client warmup\n" + clientRun(1, bind, true) +
					qpTest + clientRun(conns, bind, false) + table(kind, conns, threads) +
					fmt.Sprintf("Connect (%d) test - no QPs\n", conns) + clientRun(conns, bind, false) + table("cm_conn", conns, threads)
				wantSrv = "Server warmup\n\tAccepting\n" + allocating + "\tDisconnecting\n" +
					acceptTest + "\tAccepting\n\tDisconnecting\n" + table(kind, conns, threads) +
					fmt.Sprintf("Accept (%d) test - no QPs\n", conns) + "\tAccepting\n\tDisconnecting\n" + table("cm_conn", conns, threads)
			}
			if got := skeleton(cli.stdout); got != wantCli {
				t.Errorf("client output:\n%s\nskeleton:\n%s\nwant:\n%s", cli.stdout, got, wantCli)
			}
			if got := skeleton(srv.stdout); got != wantSrv {
				t.Errorf("server output:\n%s\nskeleton:\n%s\nwant:\n%s", srv.stdout, got, wantSrv)
			}

			// What the numbers say.
			ct, st := tables(t, cli.stdout), tables(t, srv.stdout)
			for k, tb := range ct {
				for _, s := range []string{"full connect", "create id", "resolve addr", "resolve route", "cm connect", "disconnect", "destroy id"} {
					if tb[s][1] == 0 || tb[s][5] > tb[s][4] {
						t.Errorf("client table %d: %s: %v", k, s, tb[s])
					}
				}
				for _, s := range []string{"init qp attr", "init qp", "rtr qp", "rts qp", "establish"} {
					if tb[s] != [6]uint64{} {
						t.Errorf("client table %d: %s: %v, want zeros (the software fabric moves its QPs)", k, s, tb[s])
					}
				}
				if got := tb["bind addr"][1] != 0; got != bind {
					t.Errorf("client table %d: bind addr %v", k, tb["bind addr"])
				}
				if tb["full connect"][3] != 0 {
					t.Errorf("client table %d: full connect sum %d, want 0", k, tb["full connect"][3])
				}
			}
			if c.name == "threads-mimic" && ct[0]["create qp"][5] < 300 {
				t.Errorf("simulated create qp took less than the 300 us delay: %v", ct[0]["create qp"])
			}
			if c.oob != 0 && len(ct) == 2 && ct[1]["create qp"][4] >= 300 {
				t.Errorf("no-QPs test create qp %v: no delay expected", ct[1]["create qp"])
			}
			for k, tb := range st {
				if tb["cm connect"][1] == 0 || tb["create qp"][3] == 0 && kind == "qp_conn" && k == 0 || tb["destroy id"][1] == 0 {
					t.Errorf("server table %d: %v", k, tb)
				}
			}
			// Every step with time spent by connections has a total at
			// least as long as the longest of them (rdma-core's server
			// prints 0 for create qp).
			for side, ts := range map[string][]map[string][6]uint64{"client": ct, "server": st} {
				for k, tb := range ts {
					for s, row := range tb {
						if s != "full connect" && row[3] != 0 && row[1] < row[4] {
							t.Errorf("%s table %d: %s total %d, shorter than its longest connection (%d; sum %d)", side, k, s, row[1], row[4], row[3])
						}
					}
				}
			}
		})
	}
}

func TestSocketBaseline(t *testing.T) {
	port := tooltest.FreePorts(t, 1)
	p := strconv.Itoa(port)
	done := start("-S", "-c", "20", "-p", p)
	tooltest.WaitListening(t, port)
	cli := cmtime("-S", "-c", "20", "-n", "2", "-p", p, "-s", "127.0.0.1")
	srv := <-done
	if cli.rc != 0 || srv.rc != 0 {
		t.Fatalf("client: exit %d\n%s%s\nserver: exit %d\n%s%s", cli.rc, cli.stdout, cli.stderr, srv.rc, srv.stdout, srv.stderr)
	}
	want := "Client baseline socket setup\nCreating sockets\nConnecting sockets\nClosing sockets\nClient baseline socket results:\n" + table("cm_conn", 20, 2)
	if got := skeleton(cli.stdout); got != want {
		t.Errorf("client:\n%s\nwant:\n%s", got, want)
	}
	want = "Server baseline socket setup\nAccept sockets\nClosing sockets\nServer baseline socket results:\n" + table("cm_conn", 20, 1)
	if got := skeleton(srv.stdout); got != want {
		t.Errorf("server:\n%s\nwant:\n%s", got, want)
	}
	if ct := tables(t, cli.stdout); ct[0]["cm connect"][1] == 0 || ct[0]["create id"][4] == 0 && ct[0]["create id"][1] == 0 {
		t.Errorf("client table %v", ct[0])
	}
}

func TestErrors(t *testing.T) {
	port := tooltest.FreePorts(t, 2)
	p := strconv.Itoa(port)
	for _, c := range []struct {
		args           []string
		stdout, stderr string // prefixes
	}{
		{[]string{"-x"}, "usage: cmtime\n\t[-S] (run socket baseline test)\n", "cmtime: invalid option -- 'x'\n"},
		{[]string{"-c"}, "usage: cmtime\n", "cmtime: option requires an argument -- 'c'\n"},
		{[]string{"-c", "0"}, "usage: cmtime\n", "cmtime: -c and -n must be at least 1\n"},
		{[]string{"-n", "0"}, "usage: cmtime\n", "cmtime: -c and -n must be at least 1\n"},
		{[]string{"-O", "x"}, "usage: cmtime\n", "cmtime: -O x: not a port number\n"},
		{[]string{"-s", "no-such-host.invalid"}, "rdma_getaddrinfo error: Name or service not known\n", "get_rdma_addr: "},
		{[]string{"-b", "192.0.2.1", "-p", p}, "", "rdma_bind_addr: Cannot assign requested address ("},
		// No server: the out-of-band connection is refused.
		{[]string{"-s", "127.0.0.1", "-p", p}, "",
			fmt.Sprintf("cmtime: out-of-band connection to 127.0.0.1:%d: Connection refused (", port+1)},
		// No server and no sync: the connection is refused.
		{[]string{"-s", "127.0.0.1", "-p", p, "-O", "0", "-c", "3"},
			"Connect (3) QPs test\n" + strings.Replace(clientRun(3, false, true), "\tDisconnecting\n\tDestroying QPs\n\tDestroying IDs\n", "", 1) +
				"event: RDMA_CM_EVENT_REJECTED, error: -111\n", ""},
	} {
		r := cmtime(c.args...)
		if r.rc != 1 || !strings.HasPrefix(r.stdout, c.stdout) || !strings.HasPrefix(r.stderr, c.stderr) ||
			(c.stdout == "" && r.stdout != "") || (c.stderr == "" && r.stderr != "") {
			t.Errorf("%q: exit %d\nstdout %q\nstderr %q\nwant stdout %q..., stderr %q...", c.args, r.rc, r.stdout, r.stderr, c.stdout, c.stderr)
		}
	}
}

func TestPortInUse(t *testing.T) {
	port := tooltest.FreePorts(t, 2)
	p := strconv.Itoa(port)
	done := start("-b", "127.0.0.1", "-p", p, "-c", "2")
	tooltest.WaitListening(t, port+1)

	r := cmtime("-b", "127.0.0.1", "-p", p, "-O", "0")
	if r.rc != 1 || !strings.HasPrefix(r.stderr, "rdma_bind_addr: Address already in use (") {
		t.Errorf("second server: exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
	}
	if cli := cmtime("-s", "127.0.0.1", "-p", p, "-c", "2"); cli.rc != 0 {
		t.Errorf("client: exit %d\n%s%s", cli.rc, cli.stdout, cli.stderr)
	}
	if srv := <-done; srv.rc != 0 {
		t.Errorf("server: exit %d\n%s%s", srv.rc, srv.stdout, srv.stderr)
	}
}

func TestOOBPortInUse(t *testing.T) {
	port := tooltest.FreePorts(t, 2)
	l, err := net.Listen("tcp4", "0.0.0.0:"+strconv.Itoa(port+1))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	r := cmtime("-p", strconv.Itoa(port))
	want := fmt.Sprintf("cmtime: out-of-band listen on port %d: Address already in use (", port+1)
	if r.rc != 1 || !strings.HasPrefix(r.stderr, want) {
		t.Errorf("exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
	}
}

// A client that goes away ends the server's wait with an error instead of
// hanging.
func TestPeerGone(t *testing.T) {
	port := tooltest.FreePorts(t, 2)
	done := start("-p", strconv.Itoa(port))
	tooltest.WaitListening(t, port+1)
	c, err := net.Dial("tcp4", "127.0.0.1:"+strconv.Itoa(port+1))
	if err != nil {
		t.Fatal(err)
	}
	var b [1]byte
	if _, err := c.Write(b[:]); err != nil { // the start of the warm-up
		t.Fatal(err)
	}
	if _, err := c.Read(b[:]); err != nil || b[0] != 0 {
		t.Fatalf("echo %v %v", b, err)
	}
	c.Close()
	select {
	case r := <-done:
		if r.rc != 1 || r.stdout != "Server warmup\n" ||
			r.stderr != "cmtime: out-of-band connection closed by the peer while waiting for accept (0 of 1 done)\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", r.rc, r.stdout, r.stderr)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server did not notice")
	}
}

func TestKernelFabricWithoutDevice(t *testing.T) {
	t.Setenv("CMRT_FABRIC", "kernel")
	r := cmtime("-p", strconv.Itoa(tooltest.FreePorts(t, 2)))
	if r.rc != 1 || !strings.HasPrefix(r.stderr, "No RDMA devices were detected (") ||
		!strings.HasSuffix(r.stderr, ")\ncreate_event_channel: No such device\n") {
		t.Skipf("a kernel RDMA CM is present, or another failure: exit %d, stderr %q", r.rc, r.stderr)
	}
}

// No such fabric: create_event_channel's line with cmrt's account, then
// cmtime's perror line, as rdma-core's cmtime prints them with no device.
func TestNoFabric(t *testing.T) {
	t.Setenv("CMRT_FABRIC", "bogus")
	r := cmtime("-p", strconv.Itoa(tooltest.FreePorts(t, 2)))
	want := `No RDMA devices were detected (cmrt: create_event_channel: no fabric CMRT_FABRIC="bogus" (registered: "kernel" (github.com/cmrt/cmrt/fabric/kernel), "soft" (github.com/cmrt/cmrt/fabric/soft)): no such device)` +
		"\ncreate_event_channel: No such device\n"
	if r.rc != 1 || r.stdout != "" || r.stderr != want {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant   %q", r.rc, r.stdout, r.stderr, want)
	}
}

// The usage shows argv[0] as the program was invoked, as C does.
func TestArgv0(t *testing.T) {
	bin := tooltest.Build(t, "github.com/cmrt/cmrt/examples/cmtime")
	p := tooltest.StartAs(t, bin, "/usr/local/bin/cmtime", "-h")
	if rc := p.Wait(); rc != 1 || !strings.HasPrefix(p.Stdout.String(), "usage: /usr/local/bin/cmtime\n\t[-S] (run socket baseline test)\n") ||
		p.Stderr.String() != "/usr/local/bin/cmtime: invalid option -- 'h'\n" {
		t.Errorf("exit %d\nstdout %q\nstderr %q", rc, p.Stdout, p.Stderr)
	}
}

func TestShow(t *testing.T) {
	var out tooltest.Buffer
	tt := newTest(config{iter: 2, threads: 3}, &out, &out)
	tt.nodes[0].times[stepCreateID] = [2]uint64{10, 20}
	tt.nodes[1].times[stepCreateID] = [2]uint64{15, 40}
	tt.times[stepCreateID] = [2]uint64{5, 45}
	tt.nodes[0].times[stepFullConnect] = [2]uint64{10, 100}
	tt.nodes[1].times[stepFullConnect] = [2]uint64{20, 100}
	tt.times[stepFullConnect] = [2]uint64{1, 101}
	tt.times[stepConnect] = [2]uint64{7, 0}             // never ended: no data
	tt.nodes[0].times[stepCreateQP] = [2]uint64{30, 34} // timed per connection only
	tt.nodes[1].times[stepCreateQP] = [2]uint64{31, 40}
	tt.show(2)
	lines := strings.Split(out.String(), "\n")
	want := []string{
		"qp_conn                 2",
		"threads                 3",
		"step             avg/iter  total(us)    us/conn    sum(us)    max(us)    min(us)",
		"full connect           50        100          0          0         90         80",
		"create id              20         40         17         35         25         10",
		"bind addr               0          0          0          0          0          0",
	}
	for k, w := range want {
		if lines[k] != w {
			t.Errorf("line %d: %q, want %q", k, lines[k], w)
		}
	}
	if got, want := lines[3+int(stepCreateQP)], "create qp               5         10          6         13          9          4"; got != want {
		t.Errorf("create qp: %q, want %q (total: the connections' first start to last end)", got, want)
	}
	if len(lines) != 3+int(stepCnt)+1 || lines[3+int(stepConnect)] != "cm connect              0          0          0          0          0          0" {
		t.Errorf("output:\n%s", out.String())
	}
}

func TestProgress(t *testing.T) {
	var out tooltest.Buffer
	p := progress{w: &out}
	p.begin("cm connect", 10)
	for _, d := range []int{0, 1, 1, 5, 10} {
		p.update(d)
	}
	p.end()
	want := "cmtime: cm connect: 0/10 (0%)\ncmtime: cm connect: 1/10 (10%)\ncmtime: cm connect: 5/10 (50%)\ncmtime: cm connect: 10/10 (100%)\n"
	if out.String() != want {
		t.Errorf("not a terminal: %q, want %q", out.String(), want)
	}
	// What start leaves out of a run's stderr: these lines, and nothing
	// around them.
	errs := "rdma_connect: Connection refused\n" + want + "cmtime: out-of-band connection closed (0 of 1 done)\n"
	if got := progressRE.ReplaceAllString(errs, ""); got != "rdma_connect: Connection refused\ncmtime: out-of-band connection closed (0 of 1 done)\n" {
		t.Errorf("progress lines filtered: %q", got)
	}

	out = tooltest.Buffer{}
	p = progress{w: &out, tty: true}
	p.begin("accept", 4)
	p.update(1)
	p.update(4)
	p.end()
	if want := "\raccept: 1/4 (25%)\raccept: 4/4 (100%)\r\033[K"; out.String() != want {
		t.Errorf("terminal: %q, want %q", out.String(), want)
	}

	out = tooltest.Buffer{}
	p = progress{w: &out, after: time.Hour}
	p.begin("accept", 4)
	p.update(1)
	p.end()
	if out.String() != "" {
		t.Errorf("short step: %q", out.String())
	}
}

// A client making more connections than the server expects is refused;
// both sides fail and release everything (TestMain checks for leaks). The
// server fails in one of two ways, as rdma-core's cmtime does, depending on
// which comes first: the client's out-of-band socket closing, or the client
// (gone after its REJECTED) resetting a request the server still accepts.
func TestMismatchedCounts(t *testing.T) {
	port := tooltest.FreePorts(t, 2)
	p := strconv.Itoa(port)
	done := start("-p", p, "-c", "3")
	tooltest.WaitListening(t, port+1)
	cli := cmtime("-s", "127.0.0.1", "-p", p, "-c", "8")
	srv := <-done
	if cli.rc != 1 || !strings.Contains(cli.stdout, "event: RDMA_CM_EVENT_REJECTED, error: -104\n") {
		t.Errorf("client: exit %d\n%s%s", cli.rc, cli.stdout, cli.stderr)
	}
	if srv.rc != 1 || !strings.Contains(srv.stdout, "failing connection request\n") ||
		!(strings.Contains(srv.stderr, "out-of-band") ||
			strings.Contains(srv.stdout+srv.stderr, "failure accepting: Connection reset by peer")) {
		t.Errorf("server: exit %d\n%s%s", srv.rc, srv.stdout, srv.stderr)
	}
}
