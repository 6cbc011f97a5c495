package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// threadStat is one thread's CPU time (clock ticks) and context switches,
// from /proc/self/task: where a loop's time goes between the goroutine's
// thread, the runtime's other threads (sysmon, idle Ms) and the kernel.
type threadStat struct {
	name              string
	utime, stime      int64
	voluntary, forced int64
}

func threadStats() map[string]threadStat {
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil
	}
	out := make(map[string]threadStat, len(ents))
	for _, e := range ents {
		tid := e.Name()
		var ts threadStat
		if b, err := os.ReadFile("/proc/self/task/" + tid + "/stat"); err == nil {
			s := string(b)
			if k := strings.LastIndexByte(s, ')'); k > 0 {
				f := strings.Fields(s[k+1:])
				if len(f) > 12 {
					ts.utime, _ = strconv.ParseInt(f[11], 10, 64)
					ts.stime, _ = strconv.ParseInt(f[12], 10, 64)
				}
			}
		}
		if b, err := os.ReadFile("/proc/self/task/" + tid + "/status"); err == nil {
			for _, l := range strings.Split(string(b), "\n") {
				k, v, ok := strings.Cut(l, ":")
				if !ok {
					continue
				}
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				switch k {
				case "voluntary_ctxt_switches":
					ts.voluntary = n
				case "nonvoluntary_ctxt_switches":
					ts.forced = n
				}
			}
		}
		ts.name = tid
		out[tid] = ts
	}
	return out
}

// printThreadStats prints each thread's share of a loop of iters
// iterations between the snapshots a and b.
func printThreadStats(a, b map[string]threadStat, iters int) {
	tids := make([]string, 0, len(b))
	for t := range b {
		tids = append(tids, t)
	}
	sort.Strings(tids)
	for _, t := range tids {
		x, y := a[t], b[t]
		fmt.Printf("thread %s: user %d ticks, sys %d ticks, %.2f voluntary and %.2f involuntary switches per iter\n",
			t, y.utime-x.utime, y.stime-x.stime, float64(y.voluntary-x.voluntary)/float64(iters),
			float64(y.forced-x.forced)/float64(iters))
	}
}
