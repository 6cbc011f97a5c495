#!/usr/bin/env bash
# bench.sh - cmrt's benchmarks against their baselines, measured side by
# side in one run on this machine (make bench). BENCHMARKS.md explains the
# figures.
#
# Usage: scripts/bench.sh [--quick] [--vm | --no-vm]
#   --quick   (or BENCH_QUICK=1) fewer repetitions and shorter runs, no VM:
#             about 2 minutes, for CI
#   --vm      run the VM comparison (test/vm/bench.sh) even in quick mode
#   --no-vm   skip it
#
# What runs, each repetition interleaving subject and baseline (and
# alternating which goes first):
#   1. reactor/bench_test.go: dispatch inline and on pools of 1 and 4
#      against a Go-channel fan-out
#   2. bench: BenchmarkConnSetup, cmrt sync/async ids against Go TCP, at
#      1, 10, 100, 1000 concurrent ids; one process per case
#   3. bench: BenchmarkPingPong, BenchmarkStream and BenchmarkServerFirst,
#      RC against TCP
#   4. bench: BenchmarkScale, 10 000 ids (5 000 connections) in one process
#   5. bench: BenchmarkTimeWait, BenchmarkIdleFabric, BenchmarkRouteLookup,
#      BenchmarkDestroyQueued (the costs found by profiling)
#   6. examples/cmtime on loopback, and its socket baseline (-S)
#   7. the VM (when built): rdma-core's cmtime on siw0 and rxe0 against Go
#      cmtime on the software fabric and on the kernel fabric, one boot
# Every benchmark process runs in a fresh network namespace when this can
# (root and unshare(1)): TIME_WAIT sockets left by one case must not slow
# the next (see BenchmarkTimeWait). Then benchreport prints medians and
# rep-by-rep ratios and pools the ping-pong round trips into quantiles,
# benchplot draws setup-rate.png, dispatch-rate.png and pingpong-cdf.png
# from them (gonum/plot), and benchstat (if installed) adds its own tables.
#
# Progress: a line as each part starts, one per benchmark process with its
# time and count ("rep=2 conc=10 impl=tcp: 3.1s (22/80)"), and one as each
# part ends with its total time.
#
# Env: BENCH_OUT (output directory; default a new /tmp/cmrt-bench.*),
#      BENCH_REPS (repetitions; 5, quick 2), BENCH_NETNS=0 (no namespaces),
#      BENCH_UPDATE=1 (copy the report, the plots and the CDF quantiles to
#      bench/results.txt, bench/*.png and bench/pingpong-cdf.csv),
#      BENCH_VM_N (VM connections, 50), BENCH_VM_REPS (3),
#      VM_OUT (VM build; falls back to /work/vm/out), VM_RUN (run.sh;
#      default ../shared/vm/run.sh), VM_TIMEOUT (900 s).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
quick=${BENCH_QUICK:-0}
[ "$quick" = 0 ] || [ "$quick" = 1 ] || quick=1
vm=${BENCH_VM:-auto}
for a in "$@"; do
	case $a in
	--quick) quick=1 ;;
	--vm) vm=1 ;;
	--no-vm) vm=0 ;;
	-h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench.sh: unknown argument $a" >&2; exit 2 ;;
	esac
done

if [ "$quick" = 1 ]; then
	reps=${BENCH_REPS:-2}
	setup_n=800 reactor_time=300ms msg_time=150ms first_n=200 scale_ids=2000 scale_reps=1
	tw_levels=0,14000 tw_time=200ms tw_reps=1 idle_n=400 idle_reps=1 route_reps=1
	cmtime_c=200 cmtime_reps=1
else
	reps=${BENCH_REPS:-5}
	setup_n=3000 reactor_time=1s msg_time=500ms first_n=1000 scale_ids=10000 scale_reps=3
	tw_levels=0,7000,14000,28000 tw_time=500ms tw_reps=2 idle_n=1500 idle_reps=3 route_reps=2
	cmtime_c=1000 cmtime_reps=3
fi

