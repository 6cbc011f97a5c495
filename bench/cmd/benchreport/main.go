// Command benchreport turns the raw output of scripts/bench.sh into the
// comparison report: medians with their spread over the repetitions, and
// ratios of cmrt to its baselines computed repetition by repetition (the
// k-th run of a subject against the k-th run of its baseline, which ran
// next to it), then summarized as median [min..max].
//
//	benchreport -dir OUT [-cdf OUT/pingpong-cdf.csv]
//
// OUT holds raw/*.txt (go test -bench output, every repetition appended),
// samples/<rep>/*.txt (BenchmarkPingPong's round trips, -bench.samples),
// cmtime/*.txt (Go cmtime on loopback) and vm.log (test/vm/bench.sh), each
// optional. -cdf writes the quantiles of each ping-pong case's round
// trips, pooled over the repetitions, for benchplot's CDFs. It uses only
// the standard library.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

func main() {
	dir := flag.String("dir", ".", "bench.sh output directory")
	cdfOut := flag.String("cdf", "", "write the ping-pong round trips' quantiles here (for benchplot)")
	flag.Parse()
	r := &report{w: os.Stdout, dir: *dir}
	r.load()
	r.reactor()
	r.setup()
	r.messages()
	r.scale()
	r.findings()
	r.cmtimeLoopback()
	r.vm()
	if *cdfOut != "" {
		if err := writeCDF(*dir, *cdfOut); errors.Is(err, errNoSamples) {
			fmt.Fprintf(os.Stderr, "benchreport: %v: no %s\n", err, *cdfOut)
		} else if err != nil {
			fmt.Fprintln(os.Stderr, "benchreport:", err)
			os.Exit(1)
		}
	}
}

// sample is one benchmark result line: metric unit -> value.
type sample map[string]float64

type report struct {
	w    io.Writer
	dir  string
	runs map[string][]sample // benchmark name (no -N suffix) -> runs in order
}

var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)

func (r *report) load() {
	r.runs = make(map[string][]sample)
	files, _ := filepath.Glob(filepath.Join(r.dir, "raw", "*.txt"))
	sort.Strings(files)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			m := benchLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			s := sample{}
			s["iters"], _ = strconv.ParseFloat(m[2], 64)
			f := strings.Fields(m[3])
			for k := 0; k+1 < len(f); k += 2 {
				v, err := strconv.ParseFloat(f[k], 64)
				if err == nil {
					s[f[k+1]] = v
				}
			}
			r.runs[m[1]] = append(r.runs[m[1]], s)
		}
		fh.Close()
	}
}

func (r *report) printf(format string, args ...any) { fmt.Fprintf(r.w, format, args...) }

// values returns the metric of every run of a benchmark.
func (r *report) values(name, unit string) []float64 {
	var out []float64
	for _, s := range r.runs[name] {
		if v, ok := s[unit]; ok {
			out = append(out, v)
		}
	}
	return out
}

// ratios pairs the k-th runs of a and b and returns a/b for each pair.
func (r *report) ratios(a, b, unit string) []float64 {
	ra, rb := r.runs[a], r.runs[b]
	var out []float64
	for k := 0; k < len(ra) && k < len(rb); k++ {
		va, oka := ra[k][unit]
		vb, okb := rb[k][unit]
		if oka && okb && vb != 0 {
			out = append(out, va/vb)
		}
	}
	return out
}

type stats struct {
	n             int
	med, min, max float64
}

func summarize(v []float64) stats {
	if len(v) == 0 {
		return stats{med: math.NaN(), min: math.NaN(), max: math.NaN()}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{n: len(s), med: med, min: s[0], max: s[len(s)-1]}
}

// num formats a value with 3 significant digits and k/M suffixes.
func num(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "-"
	case a >= 10e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case a >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case a >= 100e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	case a >= 10e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	case a == 0:
		return "0"
	}
	return fmt.Sprintf("%.3f", v)
}

// spread formats median [min..max] (n).
func spread(v []float64) string {
	s := summarize(v)
	if s.n == 0 {
		return "-"
	}
	if s.n == 1 {
		return num(s.med)
	}
	return fmt.Sprintf("%s [%s..%s]", num(s.med), num(s.min), num(s.max))
}

