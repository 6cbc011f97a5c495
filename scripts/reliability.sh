#!/usr/bin/env bash
# reliability.sh - cmrt's reliability suite across hosts (issue 9): faults,
# load and bad input, in network namespaces joined by a bridge.
#
#   host a (10.77.0.1, .11, fd77::1) ┐
#   host b (10.77.0.2, .12, fd77::2) ├─ br0 in the switch namespace
#   host c (10.77.0.3, .13, fd77::3) ┘   (port sw-<host>; a cut detaches it)
#
# The test binary (internal/reliability) runs in host a; it starts its
# helper programs (the same binary in another role) in b and c with
# ip netns exec, and cuts links in the switch namespace. The namespaces are
# removed on exit, also on failure or interrupt.
#
# Needs root (network namespaces). Where they cannot be created the suite is
# skipped, with the reason printed, and the script exits 0. Exits non-zero
# on any failure, after a summary of results and measured figures.
#
# Progress: among the tests' own output (go test -v), a stamped line as
# each test starts ("[reliability  42s] TestLinkCut: running (3/21)") and
# as it ends, with its result and time.
#
# Environment:
#   CMRT_REL_RUN=regexp     run only the matching tests (go test -run)
#   CMRT_REL_CYCLES=10000   connect/disconnect cycles of the load test
#   CMRT_REL_CONNS=1000     concurrently established ids with traffic
#   CMRT_REL_DURATION=15s   how long those exchange messages
#   CMRT_REL_RACE=1         build the test binary with -race (slow)
#   CMRT_REL_KEEP=1         keep the work directory (logs, binary)
#   CMRT_REL_ARGS=...       more arguments for the test binary (-test.cpuprofile=...)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}

skip() {
	echo "reliability: SKIPPED: $*"
	exit 0
}

[ "$(uname -s)" = Linux ] || skip "needs Linux network namespaces"
command -v ip >/dev/null || skip "ip(8) (iproute2) is not installed"
[ "$(id -u)" = 0 ] || skip "needs root to create network namespaces (run as root, e.g. sudo make reliability)"

tag=cmrt$$
NS_SW=$tag-sw NS_A=$tag-a NS_B=$tag-b NS_C=$tag-c
work=$(mktemp -d /tmp/cmrt-reliability.XXXXXX)