out=${BENCH_OUT:-$(mktemp -d /tmp/cmrt-bench.XXXXXX)}
mkdir -p "$out/raw" "$out/cmtime" "$out/bin"
bin=$out/bin
failures=0
t_start=$(date +%s)
say() { printf '[bench %4ss] %s\n' $(($(date +%s) - t_start)) "$*"; }
# now and since T: a timestamp, and the time since one, for progress lines.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { d = b - a; if (d < 60) printf "%.1fs", d; else printf "%dm%02ds", d / 60, d % 60 }'; }
# part TITLE COUNT: a part of the run begins, with COUNT benchmark
# processes; the previous one ends with its time.
part_title= part_start= part_n=0 part_total=0
part() {
	end_part
	part_title=$1 part_total=$2 part_n=0 part_start=$(now)
	say "$part_title"
}
end_part() {
	[ -n "$part_title" ] || return 0
	say "${part_title%% *} done: $part_n of $part_total processes in $(since "$part_start")"
	part_title=
}
# progress DESC T0 [STATUS]: one benchmark process of the part is done.
progress() {
	part_n=$((part_n + 1))
	say "    $1: $(since "$2")${3:+ $3} ($part_n/$part_total)"
}

# Fresh network namespace per benchmark process, when allowed.
netns=0
if [ "${BENCH_NETNS:-1}" = 1 ] && command -v unshare >/dev/null && command -v ip >/dev/null &&
	unshare -n sh -c 'ip link set lo up' 2>/dev/null; then
	netns=1
fi
isolated() {
	if [ "$netns" = 1 ]; then
		unshare -n sh -c 'ip link set lo up && exec "$@"' sh "$@"
	else
		"$@"
	fi
}

# run FILE DESC CMD...: a benchmark process; its output is appended to
# raw/FILE.txt.
run() {
	local file=$1 desc=$2 t0
	shift 2
	t0=$(now)
	echo "# $desc" >>"$out/raw/$file.txt"
	if ! (cd "$out" && isolated "$@") >>"$out/raw/$file.txt" 2>&1; then
		failures=$((failures + 1))
		progress "$desc" "$t0" "FAILED (see $out/raw/$file.txt)"
		return
	fi
	progress "$desc" "$t0"
}

say "building into $out/bin"
go test -c -o "$bin/bench.test" ./bench
go test -c -o "$bin/reactor.test" ./reactor
go build -o "$bin/cmtime" ./examples/cmtime
go build -o "$bin/benchreport" ./bench/cmd/benchreport
go build -o "$bin/benchplot" ./bench/cmd/benchplot

{
	echo "date:      $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
	echo "host:      $(uname -srm)"
	echo "cpu:       $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) CPUs"
	echo "memory:    $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
	echo "go:        $(go version | cut -d' ' -f3-)"
	if git rev-parse --git-dir >/dev/null 2>&1; then
		echo "tree:      $(git rev-parse --short HEAD) + $(git status --porcelain 2>/dev/null | wc -l) changed/untracked files"
	fi
	echo "mode:      $([ "$quick" = 1 ] && echo quick || echo full), $reps repetitions, netns per process: $([ "$netns" = 1 ] && echo yes || echo no)"
	echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (start)"
} >"$out/env.txt"
say "$(tail -n 2 "$out/env.txt" | head -n 1 | sed 's/^mode: *//')"

# runb FILE DESC ARGS...: run of the bench package's test binary.
runb() {
	local file=$1 desc=$2
	shift 2
	run "$file" "$desc" "$bin/bench.test" -test.run '^$' -test.benchmem "$@"
}
swapflag() { [ $(($1 % 2)) = 0 ] && echo -bench.swap=true || echo -bench.swap=false; }

part "1. reactor dispatch ($reps runs)" "$reps"
for rep in $(seq "$reps"); do
	run reactor "rep=$rep" "$bin/reactor.test" -test.run '^$' -test.benchmem -test.benchtime "$reactor_time" \
		-test.bench '^Benchmark(DispatchInline|DispatchPool1|DispatchPool4|GoChannelFanout|LineTransfer)$'
done

part "2. connection set-up ($reps runs x 4 concurrency levels x 4 implementations, $setup_n connections each)" $((reps * 16))
for rep in $(seq "$reps"); do
	for conc in 1 10 100 1000; do
		n=$((setup_n > 3 * conc ? setup_n : 3 * conc))
		impls="cmrt-sync cmrt-async tcp tcp-mpa"
		[ $((rep % 2)) = 0 ] && impls="tcp tcp-mpa cmrt-sync cmrt-async"
		for impl in $impls; do
			runb setup "rep=$rep conc=$conc impl=$impl" -test.benchtime "${n}x" -bench.conc "$conc" \
				-test.bench "^BenchmarkConnSetup\$/^conc=$conc\$/^impl=$impl\$"
		done
	done
