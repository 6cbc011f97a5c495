package main

import "testing"

// TestReactorReport: part 1 of the report from two repetitions of the
// reactor benchmarks: rates, CPU per event, the ratios to the fan-out,
// and the pool's CPU per event beyond the inline dispatch's in the same
// repetition's line transfers (400 ns / 200 ns = 2.00 in the first, 100 /
// 50 = 2.00 in the second; the medians of 400 and 100 ns and of 200 and
// 50 ns are their means), and the pool of 4 against the pool of 1 (3.03 /
// 5.00 = 0.61, 6.67 / 8.00 = 0.83).
func TestReactorReport(t *testing.T) {
	reportHas(t, "testdata/reactor", (*report).reactor, []string{
		"== 1. Reactor: channel fd -> epoll -> handler (reactor/bench_test.go), 2 runs\n",
		"  DispatchPool4    4.85M [3.03M..6.67M]  240 [150..330]    370 [210..530]  0 [0..0]      0 [0..0]\n",
		"  GoChannelFanout  11.2M [10.0M..12.5M]  90.0 [80.0..100]  -               0 [0..0]      0 [0..0]\n",
		"  DispatchPool1    6.50M [5.00M..8.00M]  162 [125..200]    215 [170..260]  0 [0..0]      0 [0..0]\n",
		"  pool of 4 / fan-out    0.42x [0.30..0.53]\n",
		"  pool of 4 / pool of 1  0.72x [0.61..0.83]\n",
		"  one line transfer (LineTransfer)  125 [50.0..200] ns\n",
		"  pool - inline, CPU per event      250 [100..400] ns\n",
		"  in line transfers per event       2.00 [2.00..2.00]\n",
	})
}
