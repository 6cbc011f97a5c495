package bench

import (
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cmrt/cmrt/fabric/soft"
)

var (
	flagConc    = flag.String("bench.conc", "1,10,100,1000", "concurrency levels of BenchmarkConnSetup")
	flagSizes   = flag.String("bench.sizes", "64,4096,1048576", "message sizes of BenchmarkPingPong and BenchmarkStream")
	flagScale   = flag.Int("bench.scale", 10000, "ids held by BenchmarkScale (two per connection: both ends are in this process)")
	flagHeap    = flag.String("bench.heapprofile", "", "BenchmarkScale writes a heap profile of the held connections to this file prefix")
	flagWindow  = flag.Int("bench.window", 512, "connections being set up at once in BenchmarkScale")
	flagSwap    = flag.Bool("bench.swap", false, "run the baseline before cmrt in each comparison (bench.sh alternates)")
	flagTW      = flag.String("bench.tw", "0,7000,14000,28000", "TIME_WAIT sockets BenchmarkTimeWait measures under (made in increasing order)")
	flagOneFab  = flag.Bool("bench.onefabric", false, "client and server share one software fabric (one epoll loop)")
	flagSamples = flag.String("bench.samples", "", "BenchmarkPingPong writes every round trip of its last run to a file per case in this directory (for the latency CDFs)")
)

// loopback is where every benchmark listens and connects.
var loopback = netip.MustParseAddr("127.0.0.1")

// Client and server fabrics: one software fabric (one epoll loop) per side,
// as two processes would have; -bench.onefabric shares one.
var cliFab, srvFab *soft.Fabric

func TestMain(m *testing.M) {
	flag.Parse()
	raiseNoFile()
	cliFab = soft.New(soft.WithName("bench-cli"))
	srvFab = cliFab
	if !*flagOneFab {
		srvFab = soft.New(soft.WithName("bench-srv"))
	}
	os.Exit(m.Run())
}

// raiseNoFile lifts RLIMIT_NOFILE as far as the process may: BenchmarkScale
// holds two sockets per connection. Root may go up to fs.nr_open.
func raiseNoFile() {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return
	}
	want := uint64(1 << 18)
	if b, err := os.ReadFile("/proc/sys/fs/nr_open"); err == nil {
		if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err == nil && n < want {
			want = n
		}
	}
	if lim.Cur >= want {
		return
	}
	if lim.Max < want {
		try := unix.Rlimit{Cur: want, Max: want}
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &try) == nil {
			return
		}
	}
	lim.Cur = min(want, lim.Max)
	_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &lim)
}

// noFileLimit returns the current soft RLIMIT_NOFILE.
func noFileLimit() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return lim.Cur
}

// ints parses a comma-separated list of integers.
func ints(tb testing.TB, s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			tb.Fatalf("bad number %q in %q", f, s)
		}
		out = append(out, n)
	}
	return out
}

// impls returns the implementations of a comparison in run order: cmrt's
// first, unless -bench.swap puts the baselines first.
func impls(cmrt, base []string) []string {
	if *flagSwap {
		return append(append([]string(nil), base...), cmrt...)
	}
	return append(append([]string(nil), cmrt...), base...)
}

// sizeName names a message size as the sub-benchmark key.
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// memSnapshot is the process's memory and goroutines at one point.
type memSnapshot struct {
	heap       uint64 // live heap after a GC (HeapAlloc)
	rss        uint64 // resident set (VmRSS)
	goroutines int
}

// snapshot collects garbage, returns freed memory to the OS and measures.
func snapshot() memSnapshot {
	runtime.GC()
	debug.FreeOSMemory()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return memSnapshot{heap: ms.HeapAlloc, rss: rss(), goroutines: runtime.NumGoroutine()}
}

// writeHeapProfile writes the heap profile -bench.heapprofile asks for.
func writeHeapProfile(tb testing.TB, impl string) {
	if *flagHeap == "" {
		return
	}
	f, err := os.Create(*flagHeap + "." + impl + ".pprof")
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
}

// rss reads VmRSS from /proc/self/status, in bytes.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}
