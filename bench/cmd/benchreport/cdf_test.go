package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeCase writes a file of round trips as BenchmarkPingPong
// -bench.samples does.
func writeCase(t *testing.T, dir, rep, size, impl string, ns []int64) {
	t.Helper()
	d := filepath.Join(dir, "samples", rep)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# BenchmarkPingPong/size=%s/impl=%s: %d round trips, ns, sorted\n", size, impl, len(ns))
	for _, v := range ns {
		fmt.Fprintf(&b, "%d\n", v)
	}
	if err := os.WriteFile(filepath.Join(d, "BenchmarkPingPong_size="+size+"_impl="+impl+".txt"), []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func seq(from, n, step int64) []int64 {
	out := make([]int64, n)
	for k := range out {
		out[k] = from + int64(k)*step
	}
	return out
}

func TestWriteCDF(t *testing.T) {
	dir := t.TempDir()
	// Two runs of 64B cmrt (1000 and 1000 round trips, 10..19.99 µs and
	// 20..29.99 µs), one of 4KiB tcp, one of 64B tcp.
	writeCase(t, dir, "rep1", "64B", "cmrt", seq(10000, 1000, 10))
	writeCase(t, dir, "rep2", "64B", "cmrt", seq(20000, 1000, 10))
	writeCase(t, dir, "rep1", "4KiB", "tcp", seq(5000, 100, 1000))
	writeCase(t, dir, "rep1", "64B", "tcp", seq(7000, 100, 100))
	out := filepath.Join(dir, "cdf.csv")
	if err := writeCDF(dir, out); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if lines[0] != "size,impl,quantile,us,samples,runs" {
		t.Fatalf("header %q", lines[0])
	}
	rows := map[string]string{}
	var order []string
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		key := f[0] + "/" + f[1]
		if len(order) == 0 || order[len(order)-1] != key {
			order = append(order, key)
		}
		rows[key+"@"+f[2]] = f[3] + "," + f[4] + "," + f[5]
	}
	// Sizes in order, cmrt before its baseline.
	if got := strings.Join(order, " "); got != "64B/cmrt 64B/tcp 4KiB/tcp" {
		t.Errorf("order %s", got)
	}
	// The pool of both runs: 2000 round trips; the median is the 1000th
	// smallest, the second run's first (20 µs); the tail stops where 2000
	// samples stop supporting it (1-q >= 1/2000).
	for q, want := range map[string]string{"0": "10.000,2000,2", "0.5": "20.000,2000,2", "0.99": "29.800,2000,2", "0.999": "29.980,2000,2", "0.9995": "29.990,2000,2"} {
		if got := rows["64B/cmrt@"+q]; got != want {
			t.Errorf("64B cmrt q=%s: %q, want %q", q, got, want)
		}
	}
	if _, ok := rows["64B/cmrt@0.9999"]; ok {
		t.Error("p99.99 of 2000 round trips")
	}
	if got := rows["4KiB/tcp@0.5"]; got != "55.000,100,1" {
		t.Errorf("4KiB tcp median %q", got)
	}
	if n := strings.Count(string(b), "4KiB,tcp,"); n != 100 {
		t.Errorf("%d quantiles of 100 round trips, want every percent", n)
	}

	// No round trips recorded: a sentinel, and no file.
	empty := t.TempDir()
	if err := writeCDF(empty, filepath.Join(empty, "cdf.csv")); !errors.Is(err, errNoSamples) {
		t.Errorf("no samples: %v", err)
	}
	if _, err := os.Stat(filepath.Join(empty, "cdf.csv")); !os.IsNotExist(err) {
		t.Errorf("a CSV without data: %v", err)
	}
	// A file that is not round trips fails.
	writeCase(t, empty, "rep1", "64B", "cmrt", nil)
	if err := os.WriteFile(filepath.Join(empty, "samples", "rep1", "BenchmarkPingPong_size=64B_impl=tcp.txt"), []byte("12\nfast\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeCDF(empty, filepath.Join(empty, "cdf.csv")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("bad file: %v", err)
	}
}
