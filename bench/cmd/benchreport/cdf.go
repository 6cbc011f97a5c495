package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// cdfLevels are the quantiles writeCDF gives: every percent, then the
// tail while the samples support it.
func cdfLevels(n int) []float64 {
	var qs []float64
	for k := 0; k < 100; k++ {
		qs = append(qs, float64(k)/100)
	}
	for _, q := range []float64{0.995, 0.999, 0.9995, 0.9999, 0.99995, 0.99999} {
		if float64(n)*(1-q) >= 1-1e-9 { // one sample at least beyond q
			qs = append(qs, q)
		}
	}
	return qs
}

// errNoSamples: the run recorded no round trips (no -bench.samples, or
// part 3 did not run).
var errNoSamples = errors.New("no ping-pong round trips recorded")

// caseFile is a file of round trips: BenchmarkPingPong_size=<size>_impl=<impl>.txt.
var caseFile = regexp.MustCompile(`^BenchmarkPingPong_size=([^_]+)_impl=(.+)\.txt$`)

// readSamples reads one file of BenchmarkPingPong's round trips (ns).
func readSamples(path string) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []int64
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		v, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// writeCDF pools each ping-pong case's round trips over the repetitions
// (dir/samples/*/) and writes their quantiles as CSV:
// size,impl,quantile,us,samples,runs; sizes in increasing order, cmrt
// before its baseline. The quantile q is the sorted pool's element at
// index q*n, as the benchmark's own p50 and p99.
func writeCDF(dir, out string) error {
	files, err := filepath.Glob(filepath.Join(dir, "samples", "*", "BenchmarkPingPong_*.txt"))
	if err != nil {
		return err
	}
	type key struct{ size, impl string }
	pools := map[key][]int64{}
	runs := map[key]int{}
	for _, f := range files {
		m := caseFile.FindStringSubmatch(filepath.Base(f))
		if m == nil {
			continue
		}
		s, err := readSamples(f)
		if err != nil {
			return err
		}
		k := key{m[1], m[2]}
		pools[k] = append(pools[k], s...)
		runs[k]++
	}
	if len(pools) == 0 {
		return fmt.Errorf("%w under %s", errNoSamples, filepath.Join(dir, "samples"))
	}
	keys := make([]key, 0, len(pools))
	for k := range pools {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := sizeBytes(a.size) - sizeBytes(b.size); c != 0 {
			if c < 0 {
				return -1
			}
			return 1
		}
		if (a.impl == "cmrt") != (b.impl == "cmrt") {
			if a.impl == "cmrt" {
				return -1
			}
			return 1
		}
		return strings.Compare(a.impl, b.impl)
	})
	var b strings.Builder
	b.WriteString("size,impl,quantile,us,samples,runs\n")
	for _, k := range keys {
		s := pools[k]
		slices.Sort(s)
		for _, q := range cdfLevels(len(s)) {
			v := s[min(len(s)-1, int(q*float64(len(s))))]
			fmt.Fprintf(&b, "%s,%s,%s,%s,%d,%d\n", k.size, k.impl, strconv.FormatFloat(q, 'f', -1, 64),
				strconv.FormatFloat(float64(v)/1e3, 'f', 3, 64), len(s), runs[k])
		}
	}
	return os.WriteFile(out, []byte(b.String()), 0o644)
}

// sizeBytes reads a size name: 64B, 4KiB, 1MiB.
func sizeBytes(s string) float64 {
	for _, u := range []struct {
		suffix string
		mult   float64
	}{{"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			v, _ := strconv.ParseFloat(n, 64)
			return v * u.mult
		}
	}
	return 0
}
