#!/usr/bin/env bash
# interop-kernel.sh - run the kernel fabric's VM tests: test/vm/kernel.sh
# (the CM, QP-less, and the package's device tests, data path included),
# then test/vm/kernel-verbs.sh (the Go examples with CMRT_FABRIC=kernel
# against rdma-core's, both roles, real QPs, messages checked). Builds
# kcheck, the fabric's test binaries and the Go examples statically into a
# temp dir, boots the rxe/siw VM once per script and exits non-zero if any
# test fails.
#
#   scripts/interop-kernel.sh           both suites
#   scripts/interop-kernel.sh --bench   test/vm/kernel-bench.sh instead: the
#                                       same-boot figures of BENCHMARKS.md
#                                       part 7 (output in $KB_OUT)
#
# Env: VM_OUT, VM_DL (the VM build; default /work/vm/out, /work/vm/dl),
#      VM_RUN (run.sh; default /work/shared/vm/run.sh), VM_TIMEOUT (600 s
#      per boot), KBENCH_N (connections timed by kernel.sh, 100),
#      KBENCH_SKIP_CMTIME=1, KRACE_SKIP=1 (no race-detector run of the
#      device tests), KV_CMTIME_N, KV_SKIP_BENCH (kernel-verbs.sh),
#      KB_N, KB_ITERS, KB_PINGS, KB_REPS (kernel-bench.sh), KB_OUT (where
#      --bench keeps its log; default a new /tmp/cmrt-kbench.*),
#      KB_BASE_KCHECK (a static kcheck from another tree, run as
#      kcheck-base next to this tree's for a before/after in one boot).
set -euo pipefail
cd "$(dirname "$0")/.."
export VM_OUT=${VM_OUT:-/work/vm/out} VM_DL=${VM_DL:-/work/vm/dl}
run=${VM_RUN:-/work/shared/vm/run.sh}
bench=
[ "${1:-}" = --bench ] && bench=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -trimpath -o "$tmp/kcheck" ./test/kcheck
for e in ucmatose rping udaddy mckey rdma_server rdma_client cmtime; do
	CGO_ENABLED=0 go build -trimpath -o "$tmp/go-$e" "./examples/$e"
done
cp test/vm/kernel.sh test/vm/kernel-verbs.sh test/vm/kernel-bench.sh test/vm/pairs.sh "$tmp/"
[ -n "${KB_BASE_KCHECK:-}" ] && cp "$KB_BASE_KCHECK" "$tmp/kcheck-base"

# boot NAME SCRIPT ENV: one VM run of a script; fails on any FAIL result,
# a missing summary or a failed run.
boot() {
	local name=$1 script=$2 envs=$3 log=$tmp/$1.log rc
	set +e
	"$run" -t "${VM_TIMEOUT:-600}" -d "$tmp" "$envs sh /extra/$script" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	set -e
	if grep -q -- '^--- RESULT .*: FAIL' "$log"; then
		echo "interop-kernel: $name: FAIL:" >&2
		grep -- '^--- RESULT .*: FAIL' "$log" >&2
		return 1
	fi
	if [ "$rc" != 0 ]; then
		echo "interop-kernel: $name: VM run failed (rc=$rc)" >&2
		return "$rc"
	fi
	grep -q '=== SUMMARY: .* 0 failed' "$log" || { echo "interop-kernel: $name: no summary" >&2; return 1; }
	echo "interop-kernel: $name: $(grep -c -- '^--- RESULT .*: PASS' "$log") passed"
}

if [ -n "$bench" ]; then
	out=${KB_OUT:-$(mktemp -d /tmp/cmrt-kbench.XXXXXX)}
	mkdir -p "$out"
	env_line="KB_N=${KB_N:-50} KB_ITERS=${KB_ITERS:-1000} KB_PINGS=${KB_PINGS:-300} KB_REPS=${KB_REPS:-3}"
	VM_TIMEOUT=${VM_TIMEOUT:-1500} boot kernel-bench kernel-bench.sh "$env_line"
	cp "$tmp/kernel-bench.log" "$out/"
	echo "interop-kernel: benchmark log in $out/kernel-bench.log"
	exit 0
fi

CGO_ENABLED=0 go test -c -trimpath -o "$tmp/kernel.test" ./fabric/kernel
# The race detector needs cgo: a dynamic binary, which runs in the VM when
# its glibc (Debian bookworm, 2.36) is not older than the host's.
if [ -z "${KRACE_SKIP:-}" ] && command -v gcc >/dev/null; then
	CGO_ENABLED=1 go test -race -c -trimpath -o "$tmp/kernel.race.test" ./fabric/kernel || rm -f "$tmp/kernel.race.test"
fi
status=0
boot kernel kernel.sh "KBENCH_N=${KBENCH_N:-100} KBENCH_SKIP_CMTIME=${KBENCH_SKIP_CMTIME:-}" || status=1
boot kernel-verbs kernel-verbs.sh \
	"KV_CMTIME_N=${KV_CMTIME_N:-50} KV_SKIP_BENCH=${KV_SKIP_BENCH:-}" || status=1
if [ "$status" != 0 ]; then
	echo "interop-kernel: FAIL" >&2
	exit 1
fi
echo "interop-kernel: all tests passed"