// ratio formats a ratio summary as 0.42x [0.40..0.45].
func ratio(v []float64) string {
	s := summarize(v)
	if s.n == 0 {
		return "-"
	}
	f := func(x float64) string {
		switch {
		case x >= 100:
			return fmt.Sprintf("%.0f", x)
		case x >= 10:
			return fmt.Sprintf("%.1f", x)
		}
		return fmt.Sprintf("%.2f", x)
	}
	if s.n == 1 {
		return f(s.med) + "x"
	}
	return fmt.Sprintf("%sx [%s..%s]", f(s.med), f(s.min), f(s.max))
}

func (r *report) reps(name string) int { return len(r.runs[name]) }

// table prints rows of cells with aligned columns.
func (r *report) table(rows [][]string) {
	width := map[int]int{}
	for _, row := range rows {
		for k, c := range row {
			width[k] = max(width[k], len(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for k, c := range row {
			if k > 0 {
				b.WriteString("  ")
			}
			if k == len(row)-1 {
				b.WriteString(c)
			} else {
				fmt.Fprintf(&b, "%-*s", width[k], c)
			}
		}
		r.printf("  %s\n", strings.TrimRight(b.String(), " "))
	}
}

func (r *report) reactor() {
	const in, one, pool, base = "BenchmarkDispatchInline", "BenchmarkDispatchPool1", "BenchmarkDispatchPool4", "BenchmarkGoChannelFanout"
	if r.reps(in) == 0 {
		return
	}
	r.printf("\n== 1. Reactor: channel fd -> epoll -> handler (reactor/bench_test.go), %d runs\n", r.reps(in))
	rows := [][]string{{"", "events/s", "ns/event", "cpu-ns/event", "allocs/event", "B/event"}}
	for _, n := range []string{in, one, pool, base} {
		if r.reps(n) == 0 {
			continue // the pool of 1: raw files made before finding 40 lack it
		}
		rows = append(rows, []string{strings.TrimPrefix(n, "Benchmark"), spread(r.values(n, "events/s")),
			spread(r.values(n, "ns/op")), spread(r.values(n, "cpu-ns/op")), spread(r.values(n, "allocs/op")), spread(r.values(n, "B/op"))})
	}
	r.table(rows)
	r.printf("  events/s of cmrt relative to the Go-channel fan-out (same run):\n")
	ratios := [][]string{
		{"inline / fan-out", ratio(r.ratios(in, base, "events/s"))},
		{"pool of 4 / fan-out", ratio(r.ratios(pool, base, "events/s"))},
	}
	if r.reps(one) > 0 {
		// What workers running at once cost each other, beyond the
		// hand-off itself (BENCHMARKS.md, finding 40).
		ratios = append(ratios, []string{"pool of 4 / pool of 1", ratio(r.ratios(pool, one, "events/s"))})
	}
	r.table(ratios)
	r.lineTransfers(in, pool)
}

// lineTransfers prints the pool's CPU per event beyond the inline
// dispatch's in units of the same run's cache-line transfer between the
// two CPUs (BenchmarkLineTransfer), rep by rep: how many lines each event
// moves across when the loop hands it to a worker.
func (r *report) lineTransfers(in, pool string) {
	const lt = "BenchmarkLineTransfer"
	line := r.values(lt, "ns/transfer")
	if len(line) == 0 {
		return
	}
	ci, cp := r.runs[in], r.runs[pool]
	var extra, lines []float64
	for k := 0; k < len(ci) && k < len(cp) && k < len(r.runs[lt]); k++ {
		vi, oki := ci[k]["cpu-ns/op"]
		vp, okp := cp[k]["cpu-ns/op"]
		vl, okl := r.runs[lt][k]["ns/transfer"]
		if oki && okp && okl && vl > 0 {
			extra = append(extra, vp-vi)
			lines = append(lines, (vp-vi)/vl)
		}
	}
	r.printf("  the pool's hand-off in cache-line transfers between the two CPUs (same run):\n")
	r.table([][]string{
		{"one line transfer (LineTransfer)", spread(line) + " ns"},
		{"pool - inline, CPU per event", spread(extra) + " ns"},
		{"in line transfers per event", spread(lines)},
	})
}

var setupImpls = []string{"cmrt-sync", "cmrt-async", "tcp", "tcp-mpa"}

func (r *report) concs() []int {
	seen := map[int]bool{}
	re := regexp.MustCompile(`^BenchmarkConnSetup/conc=(\d+)/`)
	for name := range r.runs {
		if m := re.FindStringSubmatch(name); m != nil {
			c, _ := strconv.Atoi(m[1])
			seen[c] = true
		}
	}
	var out []int
	for c := range seen {
		out = append(out, c)
	}
	sort.Ints(out)
	return out
}

func setupName(conc int, impl string) string {
	return fmt.Sprintf("BenchmarkConnSetup/conc=%d/impl=%s", conc, impl)
}

func (r *report) setup() {
	concs := r.concs()
	if len(concs) == 0 {
		return
	}
	r.printf("\n== 2. Connection set-up on loopback: connect+accept+establish+disconnect+destroy, %d runs\n", r.reps(setupName(concs[0], "tcp")))
	r.printf("  connections/s, median [min..max]; allocs per connection (both ends)\n")
	rows := [][]string{{"conc", "cmrt-sync", "cmrt-async", "tcp", "tcp-mpa", "allocs sync/async/tcp"}}
	for _, c := range concs {
		row := []string{strconv.Itoa(c)}
		var allocs []string
		for _, impl := range setupImpls {
			v := r.values(setupName(c, impl), "conn/s")
			row = append(row, spread(v))
			if impl != "tcp-mpa" {
				allocs = append(allocs, num(summarize(r.values(setupName(c, impl), "allocs/op")).med))
			}
		}
		row = append(row, strings.Join(allocs, "/"))
		rows = append(rows, row)
	}
	r.table(rows)
	r.printf("  cmrt relative to raw TCP in the same run (connections/s ratio; 1.00x = as fast as TCP):\n")
	rows = [][]string{{"conc", "sync/tcp", "async/tcp", "sync/tcp-mpa", "async/tcp-mpa"}}
	for _, c := range concs {
		rows = append(rows, []string{strconv.Itoa(c),
			ratio(r.ratios(setupName(c, "cmrt-sync"), setupName(c, "tcp"), "conn/s")),
			ratio(r.ratios(setupName(c, "cmrt-async"), setupName(c, "tcp"), "conn/s")),
			ratio(r.ratios(setupName(c, "cmrt-sync"), setupName(c, "tcp-mpa"), "conn/s")),
			ratio(r.ratios(setupName(c, "cmrt-async"), setupName(c, "tcp-mpa"), "conn/s")),
		})
	}
	r.table(rows)
	if retries := r.values(setupName(concs[len(concs)-1], "cmrt-async"), "retries/op"); len(retries) > 0 {
		r.printf("  (failed attempts, retried: %s per connection at conc=%d)\n", spread(retries), concs[len(concs)-1])
	}
	one := setupName(1, "cmrt-sync")
	if r.reps(one) > 0 {
		r.printf("  per-step time of one synchronous connection at conc=1 (client side, us):\n")
		rows = [][]string{}
		var total []float64
		for _, st := range []struct{ label, unit string }{
			{"create id", "create-us"}, {"resolve addr", "resolve-addr-us"}, {"resolve route", "resolve-route-us"},
			{"connect", "connect-us"}, {"disconnect", "disconnect-us"}, {"destroy", "destroy-us"},
		} {
			v := r.values(one, st.unit)
			rows = append(rows, []string{st.label, spread(v)})
			for k, x := range v {
				if k >= len(total) {
					total = append(total, 0)
				}
				total[k] += x
			}
		}
		rows = append(rows, []string{"sum", spread(total)})
		tcp := r.values(setupName(1, "tcp"), "ns/op")
		for k := range tcp {
			tcp[k] /= 1e3
		}
		rows = append(rows, []string{"tcp: whole cycle", spread(tcp)})
		r.table(rows)
	}
}

func (r *report) sizes(prefix string) []string {
	re := regexp.MustCompile(`^` + prefix + `/size=([^/]+)/impl=tcp$`)
	type sz struct {
		name  string
		bytes float64
	}
	var out []sz
	for name := range r.runs {
		if m := re.FindStringSubmatch(name); m != nil {
			n, unit := 0.0, ""
			fmt.Sscanf(m[1], "%f%s", &n, &unit)
			mult := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}[unit]
			out = append(out, sz{m[1], n * mult})
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].bytes < out[b].bytes })
	var names []string
	for _, s := range out {
		names = append(names, s.name)
	}
	return names
}

func (r *report) messages() {
	pp, st := "BenchmarkPingPong", "BenchmarkStream"
	sizes := r.sizes(pp)
	if len(sizes) == 0 {
		return
	}
	name := func(b, size, impl string) string { return b + "/size=" + size + "/impl=" + impl }
	r.printf("\n== 3. Messages over the RC data path vs TCP sockets, loopback, %d runs\n", r.reps(name(pp, sizes[0], "tcp")))
	r.printf("  ping-pong round trip, us: p50 and p99, median [min..max]\n")
	rows := [][]string{{"size", "cmrt p50", "tcp p50", "cmrt p99", "tcp p99", "p50 cmrt/tcp", "p99 cmrt/tcp", "allocs/op cmrt"}}
	for _, s := range sizes {
		c, t := name(pp, s, "cmrt"), name(pp, s, "tcp")
		rows = append(rows, []string{s, spread(r.values(c, "p50-us")), spread(r.values(t, "p50-us")),
			spread(r.values(c, "p99-us")), spread(r.values(t, "p99-us")),
			ratio(r.ratios(c, t, "p50-us")), ratio(r.ratios(c, t, "p99-us")), num(summarize(r.values(c, "allocs/op")).med)})
	}
	r.table(rows)
	sizes = r.sizes(st)
	if len(sizes) == 0 {
		return
	}
	r.printf("  streaming, one way, MB/s (10^6 B/s), median [min..max]; tcp: a write(2) per message, tcp-bufio: 256 KiB buffers\n")
	rows = [][]string{{"size", "cmrt", "tcp", "tcp-bufio", "cmrt/tcp", "cmrt/tcp-bufio", "allocs/op cmrt"}}
	for _, s := range sizes {
		c, t, tb := name(st, s, "cmrt"), name(st, s, "tcp"), name(st, s, "tcp-bufio")
		rows = append(rows, []string{s, spread(r.values(c, "MB/s")), spread(r.values(t, "MB/s")), spread(r.values(tb, "MB/s")),
			ratio(r.ratios(c, t, "MB/s")), ratio(r.ratios(c, tb, "MB/s")), num(summarize(r.values(c, "allocs/op")).med)})
	}
	r.table(rows)
	r.serverFirst()
}

// serverFirst reports BenchmarkServerFirst: connect to the server's first
// 64-byte message, against TCP's dial to greeting.
func (r *report) serverFirst() {
	c, t := "BenchmarkServerFirst/impl=cmrt", "BenchmarkServerFirst/impl=tcp"
	if r.reps(c) == 0 {
		return
	}
	r.printf("  server speaks first, one connection at a time: connect to its first 64 B message (cmrt), dial to greeting (tcp), us, median [min..max]\n")
	rows := [][]string{{"", "cmrt", "tcp", "cmrt/tcp"},
		{"p50", spread(r.values(c, "connect-p50-us")), spread(r.values(t, "connect-p50-us")), ratio(r.ratios(c, t, "connect-p50-us"))},
		{"p99", spread(r.values(c, "connect-p99-us")), spread(r.values(t, "connect-p99-us")), ratio(r.ratios(c, t, "connect-p99-us"))}}
	r.table(rows)
}

func (r *report) scale() {
	impls := []string{"cmrt", "cmrt-qp", "tcp"}
	name := func(impl string) string { return "BenchmarkScale/impl=" + impl }
	if r.reps(name("cmrt")) == 0 {
		return
	}
	r.printf("\n== 4. Scale: connections held at once, both ends in one process, %d runs\n", r.reps(name("cmrt")))
	rows := [][]string{{"", "conns", "ids", "heap B/id", "RSS B/id", "goroutines held (idle)", "set-up s", "tear-down s", "set-up conn/s"}}
	for _, impl := range impls {
		n := name(impl)
		if r.reps(n) == 0 {
			continue
		}
		conns := summarize(r.values(n, "conns")).med
		rows = append(rows, []string{impl, num(conns), num(2 * conns), spread(r.values(n, "heap-B/id")), spread(r.values(n, "rss-B/id")),
			fmt.Sprintf("%s (%s)", num(summarize(r.values(n, "goroutines")).med), num(summarize(r.values(n, "goroutines-idle")).med)),
			spread(r.values(n, "setup-s")), spread(r.values(n, "teardown-s")), spread(r.values(n, "setup-conn/s"))})
	}
	r.table(rows)
	r.printf("  cmrt relative to tcp (same run):\n")
	r.table([][]string{
		{"heap per id", ratio(r.ratios(name("cmrt"), name("tcp"), "heap-B/id"))},
		{"RSS per id", ratio(r.ratios(name("cmrt"), name("tcp"), "rss-B/id"))},
		{"set-up time", ratio(r.ratios(name("cmrt"), name("tcp"), "setup-s"))},
		{"tear-down time", ratio(r.ratios(name("cmrt"), name("tcp"), "teardown-s"))},
	})
}

func (r *report) destroyQueued() {
	re := regexp.MustCompile(`^BenchmarkDestroyQueued/queued=(\d+)$`)
	var levels []int
	for name := range r.runs {
		if m := re.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			levels = append(levels, n)
		}
	}
	if len(levels) == 0 {
		return
	}
	sort.Ints(levels)
	r.printf("  create + destroy of an id on a channel holding other ids' queued events (us per op):\n")
	rows := [][]string{{"queued", "us/op", "vs queued=0"}}
	for _, l := range levels {
		n := fmt.Sprintf("BenchmarkDestroyQueued/queued=%d", l)
		v := r.values(n, "ns/op")
		for k := range v {
			v[k] /= 1e3
		}
		rows = append(rows, []string{strconv.Itoa(l), spread(v), ratio(r.ratios(n, fmt.Sprintf("BenchmarkDestroyQueued/queued=%d", levels[0]), "ns/op"))})
	}
	r.table(rows)
}

