package main

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The committed report and the plots drawn from it.
const committed = "../.."

func parseFile(t *testing.T, path string) *report {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := parseReport(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseResults(t *testing.T) {
	// A report of its own (bench/results.txt of tree 9029ae6), so that a new
	// run's figures in bench/ do not change what this test expects.
	r := parseFile(t, filepath.Join("testdata", "results-9029ae6.txt"))
	if fmt.Sprint(r.concs) != "[1 10 100 1000]" {
		t.Fatalf("concurrency levels %v", r.concs)
	}
	for _, tc := range []struct {
		impl string
		conc int
		want spread
	}{
		{"cmrt-sync", 1, spread{2694, 2348, 2763}},
		{"cmrt-async", 1000, spread{6788, 5544, 7168}},
		{"tcp", 10, spread{25700, 24100, 26400}},
		{"tcp-mpa", 100, spread{18600, 13800, 19400}},
	} {
		if got := r.setup[tc.impl][tc.conc]; !near(got, tc.want) {
			t.Errorf("%s conc=%d: %v, want %v", tc.impl, tc.conc, got, tc.want)
		}
	}
	if len(r.dispatch) != 3 || r.dispatch[0].name != "DispatchInline" || !near(r.dispatch[0].rate, spread{2.96e6, 1.88e6, 3.08e6}) ||
		!near(r.dispatch[1].ratio, spread{0.11, 0.07, 0.12}) || !math.IsNaN(r.dispatch[2].ratio.med) || !near(r.dispatch[2].rate, spread{17.7e6, 11.8e6, 18.0e6}) {
		t.Errorf("dispatch %+v", r.dispatch)
	}
	if r.reps() != 5 || r.note() != "median of 5 runs, bars min..max; AMD EPYC, 2 CPUs; 2026-12-01; tree 9029ae6" {
		t.Errorf("reps %d, note %q", r.reps(), r.note())
	}
}

func near(a, b spread) bool {
	eq := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	return eq(a.med, b.med) && eq(a.min, b.min) && eq(a.max, b.max)
}

func TestParseOneRun(t *testing.T) {
	// One repetition: figures without [min..max]; a missing cell is "-".
	text := `mode:      quick, 1 repetitions, netns per process: no

== 1. Reactor: channel fd -> epoll -> handler (reactor/bench_test.go), 1 runs
                   events/s  ns/event  allocs/event  B/event
  DispatchInline   2.50M     400       0             0
  GoChannelFanout  10.0M     100       0             0
  events/s of cmrt relative to the Go-channel fan-out (same run):
  inline / fan-out     0.25x

== 2. Connection set-up on loopback: connect+accept+establish+disconnect+destroy, 1 runs
  connections/s, median [min..max]; allocs per connection (both ends)
  conc  cmrt-sync  cmrt-async  tcp    tcp-mpa  allocs sync/async/tcp
  1     2000       -           10.0k  8000     100/-/20.0
  cmrt relative to raw TCP in the same run (connections/s ratio; 1.00x = as fast as TCP):
  conc  sync/tcp  async/tcp  sync/tcp-mpa  async/tcp-mpa
  1     0.20x     -          0.25x         -
`
	r, err := parseReport(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(r.concs) != "[1]" || !near(r.setup["cmrt-sync"][1], spread{2000, 2000, 2000}) || len(r.setup["cmrt-async"]) != 0 ||
		!near(r.setup["tcp"][1], spread{1e4, 1e4, 1e4}) {
		t.Errorf("setup %v %v", r.concs, r.setup)
	}
	if len(r.dispatch) != 2 || !near(r.dispatch[0].ratio, spread{0.25, 0.25, 0.25}) {
		t.Errorf("dispatch %+v", r.dispatch)
	}
	if r.reps() != 1 {
		t.Errorf("reps %d", r.reps())
	}
	if _, err := parseReport(strings.NewReader("== 2. x\n  conc  cmrt-sync\n  1     fast\n")); err == nil {
		t.Error("a figure that is not a number parsed")
	}
}

// TestCommittedPlots checks that bench/*.png are what benchplot draws from
// bench/results.txt: the figures of BENCHMARKS.md come from its tables.
// After a change meant to alter them:
//
//	go run ./bench/cmd/benchplot -report bench/results.txt -outdir bench
func TestCommittedPlots(t *testing.T) {
	dir := t.TempDir()
	var msgs bytes.Buffer
	if err := run(filepath.Join(committed, "results.txt"), "", dir, &msgs); err != nil {
		t.Fatal(err)
	}
	if msgs.String() != "benchplot: no -cdf: no pingpong-cdf.png\n" {
		t.Errorf("messages %q", msgs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, "pingpong-cdf.png")); !os.IsNotExist(err) {
		t.Errorf("a CDF without data: %v", err)
	}
	for _, name := range []string{"setup-rate.png", "dispatch-rate.png"} {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(committed, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("bench/%s is not what benchplot draws from bench/results.txt; redraw it with "+
				"go run ./bench/cmd/benchplot -report bench/results.txt -outdir bench", name)
		}
		checkPNG(t, got, blue, orange)
	}
}

// checkPNG decodes a plot and checks its size and that each colour was
// drawn.
func checkPNG(t *testing.T, b []byte, cols ...color.RGBA) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if sz := img.Bounds().Size(); sz != image.Pt(1020, 600) {
		t.Errorf("size %v", sz)
	}
	seen := map[color.RGBA]int{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0xff}]++
		}
	}
	for _, c := range cols {
		if seen[c] < 50 {
			t.Errorf("colour %v drawn on %d pixels", c, seen[c])
		}
	}
}

