// Package bench holds cmrt's cross-package benchmarks, each measured
// against a plain-Go baseline in the same process and run:
//
//   - BenchmarkConnSetup: connections per second for
//     connect+accept+establish+disconnect(+destroy) over the software
//     fabric on loopback, with synchronous and asynchronous ids at 1, 10,
//     100 and 1000 concurrent ids, against raw TCP connect/accept (and
//     TCP with one request/reply exchange, the floor of an MPA handshake);
//     at concurrency 1 the synchronous run also reports the per-step
//     breakdown (resolve addr, resolve route, connect, disconnect, destroy).
//   - BenchmarkPingPong and BenchmarkStream: RC Send ping-pong latency
//     (p50/p99) and one-way streaming throughput for 64 B, 4 KiB and 1 MiB
//     messages, against raw TCP sockets.
//   - BenchmarkServerFirst: connections on which the server speaks first,
//     connect to the arrival of its 64-byte greeting, against TCP's dial
//     to greeting.
//   - BenchmarkScale: 10 000 connected RC ids (5 000 connections, both ends
//     in this process): heap and RSS per id, goroutines, set-up and
//     tear-down time, against Go TCP connections.
//   - BenchmarkTimeWait, BenchmarkIdleFabric, BenchmarkRouteLookup and
//     BenchmarkDestroyQueued (findings_test.go): costs found by profiling
//     the above, each next to what a fix would do.
//
// The reactor's dispatch benchmarks live in package reactor
// (reactor/bench_test.go). scripts/bench.sh runs everything, interleaving
// baseline and subject over several repetitions, and the programs in
// bench/cmd turn the output into ratios (benchreport) and a plot
// (benchplot). BENCHMARKS.md has the figures and how to read them.
//
// Client and server each get their own software fabric instance (their own
// epoll loop), as two processes would have.
package bench