func (r *report) findings() {
	tw := regexp.MustCompile(`^BenchmarkTimeWait/tw=(\d+)/impl=bind0$`)
	var levels []int
	for name := range r.runs {
		if m := tw.FindStringSubmatch(name); m != nil {
			n, _ := strconv.Atoi(m[1])
			levels = append(levels, n)
		}
	}
	sort.Ints(levels)
	if len(levels) > 0 || r.reps("BenchmarkIdleFabric/impl=cold") > 0 || r.reps("BenchmarkRouteLookup/impl=socket-per-call") > 0 {
		r.printf("\n== 5. Costs isolated (bench/findings_test.go)\n")
	}
	defer r.destroyQueued()
	if len(levels) > 0 {
		r.printf("  resolve_addr's ephemeral bind under TIME_WAIT (us per op; tw = TIME_WAIT sockets present):\n")
		rows := [][]string{{"tw", "cmrt resolve_addr", "bind(0), reuse first (266bd92^)", "bind(0), reuse after (a8525e2^)", "random port (now)", "bind(0)/random"}}
		for _, l := range levels {
			n := func(impl string) string { return fmt.Sprintf("BenchmarkTimeWait/tw=%d/impl=%s", l, impl) }
			us := func(impl string) []float64 {
				v := r.values(n(impl), "ns/op")
				for k := range v {
					v[k] /= 1e3
				}
				return v
			}
			rows = append(rows, []string{num(summarize(r.values(n("bind0"), "tw")).med), spread(us("cmrt-resolve")), spread(us("bind0-reuse")),
				spread(us("bind0")), spread(us("bind-random")), ratio(r.ratios(n("bind0"), n("bind-random"), "ns/op"))})
		}
		r.table(rows)
	}
	if c, w, g := "BenchmarkIdleFabric/impl=cold", "BenchmarkIdleFabric/impl=warm", "BenchmarkIdleFabric/impl=grace"; r.reps(c) > 0 {
		r.printf("  one connection at a time on an otherwise idle client fabric (conn/s):\n")
		rows := [][]string{
			{"cold (no grace: loop and address monitor restart per connection)", spread(r.values(c, "conn/s"))},
			{"warm (kept up by a listening id)", spread(r.values(w, "conn/s"))},
		}
		if r.reps(g) > 0 {
			rows = append(rows, []string{"grace (the default 100ms idle grace, now)", spread(r.values(g, "conn/s"))})
		}
		rows = append(rows, []string{"warm/cold", ratio(r.ratios(w, c, "conn/s"))})
		if r.reps(g) > 0 {
			rows = append(rows, []string{"grace/cold", ratio(r.ratios(g, c, "conn/s"))})
		}
		r.table(rows)
	}
	if s, u, o := "BenchmarkRouteLookup/impl=socket-per-call", "BenchmarkRouteLookup/impl=reused-socket", "BenchmarkRouteLookup/impl=one-request"; r.reps(s) > 0 {
		r.printf("  netlink route lookup (two per connection; the fabric does one request on a kept socket since a0300e4), us:\n")
		us := func(n string) []float64 {
			v := r.values(n, "ns/op")
			for k := range v {
				v[k] /= 1e3
			}
			return v
		}
		r.table([][]string{
			{"socket per call (before)", spread(us(s)), fmt.Sprintf("%s allocs", num(summarize(r.values(s, "allocs/op")).med))},
			{"one reused socket", spread(us(u)), fmt.Sprintf("%s allocs", num(summarize(r.values(u, "allocs/op")).med))},
			{"one RTM_GETROUTE on a kept socket (now)", spread(us(o)), fmt.Sprintf("%s allocs", num(summarize(r.values(o, "allocs/op")).med))},
			{"before/reused", ratio(r.ratios(s, u, "ns/op")), ""},
			{"before/now", ratio(r.ratios(s, o, "ns/op")), ""},
		})
	}
}

