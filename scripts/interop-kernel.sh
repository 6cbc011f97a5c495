#!/usr/bin/env bash
# interop-kernel.sh - run the kernel fabric's VM tests (test/vm/kernel.sh):
# builds kcheck and the fabric's test binary statically into a temp dir, boots the rxe/siw VM and exits
# non-zero if any test fails.
#
# Env: VM_OUT, VM_DL (the VM build; default /work/vm/out, /work/vm/dl),
#      VM_RUN (run.sh; default /work/shared/vm/run.sh), VM_TIMEOUT (300 s),
#      KBENCH_N (connections timed, 100), KBENCH_SKIP_CMTIME=1,
#      KRACE_SKIP=1 (no race-detector run of the device tests).
set -euo pipefail
cd "$(dirname "$0")/.."
export VM_OUT=${VM_OUT:-/work/vm/out} VM_DL=${VM_DL:-/work/vm/dl}
run=${VM_RUN:-/work/shared/vm/run.sh}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CGO_ENABLED=0 go build -trimpath -o "$tmp/kcheck" ./fabric/kernel/internal/kcheck
CGO_ENABLED=0 go test -c -trimpath -o "$tmp/kernel.test" ./fabric/kernel
# The race detector needs cgo: a dynamic binary, which runs in the VM when
# its glibc (Debian bookworm, 2.36) is not older than the host's.
if [ -z "${KRACE_SKIP:-}" ] && command -v gcc >/dev/null; then
	CGO_ENABLED=1 go test -race -c -trimpath -o "$tmp/kernel.race.test" ./fabric/kernel || rm -f "$tmp/kernel.race.test"
fi
cp test/vm/kernel.sh "$tmp/"
env_line="KBENCH_N=${KBENCH_N:-100} KBENCH_SKIP_CMTIME=${KBENCH_SKIP_CMTIME:-}"
set +e
"$run" -t "${VM_TIMEOUT:-300}" -d "$tmp" "$env_line sh /extra/kernel.sh" 2>&1 | tee "$tmp/out.log"
rc=${PIPESTATUS[0]}
set -e
if grep -q -- '--- RESULT .*: FAIL' "$tmp/out.log"; then
	echo "interop-kernel: FAIL:" >&2
	grep -- '--- RESULT .*: FAIL' "$tmp/out.log" >&2
	exit 1
fi
if [ "$rc" != 0 ]; then
	echo "interop-kernel: VM run failed (rc=$rc)" >&2
	exit "$rc"
fi
grep -q '=== SUMMARY: .* 0 failed' "$tmp/out.log" || { echo "interop-kernel: no summary" >&2; exit 1; }
echo "interop-kernel: all tests passed"
