#!/usr/bin/env bash
# What keeping the aggregates (tool_days, call_runs, run_tails) costs file
# ingest (issue 14, item 4 allows 10%): `mcptrail ingest` of the same 1M
# simulated events by the plain build and by one built with the
# mcptrail_bench_noaggregates tag (the same code with their upkeep off),
# each a whole process into a fresh database, PAIRS alternating pairs (the
# order swapped every pair). Prints every run's wall and CPU time (user +
# system) and peak RSS, the medians, and the cost in wall and CPU time,
# from the medians and as the median of each pair's own ratio.
# BASE=DB starts every run from a copy of DB instead of an empty database
# (the history the aggregates are kept beside: its sessions' tails), and
# FILE=JSONL sets the events (later than DB's, for new calls).
# REV=<git revision> also runs, in every pair, the plain build of that
# revision (its aggregates kept), and prints the working tree's wall and CPU
# time against it: a change to the upkeep, side by side with the code
# before it in the same pairs (the cost above moves more between runs).
#   PAIRS=6 EVENTS=1000000 bench/aggregates.sh
#   BASE=big.duckdb FILE=later.jsonl PAIRS=3 bench/aggregates.sh
#   REV=HEAD~3 PAIRS=16 bench/aggregates.sh
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${EVENTS:-1000000}"
PAIRS="${PAIRS:-6}"
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"

go build -o "$OUT/mcptrail" ./cmd/mcptrail
go build -tags mcptrail_bench_noaggregates -o "$OUT/mcptrail-noaggregates" ./cmd/mcptrail
REV="${REV:-}"
if [ -n "$REV" ]; then
	source bench/base.sh
	REV=$(build_base "$REV" "$(realpath "$OUT")/mcptrail-rev")
fi
BASE="${BASE:-}"
FILE="${FILE:-$OUT/events-$EVENTS.jsonl}"
if [ ! -s "$FILE" ]; then
	"$OUT/mcptrail" simulate --count "$EVENTS" --seed 1 --now 2026-11-29T00:00:00Z --out "$FILE" 2>/dev/null
fi
echo "file: $FILE ($(du -h "$FILE" | cut -f1)); database: ${BASE:-empty}"

# run NAME BINARY: ingests FILE into a fresh database; prints "wall cpu rss_mib".
run() {
	local db="$OUT/aggregates-$1.duckdb"
	rm -f "$db"*
	if [ -n "$BASE" ]; then cp "$BASE" "$db"; fi
	/usr/bin/time -f "%e %U %S %M" -o "$OUT/time.$1" "$2" --db "$db" ingest "$FILE" >/dev/null 2>"$OUT/stderr.log" || { cat "$OUT/stderr.log"; exit 1; }
	awk '{printf "%s %.2f %d\n", $1, $2 + $3, $4 / 1024}' "$OUT/time.$1"
}

with_wall=() with_cpu=() without_wall=() without_cpu=() rev_wall=() rev_cpu=()
sides="with without"
[ -n "$REV" ] && sides="with without rev"
for pair in $(seq "$PAIRS"); do
	order="$sides"
	[ $((pair % 2)) -eq 0 ] && order=$(echo "$sides" | awk '{for (i = NF; i > 0; i--) printf "%s%s", $i, (i > 1 ? " " : "")}')
	for side in $order; do
		bin="$OUT/mcptrail"
		[ "$side" = without ] && bin="$OUT/mcptrail-noaggregates"
		[ "$side" = rev ] && bin="$OUT/mcptrail-rev"
		read -r wall cpu rss < <(run "$side" "$bin")
		label="$side aggregates:"
		[ "$side" = rev ] && label="$REV (with):"
		printf 'pair %d %-20s %6.2fs  cpu %6.2fs  rss %4d MiB\n' "$pair" "$label" "$wall" "$cpu" "$rss"
		case "$side" in
		with) with_wall+=("$wall") with_cpu+=("$cpu") ;;
		without) without_wall+=("$wall") without_cpu+=("$cpu") ;;
		rev) rev_wall+=("$wall") rev_cpu+=("$cpu") ;;
		esac
	done
done
# The databases must differ by the aggregates alone.
runs=$("$OUT/mcptrail" --db "$OUT/aggregates-with.duckdb" query --format csv --sql "SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM call_runs), (SELECT count(*) FROM tool_days)" | tail -1)
none=$("$OUT/mcptrail" --db "$OUT/aggregates-without.duckdb" query --format csv --sql "SELECT (SELECT count(*) FROM calls), (SELECT count(*) FROM call_runs), (SELECT count(*) FROM tool_days)" | tail -1)
echo "calls, call_runs, tool_days with: $runs; without: $none"
rm -f "$OUT"/aggregates-*.duckdb*

source bench/median.sh
mw=$(printf '%s\n' "${with_wall[@]}" | median) mc=$(printf '%s\n' "${with_cpu[@]}" | median)
nw=$(printf '%s\n' "${without_wall[@]}" | median) nc=$(printf '%s\n' "${without_cpu[@]}" | median)
# Each pair's own ratio too: its two runs share the host's hour, so their
# median moves less with the load than the ratio of the two medians does.
# pair_ratios A B prints A[i] / B[i] for each pair i (A and B: arrays' names).
pair_ratios() {
	local -n a="$1" b="$2"
	for i in "${!a[@]}"; do awk -v a="${a[$i]}" -v b="${b[$i]}" 'BEGIN{print a / b}'; done
}
pw=$(pair_ratios with_wall without_wall | median)
pc=$(pair_ratios with_cpu without_cpu | median)
awk -v mw="$mw" -v nw="$nw" -v mc="$mc" -v nc="$nc" -v pw="$pw" -v pc="$pc" 'BEGIN{
	printf "medians: with %.2fs (cpu %.2fs), without %.2fs (cpu %.2fs): the aggregates cost %+.1f%% wall, %+.1f%% cpu (goal: <= 10%%)\n",
		mw, mc, nw, nc, (mw / nw - 1) * 100, (mc / nc - 1) * 100
	printf "median of the pairs'"'"' own ratios: %+.1f%% wall, %+.1f%% cpu\n", (pw - 1) * 100, (pc - 1) * 100 }'
if [ -n "$REV" ]; then
	rw=$(printf '%s\n' "${rev_wall[@]}" | median) rc=$(printf '%s\n' "${rev_cpu[@]}" | median)
	qw=$(pair_ratios with_wall rev_wall | median)
	qc=$(pair_ratios with_cpu rev_cpu | median)
	lower=$(pair_ratios with_cpu rev_cpu | awk '$1 < 1' | wc -l)
	awk -v rev="$REV" -v mw="$mw" -v mc="$mc" -v rw="$rw" -v rc="$rc" -v qw="$qw" -v qc="$qc" -v lower="$lower" -v n="${#with_cpu[@]}" 'BEGIN{
		printf "with aggregates against %s: medians %.2fs against %.2fs, cpu %.2fs against %.2fs; the pairs'"'"' own ratios %.3f wall, %.3f cpu; cpu lower in %d of %d\n",
			rev, mw, rw, mc, rc, qw, qc, lower, n }'
fi