// cmtimeTable is a parsed cmtime step table: step -> column -> value.
type cmtimeTable map[string]map[string]float64

// parseGoCmtime parses the tables of Go cmtime (rdma-core v52+ layout):
// it returns one table per "step ..." header, in order.
func parseGoCmtime(text string) []cmtimeTable {
	var out []cmtimeTable
	var cur cmtimeTable
	var cols []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && f[0] == "step" {
			cols = f[1:]
			cur = cmtimeTable{}
			out = append(out, cur)
			continue
		}
		if cur == nil || len(f) < len(cols)+1 {
			if len(f) == 0 {
				cur = nil
			}
			continue
		}
		// The step name is everything before the numeric columns.
		nums := f[len(f)-len(cols):]
		step := strings.Join(f[:len(f)-len(cols)], " ")
		row := map[string]float64{}
		ok := true
		for k, c := range cols {
			v, err := strconv.ParseFloat(nums[k], 64)
			if err != nil {
				ok = false
				break
			}
			row[c] = v
		}
		if ok {
			cur[step] = row
		} else {
			cur = nil
		}
	}
	return out
}

// parseOldCmtime parses rdma-core 44's table: "step : total ms, max ms,
// min us, us / conn".
func parseOldCmtime(text string) cmtimeTable {
	t := cmtimeTable{}
	for _, line := range strings.Split(text, "\n") {
		step, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 4 {
			continue
		}
		var v [4]float64
		good := true
		for k := range f {
			x, err := strconv.ParseFloat(f[k], 64)
			if err != nil {
				good = false
			}
			v[k] = x
		}
		if good {
			t[strings.TrimSpace(step)] = map[string]float64{"total-ms": v[0], "max-ms": v[1], "min-us": v[2], "us/conn": v[3]}
		}
	}
	return t
}

