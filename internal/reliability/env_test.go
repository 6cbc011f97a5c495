package reliability_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/channel"
	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
)

// Environment of the suite. scripts/reliability.sh sets all of these.
const (
	enableEnv  = "CMRT_RELIABILITY" // "1" runs the suite
	helperEnv  = "CMRT_REL_HELPER"  // the role of a helper process
	resultsEnv = "CMRT_REL_RESULTS" // file the measured figures are appended to
)

// need skips the test unless the suite is enabled.
func need(t *testing.T) {
	t.Helper()
	if os.Getenv(enableEnv) != "1" {
		t.Skip("reliability suite: set CMRT_RELIABILITY=1 (make reliability does)")
	}
}

// envInt reads an integer knob with a default.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// topo describes the namespaces scripts/reliability.sh made: hosts a, b and
// c, each with eth0 on a bridge in the switch namespace (port sw-<host>).
// The tests run in a.
type topo struct {
	ns     map[string]string     // host -> namespace
	addr   map[string]netip.Addr // host -> IPv4 address on eth0
	addr2  map[string]netip.Addr // host -> second IPv4 address on eth0
	addr6  map[string]netip.Addr // host -> IPv6 address on eth0
	sw     string                // the switch namespace
	bridge string
}

// needTopo skips the test unless the namespaces exist, and returns them.
func needTopo(t *testing.T) *topo {
	t.Helper()
	need(t)
	if os.Getenv("CMRT_REL_NS_B") == "" {
		t.Skip("needs the network namespaces of scripts/reliability.sh (CMRT_REL_NS_* unset)")
	}
	tp := &topo{ns: map[string]string{}, addr: map[string]netip.Addr{}, addr2: map[string]netip.Addr{},
		addr6: map[string]netip.Addr{}, sw: os.Getenv("CMRT_REL_NS_SW"), bridge: "br0"}
	for _, h := range []string{"a", "b", "c"} {
		H := strings.ToUpper(h)
		tp.ns[h] = os.Getenv("CMRT_REL_NS_" + H)
		for _, kv := range []struct {
			m map[string]netip.Addr
			v string
		}{{tp.addr, "ADDR_"}, {tp.addr2, "ADDR2_"}, {tp.addr6, "ADDR6_"}} {
			if a, err := netip.ParseAddr(os.Getenv("CMRT_REL_" + kv.v + H)); err == nil {
				kv.m[h] = a
			}
		}
	}
	if tp.ns["a"] == "" || !tp.addr["a"].IsValid() || !tp.addr["b"].IsValid() || tp.sw == "" {
		t.Fatalf("incomplete topology in the environment: %+v", tp)
	}
	return tp
}

