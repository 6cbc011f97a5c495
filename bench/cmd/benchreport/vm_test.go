package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVMReport: part 7 of the report from a VM log holding two
// repetitions of rdma-core's cmtime on siw0, Go cmtime on the software
// fabric and Go cmtime's socket baseline (-S), cut from a real run of
// test/vm/bench.sh: each tool's steps (the socket baseline has only
// create id, connect and destroy), their sums, and the ratios, rep by
// rep; tools absent from the log show "-".
func TestVMReport(t *testing.T) {
	reportHas(t, "testdata/vm", (*report).vm, []string{
		"== 7. In the VM (TCG, one boot, 50 connections;",
		"  create id      0.840 [0.820..0.860]  1.92 [0.999..2.84]  -             -             1.15 [1.06..1.24]\n",
		"  resolve addr   12.5 [11.9..13.2]     6.31 [5.11..7.52]   -             -             -\n",
		"  connect        50.9 [42.1..59.8]     77.3 [70.2..84.5]   -             -             29.9 [14.4..45.4]\n",
		"  destroy        1.04 [1.00..1.08]     1.97 [1.03..2.92]   -             -             6.49 [3.93..9.05]\n",
		"  sum            105 [96.9..113]       97.7 [92.6..103]    -             -             37.5 [19.4..55.7]\n",
		"  Go soft / rdma-core siw, sum of steps     0.94x [0.82..1.06]\n",
		"  Go kernel / rdma-core rxe, sum of steps   -\n",
		"  rdma-core siw / sockets -S, sum of steps  3.52x [2.03..5.00]\n",
		"  Go soft / sockets -S, sum of steps        3.48x [1.66..5.31]\n",
	})
}

// reportHas runs part of the report on the bench.sh output in dir (after
// loading its raw results) and checks that it holds every line of want.
func reportHas(t *testing.T, dir string, part func(*report), want []string) {
	t.Helper()
	var out bytes.Buffer
	r := &report{w: &out, dir: dir}
	r.load()
	part(r)
	got := out.String()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("report lacks %q; it is:\n%s", w, got)
		}
	}
}