done

part "3. messages: ping-pong, streaming, server first ($reps runs)" $((reps * 3))
for rep in $(seq "$reps"); do
	runb msg "rep=$rep ping-pong" -test.benchtime "$msg_time" "$(swapflag "$rep")" -test.bench '^BenchmarkPingPong$' \
		-bench.samples "$out/samples/rep$rep"
	runb msg "rep=$rep stream" -test.benchtime "$msg_time" "$(swapflag "$rep")" -test.bench '^BenchmarkStream$'
	runb msg "rep=$rep server-first" -test.benchtime "${first_n}x" "$(swapflag "$rep")" -test.bench '^BenchmarkServerFirst$'
done

part "4. scale: $scale_ids ids ($scale_reps runs, one process per implementation)" $((scale_reps * 3))
for rep in $(seq "$scale_reps"); do
	impls="cmrt cmrt-qp tcp"
	[ $((rep % 2)) = 0 ] && impls="tcp cmrt-qp cmrt"
	for impl in $impls; do
		runb scale "rep=$rep impl=$impl" -test.benchtime 1x -bench.scale "$scale_ids" \
			-test.bench "^BenchmarkScale\$/^impl=$impl\$"
	done
done

part "5. isolated costs: TIME_WAIT, idle fabric, route lookups, destroy with queued events" $((tw_reps + 3 * idle_reps + 2 * route_reps))
for rep in $(seq "$tw_reps"); do
	runb findings "rep=$rep time-wait" -test.benchtime "$tw_time" -bench.tw "$tw_levels" -test.bench '^BenchmarkTimeWait$'
done
for rep in $(seq "$idle_reps"); do
	order="cold warm grace"
	[ $((rep % 2)) = 0 ] && order="grace warm cold"
	for impl in $order; do
		runb findings "rep=$rep idle-fabric $impl" -test.benchtime "${idle_n}x" -test.bench "^BenchmarkIdleFabric\$/^impl=$impl\$"
	done
done
for rep in $(seq "$route_reps"); do
	runb findings "rep=$rep route-lookup" -test.benchtime "$reactor_time" -test.bench '^BenchmarkRouteLookup$'
	runb findings "rep=$rep destroy-queued" -test.benchtime "$reactor_time" -test.bench '^BenchmarkDestroyQueued$'
done

part "6. examples/cmtime on loopback: $cmtime_c connections ($cmtime_reps runs, with the -S socket baseline)" $((cmtime_reps * 2))
# cmtime_pair OUTFILE PORT ARGS...: a server and a client in one namespace.
cat >"$bin/cmtime-pair.sh" <<'EOF'
#!/bin/sh
# cmtime-pair.sh CMTIME OUT PORT ARGS...: server in the background, client
# to 127.0.0.1, the client's output to OUT.
cm=$1 out=$2 port=$3
shift 3
"$cm" -b 127.0.0.1 -p "$port" "$@" >"$out.server" 2>&1 &
srv=$!
sleep 0.3
"$cm" -s 127.0.0.1 -p "$port" "$@" >"$out" 2>&1
rc=$?
wait $srv || rc=$?
exit $rc
EOF
chmod +x "$bin/cmtime-pair.sh"
for rep in $(seq "$cmtime_reps"); do
	for kind in cmrt sock; do
		flag=
		[ "$kind" = sock ] && flag=-S
		t0=$(now)
		if ! isolated "$bin/cmtime-pair.sh" "$bin/cmtime" "$out/cmtime/rep.$rep.$kind.txt" $((7471 + 10 * rep)) \
			-c "$cmtime_c" $flag; then
			failures=$((failures + 1))
			progress "rep=$rep $kind" "$t0" "FAILED (see $out/cmtime/rep.$rep.$kind.txt)"
		else
			progress "rep=$rep $kind" "$t0"
		fi
	done
done
end_part

