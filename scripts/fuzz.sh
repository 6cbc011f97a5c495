#!/usr/bin/env bash
# fuzz.sh [FUZZTIME] - run every native Go fuzz target in the module for
# FUZZTIME (default 30s) each. A failure leaves its input under the
# package's testdata/fuzz/<Target>/ and makes this script exit non-zero;
# commit that file and the case replays in every `go test`.
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-30s}
fail=0
for pkg in $(go list ./...); do
	for target in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz' || true); do
		echo "=== fuzz $pkg $target ($t)"
		if ! go test -run=NONE -fuzz="^${target}\$" -fuzztime="$t" "$pkg"; then
			echo "--- FAIL fuzz $pkg $target" >&2
			fail=1
		fi
	done
done
exit $fail
