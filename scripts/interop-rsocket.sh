#!/usr/bin/env bash
# interop-rsocket.sh - cmrt's rsocket package against librdmacm's rsockets.
#
# Builds the Go rstream and riostream statically, boots the test VM with
# them (as go-rstream, go-riostream, next to rdma-core's C programs) and
# runs test/vm/rsocket.sh there: Go against C, both roles, sizes 64 B to
# 1 MiB, data verified, with the Go side on the software fabric over siw0
# and on the kernel fabric over siw0 (iWARP: message words as Sends) and
# rxe0 (RoCE: Writes with Immediate). Exits non-zero if any test fails.
#
# Env: VM_OUT, VM_DL (default /work/vm/out, /work/vm/dl), VM_RUN (the VM's
# run.sh, default /work/shared/vm/run.sh), VM_TIMEOUT (seconds, default
# 1500), and for the VM script: RSOCKET_CONFIGS (FABRIC:DEVICE ..., default
# "soft:siw0 kernel:siw0 kernel:rxe0"), or the one configuration
# CMRT_FABRIC and RSOCKET_IP name ('$RXE_IP' for rxe0), RSOCKET_SIZES
# ("size:count ..."), RSOCKET_C_BASELINE=1. RSOCKET_SCRIPT=rsocket-loop.sh
# runs test/vm/rsocket-loop.sh instead (pairs repeated in one boot: its
# LOOP_PAIRS, LOOP_N, LOOP_T, LOOP_LOAD, LOOP_PRE).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
export VM_OUT=${VM_OUT:-/work/vm/out} VM_DL=${VM_DL:-/work/vm/dl}
run_sh=${VM_RUN:-/work/shared/vm/run.sh}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(
	cd "$root"
	CGO_ENABLED=0 go build -trimpath -o "$dir/go-rstream" ./examples/rstream
	CGO_ENABLED=0 go build -trimpath -o "$dir/go-riostream" ./examples/riostream
)
cp "$root/test/vm/rsocket.sh" "$root/test/vm/rsocket-loop.sh" "$dir/"
script=${RSOCKET_SCRIPT:-rsocket.sh}
env_line=""
for v in RSOCKET_CONFIGS CMRT_FABRIC RSOCKET_IP RSOCKET_SIZES RSOCKET_C_BASELINE LOOP_PAIRS LOOP_N LOOP_T LOOP_LOAD LOOP_PRE; do
	[ -z "${!v:-}" ] || env_line="$env_line $v='${!v}'"
done

rc=0
"$run_sh" -t "${VM_TIMEOUT:-1500}" -d "$dir" "$env_line sh /extra/$script" | tee "$dir/log" || rc=$?
# A pair the VM script ran again (--- RETRY NAME: why) counts by its
# retry: its first result is set apart in results.
sed -n 's/^--- RETRY \([^:]*\):.*/--- RESULT \1: FAIL/p' "$dir/log" >"$dir/retried"
grep -- '^--- RESULT ' "$dir/log" | sed 's/ (rc=.*//' | grep -v -x -F -f "$dir/retried" >"$dir/results" || true
if grep -q -- ': FAIL$' "$dir/results" ||
	! grep -q '^=== SUMMARY: [0-9]* passed, 0 failed' "$dir/log"; then
	[ "$rc" != 0 ] || rc=1
fi
for cfg in $(sed -n 's/^=== CONFIG \([^:]*\):.*/\1/p' "$dir/log"); do
	echo "interop-rsocket: $cfg: $(grep -c -- "-$cfg-.*: PASS$" "$dir/results") passed," \
		"$(grep -c -- "-$cfg-.*: FAIL$" "$dir/results") failed"
done
echo "interop-rsocket: $(grep -c -- ': PASS$' "$dir/results") passed," \
	"$(grep -c -- ': FAIL$' "$dir/results") failed, $(wc -l <"$dir/retried") retried after siw's close race, exit $rc"
exit "$rc"