# 7. The VM.
vm_out=${VM_OUT:-}
if [ -z "$vm_out" ] || [ ! -r "$vm_out/initramfs.cpio.gz" ]; then
	for cand in /work/vm/out; do
		[ -r "$cand/initramfs.cpio.gz" ] && vm_out=$cand && break
	done
fi
vm_run=${VM_RUN:-$root/../shared/vm/run.sh}
[ -x "$vm_run" ] || vm_run=/work/shared/vm/run.sh
skip=
if [ "$vm" = 0 ]; then
	skip="--no-vm"
elif [ "$vm" = auto ] && [ "$quick" = 1 ]; then
	skip="quick mode (use --vm to include it)"
elif [ -z "$vm_out" ] || [ ! -r "$vm_out/initramfs.cpio.gz" ] || [ ! -r "$vm_out/vmlinuz" ]; then
	skip="no VM built (looked in ${VM_OUT:-\$VM_OUT unset} and /work/vm/out; build it with make vm)"
elif [ ! -x "$vm_run" ]; then
	skip="no run.sh (VM_RUN=$vm_run)"
fi
if [ -n "$skip" ]; then
	say "7. VM: skipped: $skip"
	echo "$skip" >"$out/vm.skipped"
else
	part "7. VM ($vm_out): Go cmtime vs rdma-core cmtime, ${BENCH_VM_N:-50} connections, ${BENCH_VM_REPS:-3} runs (one boot)" 1
	t0=$(now)
	vmdir=$bin/vm
	mkdir -p "$vmdir"
	CGO_ENABLED=0 go build -trimpath -o "$vmdir/go-cmtime" ./examples/cmtime
	cp test/vm/bench.sh "$vmdir/bench.sh"
	set +e
	VM_OUT=$vm_out "$vm_run" -t "${VM_TIMEOUT:-900}" -d "$vmdir" \
		"BENCH_VM_N=${BENCH_VM_N:-50} BENCH_VM_REPS=${BENCH_VM_REPS:-3} sh /extra/bench.sh" >"$out/vm.log" 2>&1
	rc=$?
	set -e
	if [ "$rc" != 0 ]; then
		failures=$((failures + 1))
		progress "VM boot" "$t0" "FAILED (rc=$rc): $(grep -c -- '--- RESULT .*: FAIL' "$out/vm.log") failed tests; see $out/vm.log"
	else
		progress "VM boot" "$t0"
	fi
	end_part
fi

echo "load avg:  $(cut -d' ' -f1-3 /proc/loadavg) (end)" >>"$out/env.txt"
say "report"
{
	cat "$out/env.txt"
	"$bin/benchreport" -dir "$out" -cdf "$out/pingpong-cdf.csv"
} >"$out/report.txt"
cdf=
[ -s "$out/pingpong-cdf.csv" ] && cdf=$out/pingpong-cdf.csv
say "plots"
if ! "$bin/benchplot" -report "$out/report.txt" ${cdf:+-cdf "$cdf"} -outdir "$out"; then
	failures=$((failures + 1))
	say "FAILED: benchplot"
fi
benchstat=$(command -v benchstat || true)
[ -n "$benchstat" ] || [ ! -x "$(go env GOPATH)/bin/benchstat" ] || benchstat=$(go env GOPATH)/bin/benchstat
if [ -n "$benchstat" ]; then
	for f in setup msg scale; do
		[ -s "$out/raw/$f.txt" ] && "$benchstat" -col /impl "$out/raw/$f.txt" >"$out/benchstat.$f.txt" 2>&1 || true
	done
	echo "(benchstat tables: $out/benchstat.*.txt)" >>"$out/report.txt"
else
	echo "(benchstat not installed: go install golang.org/x/perf/cmd/benchstat@latest; medians above are benchreport's)" >>"$out/report.txt"
fi
cat "$out/report.txt"
if [ "${BENCH_UPDATE:-0}" = 1 ]; then
	updated=bench/results.txt
	cp "$out/report.txt" bench/results.txt
	for f in setup-rate.png dispatch-rate.png pingpong-cdf.png pingpong-cdf.csv; do
		if [ -s "$out/$f" ]; then
			cp "$out/$f" "bench/$f"
			updated="$updated bench/$f"
		fi
	done
	say "updated $updated"
fi
say "done in $(since "$t_start"): $out (report.txt, *.png, raw/, samples/), $failures failure(s)"
[ "$failures" = 0 ]
