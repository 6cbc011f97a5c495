#!/usr/bin/env bash
# diff-kernel.sh - differential testing of the software fabric against the
# kernel's rdma_cm (test/diffkernel, internal/diffkernel): builds the driver
# statically, boots the test VM (siw0 on dummy1, rxe0 on dummy0) and runs
# DIFF_N random CM call sequences there, each on the software fabric and on
# the kernel fabric side by side, comparing their journals step by step.
# Prints the seed (DIFF_SEED draws the same sequences again), each
# undocumented divergence shrunk to a minimal sequence with both traces,
# and as its last line
#
#   diff-kernel: N sequences, D divergences, K documented
#
# Exits non-zero when D > 0 or the run failed.
#
# Env: DIFF_N (sequences, default 120), DIFF_BUDGET (seconds: start no
#      sequence after this long, and the summary counts those run; the
#      VM's limit follows from it), DIFF_SEED (default: the clock),
#      DIFF_DEVS (siw0,rxe0), DIFF_WORKERS (2), DIFF_SHRINK (runs spent
#      shrinking each kind of divergence, 40), DIFF_ARGS (more flags),
#      DIFF_SEQ (a file holding one sequence: run it alone, verbosely, on
#      the first of DIFF_DEVS), DIFF_PROBES=1 (print the probe table: what
#      the kernel answers to each call the model refuses, in a set of
#      states, instead),
#      VM_OUT, VM_DL, VM_RUN (the VM; see interop-kernel.sh), VM_TIMEOUT
#      (seconds; default from DIFF_N).
set -euo pipefail
cd "$(dirname "$0")/.."
export VM_OUT=${VM_OUT:-/work/vm/out} VM_DL=${VM_DL:-/work/vm/dl}
run=${VM_RUN:-/work/shared/vm/run.sh}
n=${DIFF_N:-120}
seed=${DIFF_SEED:-$(( $(date +%s%N) & 0xffffffffffff ))}
devs=${DIFF_DEVS:-siw0,rxe0}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
CGO_ENABLED=0 go build -trimpath -o "$tmp/diffkernel" ./test/diffkernel
args="-n $n -seed $seed -dev $devs -workers ${DIFF_WORKERS:-2} -shrink ${DIFF_SHRINK:-40} ${DIFF_ARGS:-}"
budget=${DIFF_BUDGET:-}
if [ -n "$budget" ]; then
	args="-budget ${budget}s $args"
fi
if [ -n "${DIFF_SEQ:-}" ]; then
	cp "$DIFF_SEQ" "$tmp/seq.txt"
	args="-dev ${devs%%,*} -seq /extra/seq.txt ${DIFF_ARGS:-}"
elif [ -n "${DIFF_PROBES:-}" ]; then
	args="-dev $devs -probes ${DIFF_ARGS:-}"
fi
# Three seconds a sequence is generous under TCG with two at once on a
# loaded machine (a second is usual); shrinking
# and the VM's boot get their own allowance.
# With a budget, the sequences under way when it ends, the boot and the
# shutdown get two minutes more.
limit=$(( 300 + n * 3 ))
if [ -n "$budget" ] && [ $(( budget + 120 )) -lt "$limit" ]; then
	limit=$(( budget + 120 ))
fi
timeout=${VM_TIMEOUT:-$limit}
set +e
"$run" -t "$timeout" -d "$tmp" "diffkernel $args" > "$tmp/out.log" 2>&1
rc=$?
set -e
# The VM's console, without run.sh's trailer.
grep -v '^run.sh \[' "$tmp/out.log" | grep -v '^\[ *[0-9.]*\] reboot' || true
summary=$(grep '^diff-kernel: [0-9]* sequences' "$tmp/out.log" | tail -1 | tr -d '\r' || true)
echo "diff-kernel: took $(( $(date +%s) - start ))s in all (VM rc=$rc)"
if [ -n "${DIFF_SEQ:-}${DIFF_PROBES:-}" ]; then
	exit "$rc"
fi
if [ -z "$summary" ]; then
	echo "diff-kernel: no summary from the VM (rc=$rc): the run failed" >&2
	echo "diff-kernel: 0 sequences, 1 divergences, 0 documented"
	exit 1
fi
# Undocumented divergences again, each with its minimal sequence, and the
# sequences that failed to run: the console above is long, and a CI log's
# tail should name what failed.
tr -d '\r' < "$tmp/out.log" | awk '
	/^=== divergence / { on = 1; print; next }
	/^sequence [0-9]+ on [^ ]+: / { print; next }
	on && (/^    / || /^minimal sequence/ || /^its divergence/) { print; next }
	{ on = 0 }' | sed 's/^/again: /'
echo "$summary"
case $summary in
*", 0 divergences,"*) [ "$rc" = 0 ] || exit "$rc" ;;
*) exit 1 ;;
esac
