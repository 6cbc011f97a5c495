#!/usr/bin/env bash
# interop-siw.sh - cmrt's software fabric against the kernel's soft-iWARP.
#
# Builds the Go ucmatose, rping, rdma_server and rdma_client statically,
# boots the test VM with them (as go-<name>, next to rdma-core's C
# programs) and runs
# test/vm/siw.sh there. Exits non-zero if any test fails.
#
# Env: VM_OUT, VM_DL (default /work/vm/out, /work/vm/dl), VM_RUN (the VM's
# run.sh, default /work/shared/vm/run.sh), VM_TIMEOUT (seconds, default 900).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
export VM_OUT=${VM_OUT:-/work/vm/out} VM_DL=${VM_DL:-/work/vm/dl}
run_sh=${VM_RUN:-/work/shared/vm/run.sh}

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
(
	cd "$root"
	CGO_ENABLED=0 go build -trimpath -o "$dir/go-ucmatose" ./examples/ucmatose
	CGO_ENABLED=0 go build -trimpath -o "$dir/go-rping" ./examples/rping
	CGO_ENABLED=0 go build -trimpath -o "$dir/go-rdma_server" ./examples/rdma_server
	CGO_ENABLED=0 go build -trimpath -o "$dir/go-rdma_client" ./examples/rdma_client
	cp test/vm/pairs.sh "$dir/"
)

rc=0
"$run_sh" -t "${VM_TIMEOUT:-900}" -d "$dir" -f "$root/test/vm/siw.sh" | tee "$dir/log" || rc=$?
# Any failed test, or no summary at all, fails the run.
if grep -q -- '^--- RESULT .*: FAIL' "$dir/log" ||
	! grep -q '^=== SUMMARY: [0-9]* passed, 0 failed' "$dir/log"; then
	[ "$rc" != 0 ] || rc=1
fi
echo "interop-siw: $(grep -c -- '^--- RESULT .*: PASS' "$dir/log") passed," \
	"$(grep -c -- '^--- RESULT .*: FAIL' "$dir/log") failed, exit $rc"
exit "$rc"
