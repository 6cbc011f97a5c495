// Package tooltest helps test cmrt's example programs: free ports, waiting
// for a listener, building a peer program, a goroutine-safe output buffer
// and a TestMain that checks nothing leaked.
package tooltest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cmrt/cmrt/fabric/soft"
	"github.com/cmrt/cmrt/id"
	"github.com/cmrt/cmrt/internal/portrange"
)

// Main runs the tests and then checks that no goroutine and no id
// survived them, once the software fabric's loops have wound down.
func Main(m *testing.M) {
	code := m.Run()
	Cleanup()
	if code == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := soft.Default().QuiesceContext(ctx)
		cancel()
		if err == nil {
			err = goleak.Find()
		}
		if err == nil && id.Live() != 0 {
			err = fmt.Errorf("%d ids or multicast joins still exist", id.Live())
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "leak check:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// Buffer is a bytes.Buffer safe for concurrent writes and reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// FreePorts returns n consecutive TCP ports that are free on every address
// right now. They lie below the ephemeral port range: a connection to a
// port in that range with nothing listening can, rarely, be given the same
// port as its source and connect to itself (a TCP self-connect), which the
// peer-less tests must not see.
func FreePorts(t testing.TB, n int) int {
	t.Helper()
	hi := ephemeralStart() - n
	for range 200 {
		base := 10000 + rand.IntN(hi-10000)
		ok := true
		var ls []net.Listener
		for k := 0; k < n && ok; k++ {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(base+k))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

// ephemeralStart is the first port of the kernel's ephemeral range.
func ephemeralStart() int {
	if low, _ := portrange.ReadOrDefault(); low > 12000 {
		return low
	}
	return portrange.Default[0]
}

// WaitListening waits until a TCP socket listens on port (any address),
// as /proc/net/tcp{,6} show it; it does not connect, so it takes nothing
// from the listener.
func WaitListening(t testing.TB, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if listening(port) {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("nothing listens on TCP port %d", port)
}

// PortArg returns the value of the -p flag in a tool's arguments.
func PortArg(t testing.TB, args []string) int {
	t.Helper()
	for k := 0; k+1 < len(args); k++ {
		if args[k] == "-p" {
			p, err := strconv.Atoi(args[k+1])
			if err != nil {
				t.Fatalf("-p %q: %v", args[k+1], err)
			}
			return p
		}
	}
	t.Fatalf("no -p in %q", args)
	return 0
}

// WaitBoundUDP waits until a UDP socket is bound to port (any address), as
// /proc/net/udp{,6} show it: a UD server binds its port just before it
// listens, so a client started after this finds the listener in all but a
// window of microseconds (a fixed sleep lost that race on a loaded machine,
// and the client's request got the host's port unreachable).
func WaitBoundUDP(t testing.TB, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if bound(port, "", "/proc/net/udp", "/proc/net/udp6") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("nothing is bound to UDP port %d", port)
}

func listening(port int) bool {
	return bound(port, "0A", "/proc/net/tcp", "/proc/net/tcp6") // 0A: LISTEN
}

// bound reports whether one of the /proc/net tables lists a socket on the
// local port in state (any state when state is empty).
func bound(port int, state string, tables ...string) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range tables {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(fh)
		for s.Scan() {
			// sl local_address rem_address st ...
			fs := strings.Fields(s.Text())
			if len(fs) > 3 && strings.HasSuffix(fs[1], want) && (state == "" || fs[3] == state) {
				fh.Close()
				return true
			}
		}
		fh.Close()
	}
	return false
}

var builds sync.Map // package path -> *build

type build struct {
	once sync.Once
	path string
	err  error
}

// Build builds the program pkg (an import path) once per test binary and
// returns the executable's path.
func Build(t testing.TB, pkg string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &build{})
	b := v.(*build)
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", "cmrt-tooltest-")
		if err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(dir, filepath.Base(pkg))
		goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goCmd); err != nil {
			goCmd = "go"
		}
		out, err := exec.Command(goCmd, "build", "-o", b.path, pkg).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// Cleanup removes what Build made; Main calls it after the tests.
func Cleanup() {
	builds.Range(func(_, v any) bool {
		if b := v.(*build); b.path != "" {
			os.RemoveAll(filepath.Dir(b.path))
		}
		return true
	})
}

// Proc is a program started with Start.
type Proc struct {
	Cmd            *exec.Cmd
	Stdout, Stderr *Buffer
	done           chan struct{}
	err            error
}

// Start starts the executable path with args; the test's cleanup kills it
// if it still runs.
func Start(t testing.TB, path string, args ...string) *Proc {
	t.Helper()
	return StartAs(t, path, path, args...)
}

// StartAs is Start with argv0 as the program's argv[0] (the name it was
// invoked by), as a shell gives "./prog" or "prog".
func StartAs(t testing.TB, path, argv0 string, args ...string) *Proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	p := &Proc{Stdout: new(Buffer), Stderr: new(Buffer), done: make(chan struct{})}
	p.Cmd = exec.CommandContext(ctx, path, args...)
	p.Cmd.Args[0] = argv0
	p.Cmd.Stdout, p.Cmd.Stderr = p.Stdout, p.Stderr
	if err := p.Cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		cancel()
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// Wait waits for the program and returns its exit status.
func (p *Proc) Wait() int {
	<-p.done
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}