func (r *report) cmtimeLoopback() {
	files, _ := filepath.Glob(filepath.Join(r.dir, "cmtime", "*.txt"))
	if len(files) == 0 {
		return
	}
	sort.Strings(files)
	// rep.N.cmrt.txt and rep.N.sock.txt: the client's output.
	full := map[string][]float64{}
	steps := map[string][]float64{}
	n := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		base := filepath.Base(f)
		kind := "cmrt"
		if strings.Contains(base, ".sock.") {
			kind = "sock"
		}
		tabs := parseGoCmtime(string(b))
		if len(tabs) == 0 {
			continue
		}
		t := tabs[len(tabs)-1] // the "test - no QPs" table, or the socket one
		if kind == "cmrt" && len(tabs) >= 2 {
			t = tabs[len(tabs)-2] // the QPs test
		}
		full[kind] = append(full[kind], t["full connect"]["total(us)"])
		if kind == "cmrt" {
			n = int(t["full connect"]["avg/iter"])
			for _, st := range []string{"create id", "resolve addr", "resolve route", "create qp", "cm connect", "disconnect", "destroy qp", "destroy id"} {
				steps[st] = append(steps[st], t[st]["avg/iter"])
			}
		}
	}
	_ = n
	if len(full["cmrt"]) == 0 {
		return
	}
	r.printf("\n== 6. examples/cmtime on loopback (client table of the QPs test; total = wall time of the step for all connections)\n")
	rows := [][]string{{"step", "us per connection (total/conns)"}}
	for _, st := range []string{"create id", "resolve addr", "resolve route", "create qp", "cm connect", "disconnect", "destroy qp", "destroy id"} {
		rows = append(rows, []string{st, spread(steps[st])})
	}
	r.table(rows)
	var ratios []float64
	for k := 0; k < len(full["cmrt"]) && k < len(full["sock"]); k++ {
		if full["sock"][k] > 0 {
			ratios = append(ratios, full["cmrt"][k]/full["sock"][k])
		}
	}
	r.table([][]string{
		{"full connect, cmrt (ms)", spread(scaleBy(full["cmrt"], 1e-3))},
		{"full connect, sockets -S (ms)", spread(scaleBy(full["sock"], 1e-3))},
		{"cmrt/sockets (time)", ratio(ratios)},
	})
}