cleanup() {
	set +e
	for ns in $NS_A $NS_B $NS_C $NS_SW; do
		if ip netns list 2>/dev/null | grep -qw "$ns"; then
			pids=$(ip netns pids "$ns" 2>/dev/null)
			[ -n "$pids" ] && kill -9 $pids 2>/dev/null
			ip netns del "$ns" 2>/dev/null
		fi
	done
	if [ "${CMRT_REL_KEEP:-}" = 1 ]; then
		echo "reliability: work directory kept: $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if ! ip netns add "$NS_SW" 2>"$work/netns.err"; then
	skip "cannot create a network namespace: $(cat "$work/netns.err")"
fi
ip netns add "$NS_A"
ip netns add "$NS_B"
ip netns add "$NS_C"
ip -n "$NS_SW" link add br0 type bridge
ip -n "$NS_SW" link set br0 up
ip -n "$NS_SW" link set lo up
n=0
for h in a b c; do
	n=$((n + 1))
	eval ns=\$NS_$(echo $h | tr a-z A-Z)
	ip link add eth0 netns "$ns" type veth peer name "sw-$h" netns "$NS_SW"
	ip -n "$NS_SW" link set "sw-$h" master br0 up
	ip -n "$ns" link set lo up
	ip -n "$ns" link set eth0 up
	ip -n "$ns" addr add "10.77.0.$n/24" dev eth0
	ip -n "$ns" addr add "10.77.0.1$n/24" dev eth0
	ip -n "$ns" addr add "fd77::$n/64" dev eth0 nodad
done

export CMRT_RELIABILITY=1
export CMRT_REL_NS_SW=$NS_SW CMRT_REL_NS_A=$NS_A CMRT_REL_NS_B=$NS_B CMRT_REL_NS_C=$NS_C
export CMRT_REL_ADDR_A=10.77.0.1 CMRT_REL_ADDR_B=10.77.0.2 CMRT_REL_ADDR_C=10.77.0.3
export CMRT_REL_ADDR2_A=10.77.0.11 CMRT_REL_ADDR2_B=10.77.0.12 CMRT_REL_ADDR2_C=10.77.0.13
export CMRT_REL_ADDR6_A=fd77::1 CMRT_REL_ADDR6_B=fd77::2 CMRT_REL_ADDR6_C=fd77::3
export CMRT_REL_RESULTS=$work/results.tsv
: >"$CMRT_REL_RESULTS"

echo "reliability: building the test binary"
race=
[ "${CMRT_REL_RACE:-}" = 1 ] && race=-race
built=$(date +%s)
"$GO" test -c $race -o "$work/reliability.test" ./internal/reliability
echo "reliability: built in $(($(date +%s) - built))s"

# Each host must reach the others before anything is measured.
for i in $(seq 1 50); do
	if ip netns exec "$NS_A" bash -c 'exec 3<>/dev/tcp/10.77.0.2/9' 2>&1 | grep -q refused; then
		break
	fi
	sleep 0.1
done

# progress reads go test -v output, passes it on, and adds a stamped line
# as each top-level test starts and ends (subtests are the test's own
# business).
progress() {
	local line status name took n=0
	while IFS= read -r line; do
		printf '%s\n' "$line"
		case $line in
		"=== RUN   "*)
			name=${line#=== RUN   }
			case $name in */*) continue ;; esac
			n=$((n + 1))
			printf '[reliability %4ss] %s: running (%d/%s)\n' $(($(date +%s) - start)) "$name" "$n" "$total"
			;;
		"--- PASS: "* | "--- FAIL: "* | "--- SKIP: "*)
			read -r _ status name took <<<"$line"
			took=${took#(}
			printf '[reliability %4ss] %s: %s in %s\n' $(($(date +%s) - start)) "$name" "${status%:}" "${took%)}"
			;;
		esac
	done
}

total=$(ip netns exec "$NS_A" "$work/reliability.test" -test.list "${CMRT_REL_RUN:-.}" 2>/dev/null | grep -c '^Test' || true)
[ "${total:-0}" -gt 0 ] 2>/dev/null || total="?"
echo "reliability: running $total tests in $NS_A (b: $NS_B, c: $NS_C, switch: $NS_SW)"
start=$(date +%s)
set +e
ip netns exec "$NS_A" "$work/reliability.test" -test.v -test.count=1 -test.timeout=15m \
	${CMRT_REL_RUN:+-test.run="$CMRT_REL_RUN"} ${CMRT_REL_ARGS:-} 2>&1 | tee "$work/test.log" | progress
rc=${PIPESTATUS[0]}
set -e
took=$(($(date +%s) - start))

echo
echo "==================== reliability summary ===================="
grep -E '^(=== RUN|--- |    --- )' "$work/test.log" | grep -E -- '--- (PASS|FAIL|SKIP)' | sed 's/^/  /' || true
echo
echo "measured figures:"
if [ -s "$CMRT_REL_RESULTS" ]; then
	awk -F'\t' '{ printf "  %-44s %-26s %s\n", $1, $2, $3 }' "$CMRT_REL_RESULTS"
else
	echo "  (none)"
fi
fails=$(grep -cE -- '^\s*--- FAIL' "$work/test.log" || true)
echo
echo "tests failed: $fails; exit status $rc; ${took}s"
if [ "$rc" != 0 ]; then
	CMRT_REL_KEEP=1
	echo "reliability: FAIL (log: $work/test.log)"
	exit 1
fi
echo "reliability: PASS"