func TestCDFPlot(t *testing.T) {
	dir := t.TempDir()
	var csv strings.Builder
	csv.WriteString("size,impl,quantile,us,samples,runs\n")
	for _, s := range []struct {
		size, impl string
		base       float64
	}{{"64B", "cmrt", 30}, {"64B", "tcp", 15}, {"1MiB", "cmrt", 480}, {"1MiB", "tcp", 440}} {
		for k := 0; k < 100; k++ {
			q := float64(k) / 100
			fmt.Fprintf(&csv, "%s,%s,%g,%.3f,20000,5\n", s.size, s.impl, q, s.base*(1+3*q*q*q))
		}
		fmt.Fprintf(&csv, "%s,%s,0.999,%.3f,20000,5\n", s.size, s.impl, s.base*6)
	}
	cdf := filepath.Join(dir, "cdf.csv")
	if err := os.WriteFile(cdf, []byte(csv.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	series, err := readCDF(cdf)
	if err != nil {
		t.Fatal(err)
	}
	if len(series) != 4 || series[0].size != "64B" || series[0].impl != "cmrt" || len(series[0].pts) != 101 || series[0].samples != 20000 {
		t.Fatalf("series %+v", series[0])
	}
	p, err := cdfPlot(series, parseFile(t, filepath.Join(committed, "results.txt")))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(p.Title.Text, "round trips of 5 runs pooled; AMD EPYC, 2 CPUs") {
		t.Errorf("title %q", p.Title.Text)
	}
	out := filepath.Join(dir, "cdf.png")
	if err := savePNG(p, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	checkPNG(t, b, blue, red) // a colour per size
	// run draws it as pingpong-cdf.png, next to the others.
	var msgs bytes.Buffer
	if err := run(filepath.Join(committed, "results.txt"), cdf, dir, &msgs); err != nil || msgs.Len() != 0 {
		t.Fatalf("%v %q", err, msgs.String())
	}
	for _, name := range []string{"setup-rate.png", "dispatch-rate.png"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	if b2, err := os.ReadFile(filepath.Join(dir, "pingpong-cdf.png")); err != nil || !bytes.Equal(b, b2) {
		t.Errorf("run's pingpong-cdf.png differs from the plot's: %v", err)
	}
	// The tail scale puts 90%, 99%, 99.9% equally apart.
	n := func(q float64) float64 { return tailScale{}.Normalize(0, 0.999, q) }
	if d1, d2 := n(0.99)-n(0.9), n(0.999)-n(0.99); math.Abs(d1-d2) > 1e-9 || n(0) != 0 || math.Abs(n(0.999)-1) > 1e-9 {
		t.Errorf("tail scale: %v %v", d1, d2)
	}
}

func TestErrors(t *testing.T) {
	dir := t.TempDir()
	var msgs bytes.Buffer
	if err := run(filepath.Join(dir, "missing.txt"), "", dir, &msgs); err == nil {
		t.Error("a missing report drew")
	}
	empty := filepath.Join(dir, "empty.txt")
	if err := os.WriteFile(empty, []byte("date: today\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(empty, "", dir, &msgs); err == nil || !strings.Contains(err.Error(), "nothing to draw") {
		t.Errorf("empty report: %v", err)
	}
	bad := filepath.Join(dir, "bad.csv")
	if err := os.WriteFile(bad, []byte("size,impl,quantile,us,samples,runs\n64B,cmrt,half,3,1,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(filepath.Join(committed, "results.txt"), bad, dir, &msgs); err == nil || !strings.Contains(err.Error(), "bad number") {
		t.Errorf("bad CSV: %v", err)
	}
}

// plotModules are the modules gonum/plot brings in and nothing else of
// cmrt's uses. (golang.org/x/text is not among them: gRPC, which the rgrpc
// example links, brings it too.)
var plotModules = []string{"gonum.org/", "codeberg.org/go-fonts/", "codeberg.org/go-latex/", "codeberg.org/go-pdf/",
	"git.sr.ht/~sbinet/", "github.com/ajstarks/svgo", "github.com/golang/freetype", "golang.org/x/image/"}

// TestNoGonumInCore checks that only bench/ links gonum/plot: no package
// a program using cmrt imports (id, reactor, the fabrics, the examples,
// the commands) depends on it.
func TestNoGonumInCore(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	list := func(args ...string) []string {
		cmd := exec.Command(goTool, args...)
		cmd.Dir = filepath.Join(committed, "..")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %v: %v", args, err)
		}
		return strings.Fields(string(out))
	}
	var core []string
	for _, p := range list("list", "./...") {
		if !strings.HasPrefix(p, "github.com/cmrt/cmrt/bench") {
			core = append(core, p)
		}
	}
	if len(core) < 10 {
		t.Fatalf("only %d packages outside bench/: %v", len(core), core)
	}
	for _, dep := range list(append([]string{"list", "-deps"}, core...)...) {
		for _, m := range plotModules {
			if strings.HasPrefix(dep, m) {
				t.Errorf("a package outside bench/ links %s", dep)
			}
		}
	}
	// The check sees gonum where it is.
	found := false
	for _, dep := range list("list", "-deps", "./bench/cmd/benchplot") {
		found = found || strings.HasPrefix(dep, "gonum.org/v1/plot")
	}
	if !found {
		t.Error("go list -deps does not show benchplot linking gonum.org/v1/plot")
	}
}