func scaleBy(v []float64, f float64) []float64 {
	out := make([]float64, len(v))
	for k := range v {
		out[k] = v[k] * f
	}
	return out
}

// vm parses the log of test/vm/bench.sh: sections "=== TEST vm-<tool>-<rep>"
// with the client's output after "--- client output".
func (r *report) vm() {
	b, err := os.ReadFile(filepath.Join(r.dir, "vm.log"))
	if err != nil {
		if reason, err := os.ReadFile(filepath.Join(r.dir, "vm.skipped")); err == nil {
			r.printf("\n== 7. VM: skipped: %s", reason)
		}
		return
	}
	text := string(b)
	type key struct{ tool string }
	totals := map[string]map[string][]float64{} // tool -> step -> total ms per rep
	for _, sec := range strings.Split(text, "=== TEST ")[1:] {
		title, body, _ := strings.Cut(sec, "\n")
		f := strings.Split(strings.TrimSpace(title), "-")
		if len(f) < 3 || f[0] != "vm" {
			continue
		}
		tool := strings.Join(f[1:len(f)-1], "-")
		_, cli, ok := strings.Cut(body, "--- client output")
		if !ok {
			continue
		}
		if !strings.Contains(body, "RESULT vm-") || strings.Contains(body, ": FAIL") {
			continue
		}
		if totals[tool] == nil {
			totals[tool] = map[string][]float64{}
		}
		add := func(step string, ms float64) { totals[tool][step] = append(totals[tool][step], ms) }
		if strings.HasPrefix(tool, "rdmacore") {
			t := parseOldCmtime(cli)
			for _, st := range []string{"create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"} {
				if row, ok := t[st]; ok {
					add(st, row["total-ms"])
				}
			}
			continue
		}
		tabs := parseGoCmtime(cli)
		sock := tool == "gosock-siw" // -S: one table, sockets created, connected and closed
		k := len(tabs) - 2           // the QPs (or simulated QPs) test
		if sock {
			k = len(tabs) - 1
		}
		if k < 0 {
			continue
		}
		t := tabs[k]
		ms := func(st string) float64 { return t[st]["total(us)"] / 1e3 }
		add("create id", ms("create id"))
		add("connect", ms("cm connect"))
		add("destroy", ms("destroy id")+ms("destroy qp"))
		if sock {
			continue
		}
		add("resolve addr", ms("resolve addr"))
		add("resolve route", ms("resolve route"))
		add("create qp", ms("create qp"))
		add("disconnect", ms("disconnect"))
	}
	if len(totals) == 0 {
		r.printf("\n== 7. VM: no results in vm.log\n")
		return
	}
	n := ""
	if m := regexp.MustCompile(`BENCH_VM_N=(\d+)`).FindStringSubmatch(text); m != nil {
		n = m[1]
	}
	r.printf("\n== 7. In the VM (TCG, one boot, %s connections; ms for the step over all connections, median [min..max])\n", n)
	tools := []struct{ key, label string }{
		{"rdmacore-siw", "rdma-core cmtime, siw0"},
		{"gosoft-siw", "Go cmtime, soft fabric, siw0's address"},
		{"rdmacore-rxe", "rdma-core cmtime, rxe0"},
		{"gokernel-rxe", "Go cmtime, kernel fabric, rxe0"},
		{"gosock-siw", "Go cmtime -S, TCP sockets (handshake only), siw0's address"},
	}
	steps := []string{"create id", "resolve addr", "resolve route", "create qp", "connect", "disconnect", "destroy"}
	head := []string{"step"}
	for _, t := range tools {
		head = append(head, t.key)
	}
	rows := [][]string{head}
	sum := map[string][]float64{}
	for _, st := range steps {
		row := []string{st}
		for _, t := range tools {
			v := totals[t.key][st]
			row = append(row, spread(v))
			for k, x := range v {
				if k >= len(sum[t.key]) {
					sum[t.key] = append(sum[t.key], 0)
				}
				sum[t.key][k] += x
			}
		}
		rows = append(rows, row)
	}
	row := []string{"sum"}
	for _, t := range tools {
		row = append(row, spread(sum[t.key]))
	}
	rows = append(rows, row)
	r.table(rows)
	for _, t := range tools {
		r.printf("  %-13s %s\n", t.key+":", t.label)
	}
	pair := func(a, b string) []float64 {
		var out []float64
		for k := 0; k < len(sum[a]) && k < len(sum[b]); k++ {
			if sum[b][k] > 0 {
				out = append(out, sum[a][k]/sum[b][k])
			}
		}
		return out
	}
	stepPair := func(a, b, st string) []float64 {
		var out []float64
		va, vb := totals[a][st], totals[b][st]
		for k := 0; k < len(va) && k < len(vb); k++ {
			if vb[k] > 0 {
				out = append(out, va[k]/vb[k])
			}
		}
		return out
	}
	r.printf("  time ratios, rep by rep (<1: Go faster):\n")
	r.table([][]string{
		{"Go soft / rdma-core siw, sum of steps", ratio(pair("gosoft-siw", "rdmacore-siw"))},
		{"Go soft / rdma-core siw, connect", ratio(stepPair("gosoft-siw", "rdmacore-siw", "connect"))},
		{"Go soft / rdma-core rxe, sum of steps", ratio(pair("gosoft-siw", "rdmacore-rxe"))},
		{"Go kernel / rdma-core rxe, sum of steps", ratio(pair("gokernel-rxe", "rdmacore-rxe"))},
		{"Go kernel / rdma-core rxe, connect", ratio(stepPair("gokernel-rxe", "rdmacore-rxe", "connect"))},
		{"rdma-core siw / sockets -S, sum of steps", ratio(pair("rdmacore-siw", "gosock-siw"))},
		{"Go soft / sockets -S, sum of steps", ratio(pair("gosoft-siw", "gosock-siw"))},
	})
}
