#!/usr/bin/env bash
# The project's test command: gofmt, go vet, every test, most again under the race
# detector, then each fuzz target briefly.
# FUZZTIME sets how long each fuzz target runs (default 10s; 0 skips fuzzing).
set -euo pipefail
cd "$(dirname "$0")"

FUZZTIME="${FUZZTIME:-10s}"

# The HTML report's browser test needs Debian's chromium; it skips without it
# only when CI is unset.
if ! command -v chromium >/dev/null 2>&1; then
	echo "== installing chromium (browser test of the HTML report)"
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium
	else
		echo "chromium is missing and this is not root with apt-get: install Debian's chromium package" >&2
	fi
fi

echo "== gofmt"
# Every Go file as gofmt lays it out (go vet does not check the layout).
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "not gofmt-formatted (run gofmt -w on them):" >&2
	echo "$unformatted" >&2
	exit 1
fi

echo "== go vet"
go vet ./...
# bench/aggregates.sh's measuring build (the aggregates' upkeep off) must still build.
go vet -tags mcptrail_bench_noaggregates ./analytics

echo "== go test"
go test -count=1 -timeout 20m ./...

echo "== go test -race"
# Data races show only under the race detector (a TLS configuration that two
# listeners shared was found so): every package's tests again under it, but
# for the three whose tests take minutes even without it: the CLI's end to
# end, the store's and the recommender's (under it on 2 cores, by hand: the
# CLI's 530 s, which found its golden harness sharing an err between
# parallel cases, the store's 198 s and the recommender's 188 s, clean;
# server's 58 s is the longest kept).
race=$(go list ./... | grep -v -x -e '.*/cmd/mcptrail' -e '.*/analytics' -e '.*/recommend')
# shellcheck disable=SC2086 # one argument per package
go test -race -count=1 -timeout 15m $race

if [ "$FUZZTIME" != "0" ]; then
	echo "== fuzz ($FUZZTIME per target)"
	# Every `func FuzzXxx(f *testing.F)` in a _test.go file, with its package directory.
	grep -rl --include='*_test.go' -E '^func Fuzz[A-Za-z0-9_]+\(f \*testing\.F\)' . | sort | while read -r file; do
		dir=$(dirname "$file")
		grep -oE '^func Fuzz[A-Za-z0-9_]+' "$file" | sed 's/^func //' | while read -r target; do
			echo "-- $dir $target"
			# On a loaded machine the fuzzing engine itself sometimes ends with
			# "context deadline exceeded" while stopping its workers, with no
			# failing input (seen twice in a row on the shared CI host): such a
			# run is tried up to three times, and if the engine never stops
			# cleanly the target is reported and passed over, since its seed
			# corpus already ran as a test above. A failing input always fails.
			for attempt in 1 2 3; do
				if out=$(go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$dir" 2>&1); then
					break
				fi
				if echo "$out" | grep -q "Failing input written" || ! echo "$out" | grep -q "context deadline exceeded"; then
					echo "$out"
					exit 1
				fi
				echo "   (the fuzzing engine timed out stopping, attempt $attempt of 3)"
			done
		done
	done
fi
echo "== all checks passed"