// run runs a command (ip(8) mostly) and fails the test if it fails.
func run(t testing.TB, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

var osexecCommand = exec.Command

// tryRun runs a command, ignoring its output.
func tryRun(name string, args ...string) error { return exec.Command(name, args...).Run() }

// cut detaches host h's port from the bridge: its packets go nowhere, and
// neither end sees its link go down. The returned function restores it
// (also run at cleanup).
func (tp *topo) cut(t *testing.T, h string) (restore func()) {
	t.Helper()
	port := "sw-" + h
	run(t, "ip", "-n", tp.sw, "link", "set", port, "nomaster")
	var once sync.Once
	restore = func() {
		once.Do(func() { run(t, "ip", "-n", tp.sw, "link", "set", port, "master", tp.bridge) })
	}
	t.Cleanup(restore)
	return restore
}

// record logs a measured figure and appends it to the results file.
func record(t testing.TB, metric string, format string, args ...any) {
	t.Helper()
	v := fmt.Sprintf(format, args...)
	t.Logf("RESULT %s: %s", metric, v)
	if p := os.Getenv(resultsEnv); p != "" {
		f, err := os.OpenFile(p, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintf(f, "%s\t%s\t%s\n", t.Name(), metric, v)
			_ = f.Close()
		}
	}
}

// logBuf is a concurrency-safe buffer of zerolog JSON lines.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// logger returns a debug-level zerolog logger writing into l.
func (l *logBuf) logger() zerolog.Logger {
	return zerolog.New(l).Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

// entries decodes the lines logged so far.
func (l *logBuf) entries() []map[string]any {
	l.mu.Lock()
	data := append([]byte(nil), l.b.Bytes()...)
	l.mu.Unlock()
	return parseLog(data)
}

func parseLog(data []byte) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// countLog returns how many entries have message msg and all the fields
// (field=value checks that the field's string form contains value). msg
// is "component: message": "soft: bad MPA request dropped" matches the
// entries with component "soft" and message "bad MPA request dropped".
func countLog(entries []map[string]any, msg string, fields ...string) int {
	component, msg, _ := strings.Cut(msg, ": ")
	n := 0
next:
	for _, e := range entries {
		if e["component"] != component || e["message"] != msg {
			continue
		}
		for _, f := range fields {
			k, v, hasV := strings.Cut(f, "=")
			got, ok := e[k]
			if !ok || (hasV && !strings.Contains(fmt.Sprint(got), v)) {
				continue next
			}
		}
		n++
	}
	return n
}

// waitLog waits until at least n entries match.
func (l *logBuf) wait(t testing.TB, d time.Duration, n int, msg string, fields ...string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		got := countLog(l.entries(), msg, fields...)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log: %d entries %q with %v, want %d; log:\n%s", got, msg, fields, n, l.tail(20))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// tail returns the last n lines.
func (l *logBuf) tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(l.b.String()), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// warmPoller makes the Go runtime start its network poller (an epoll and
// an eventfd it keeps for good) before descriptors are counted.
func warmPoller() {
	if r, w, err := os.Pipe(); err == nil {
		_ = r.SetDeadline(time.Now())
		_ = r.Close()
		_ = w.Close()
	}
}

// fdCount counts the process's descriptors.
func fdCount() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// rssKiB returns the resident set size of a process (0: self).
func rssKiB(pid int) int {
	p := "/proc/self/status"
	if pid > 0 {
		p = fmt.Sprintf("/proc/%d/status", pid)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	return -1
}

// cpuTicks returns a process's user+system CPU time in clock ticks.
func cpuTicks(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	u, _ := strconv.Atoi(f[11])
	k, _ := strconv.Atoi(f[12])
	return u + k
}

// baseline is what a test starts with; verify checks it ends with the same:
// no goroutine, descriptor or id left.
type baseline struct {
	fds  int
	live int
	g    goleak.Option
}

func snapshot() *baseline {
	warmPoller()
	return &baseline{fds: fdCount(), live: id.Live(), g: goleak.IgnoreCurrent()}
}

// verify waits (up to 10s) for the fabrics to go idle and the counts to
// return to the baseline.
func (b *baseline) verify(t testing.TB, fabs ...*soft.Fabric) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, f := range fabs {
		if err := f.QuiesceContext(ctx); err != nil {
			t.Errorf("fabric loops still running: %v", err)
		}
	}
	var fds, live int
	for {
		fds, live = fdCount(), id.Live()
		if (fds <= b.fds && live <= b.live) || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if fds > b.fds {
		t.Errorf("descriptors: %d at the start, %d at the end", b.fds, fds)
		out, _ := exec.Command("ls", "-l", fmt.Sprintf("/proc/%d/fd", os.Getpid())).CombinedOutput()
		t.Logf("%s", out)
	}
	if live > b.live {
		t.Errorf("ids: %d at the start, %d at the end", b.live, live)
	}
	if tt, ok := t.(*testing.T); ok {
		var err error
		for k := 0; k < 5; k++ { // goleak retries for about 2s each time
			if err = goleak.Find(b.g); err == nil {
				break
			}
		}
		if err != nil {
			tt.Errorf("goroutines left: %v", err)
		}
	}
}

// fabric returns a software fabric logging into l, and its channel.
func fabric(t testing.TB, l *logBuf, opts ...soft.Option) (*soft.Fabric, *channel.Channel) {
	t.Helper()
	if l != nil {
		opts = append([]soft.Option{soft.WithLogger(l.logger())}, opts...)
	}
	f := soft.New(opts...)
	ch, err := channel.New(channel.WithFabric(f))
	if err != nil {
		t.Fatal(err)
	}
	return f, ch
}

// ev is what a test keeps of an event once it is acknowledged.
type ev struct {
	Type   id.EventType
	Status int
	ID     *id.ID
	Listen *id.ID
	PD     []byte
	At     time.Time
}

// next takes the next event of ch within d and acknowledges it.
func next(ch *channel.Channel, d time.Duration) (ev, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	e, err := ch.GetEventContext(ctx)
	if err != nil {
		return ev{}, err
	}
	r := ev{Type: e.Type, Status: e.Status, ID: e.ID, Listen: e.ListenID, PD: append([]byte(nil), e.PrivateData()...), At: time.Now()}
	return r, ch.Ack(e)
}

// want takes the next event and checks its type.
func want(t testing.TB, ch *channel.Channel, typ id.EventType, d time.Duration) ev {
	t.Helper()
	e, err := next(ch, d)
	if err != nil {
		t.Fatalf("waiting %v for %s: %v", d, typ, err)
	}
	if e.Type != typ {
		t.Fatalf("event %s status %d on id %d, want %s", e.Type, e.Status, e.ID.Handle(), typ)
	}
	return e
}

// none checks no event arrives within d.
func none(t testing.TB, ch *channel.Channel, d time.Duration) {
	t.Helper()
	if e, err := next(ch, d); err == nil {
		t.Fatalf("unexpected event %s status %d on id %d", e.Type, e.Status, e.ID.Handle())
	}
}

// listenOn makes a listening RC id.
func listenOn(t testing.TB, ch *channel.Channel, addr netip.AddrPort, backlog int) *id.ID {
	t.Helper()
	l, err := id.Create(ch, nil, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Bind(addr); err != nil {
		t.Fatal(err)
	}
	if err := l.Listen(backlog); err != nil {
		t.Fatal(err)
	}
	return l
}

// dialAsync creates an RC id on ch, resolves dst and connects, taking the
// resolution events from ch (so ch must have no other traffic meanwhile).
// prep runs before Connect.
func dialAsync(t testing.TB, ch *channel.Channel, ctx any, dst netip.AddrPort, p *id.ConnParam, prep func(*id.ID)) *id.ID {
	t.Helper()
	c := resolved(t, ch, ctx, dst)
	if prep != nil {
		prep(c)
	}
	if p == nil {
		p = &id.ConnParam{}
	}
	if err := c.Connect(p); err != nil {
		t.Fatal(err)
	}
	return c
}

// resolved creates an RC id on ch and resolves its address and route to
// dst, taking the events from ch.
func resolved(t testing.TB, ch *channel.Channel, ctx any, dst netip.AddrPort) *id.ID {
	t.Helper()
	c, err := id.Create(ch, ctx, id.PSTCP)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	want(t, ch, id.EventAddrResolved, 5*time.Second)
	if err := c.ResolveRoute(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	want(t, ch, id.EventRouteResolved, 5*time.Second)
	return c
}

// proc is a helper process: the test binary in another role, possibly in
// another network namespace. It speaks lines: commands on stdin, reports on
// stdout; its log (zerolog JSON) goes to stderr.
type proc struct {
	t     testing.TB
	name  string
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines chan string
	log   logBuf
	done  chan struct{}
	err   error
}

// spawn starts role in namespace ns ("" for this one) with arguments passed
// as CMRT_REL_ARG_<KEY> variables.
func spawn(t testing.TB, ns, role string, args map[string]string) *proc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	argv := []string{exe, "-test.run=^$"}
	if ns != "" {
		argv = append([]string{"ip", "netns", "exec", ns}, argv...)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), helperEnv+"="+role)
	for k, v := range args {
		cmd.Env = append(cmd.Env, "CMRT_REL_ARG_"+strings.ToUpper(k)+"="+v)
	}
	p := &proc{t: t, name: role + "@" + ns, cmd: cmd, lines: make(chan string, 1<<16), done: make(chan struct{})}
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// pid returns the helper's process id (ip netns exec execs it in place).
func (p *proc) pid() int { return p.cmd.Process.Pid }

// send writes a command line.
func (p *proc) send(format string, args ...any) {
	fmt.Fprintf(p.in, format+"\n", args...)
}

// expect returns the fields of the next line starting with word, within d;
// "fail" lines end the test.
func (p *proc) expect(word string, d time.Duration) []string {
	p.t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				<-p.done
				p.t.Fatalf("%s exited (%v) before %q; log:\n%s", p.name, p.err, word, p.log.tail(30))
			}
			f := strings.Fields(line)
			if len(f) == 0 {
				continue
			}
			if f[0] == "fail" {
				p.t.Fatalf("%s: %s; log:\n%s", p.name, line, p.log.tail(30))
			}
			if f[0] == word {
				return f
			}
		case <-timer.C:
			p.t.Fatalf("%s: no %q within %v; log:\n%s", p.name, word, d, p.log.tail(30))
		}
	}
}

// kill sends SIGKILL and waits for the process.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// quit asks the helper to clean up and exit, and checks it left nothing.
func (p *proc) quit(d time.Duration) {
	p.t.Helper()
	p.send("quit")
	f := p.expect("leaks", d)
	if len(f) != 4 || f[1] != "goroutines=0" || f[2] != "fds=0" || f[3] != "ids=0" {
		p.t.Errorf("%s left: %s; log:\n%s", p.name, strings.Join(f[1:], " "), p.log.tail(20))
	}
	select {
	case <-p.done:
	case <-time.After(d):
		p.t.Errorf("%s did not exit", p.name)
	}
	if p.err != nil {
		p.t.Errorf("%s: %v; log:\n%s", p.name, p.err, p.log.tail(30))
	}
}

// arg reads a helper argument.
func arg(name, def string) string {
	if v := os.Getenv("CMRT_REL_ARG_" + strings.ToUpper(name)); v != "" {
		return v
	}
	return def
}

func argInt(name string, def int) int {
	if v, err := strconv.Atoi(arg(name, "")); err == nil {
		return v
	}
	return def
}

// out serializes a helper's stdout lines.
var outMu sync.Mutex

func say(format string, args ...any) {
	outMu.Lock()
	fmt.Fprintf(os.Stdout, format+"\n", args...)
	outMu.Unlock()
}

// errnoIs reports whether a status (negative errno) is e.
func statusIs(status int, e syscall.Errno) bool { return status == -int(e) }

var errTimeout = errors.New("timeout")

// ctxFor returns a context that ends after d or with the test.
func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
