#!/usr/bin/env bash
# Does the recommender's cost grow with the history before its window
# (issue 14, item 4)? `mcptrail recommend` over the same 30-day window of
# two stores: one holding SIZE calls over those 30 days only, one holding
# SIZE×DAYS/30 calls over DAYS days (default 60; the same traffic a day:
# the window holds about as many calls), PAIRS alternating pairs (the order
# swapped every pair), each run on a fresh copy, each beside the yardstick
# (one grouped scan of the window through `mcptrail query`) over its own
# store. Prints every pair, the medians of wall time, CPU time and peak
# RSS, their ratios to each store's scan, and how much longer the long
# store took. BASE=<git revision> also runs recommend built from that
# revision over the long store in every pair, to compare a change's effect
# on the growth.
#   SIZE=5000000 PAIRS=6 bench/recommend-history.sh
#   BASE=HEAD~1 PAIRS=6 bench/recommend-history.sh
#   SIZE=1000000 DAYS=180 PAIRS=4 bench/recommend-history.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE="${SIZE:-5000000}"
PAIRS="${PAIRS:-6}"
DAYS="${DAYS:-60}"
CMD="${CMD:-recommend --server proxmox-mcp --format json}"
source bench/recommend-window.sh history
source bench/base.sh
source bench/median.sh
if [ -n "${BASE:-}" ]; then
	BASE=$(build_base "$BASE" "$WORK/mcptrail-base")
fi
short=$(window_db "$SIZE" 30)
long=$(window_db "$((SIZE * DAYS / 30))" "$DAYS")
echo "30 days: $short; $DAYS days: $long; $CMD${BASE:+; base $BASE over $DAYS days}"

# run NAME BINARY DB: one run on a fresh copy of DB, then the scan over DB;
# appends "wall cpu rss_mib scan" to $WORK/NAME and prints them.
run() {
	cp "$3" "$WORK/run.duckdb"
	rm -f "$WORK/run.duckdb.wal"
	sync # the copy at rest, as in bench/recommend-pairs.sh
	# shellcheck disable=SC2086 # CMD is words
	/usr/bin/time -f "%e %U %S %M" -o "$WORK/time" "$2" --db "$WORK/run.duckdb" --now 2026-11-29T00:00:00Z $CMD >"$WORK/$1.out"
	/usr/bin/time -f "%e" -o "$WORK/scan" "$OUT/mcptrail" --db "$3" query --sql "$SCAN" >/dev/null
	paste -d' ' "$WORK/time" "$WORK/scan" | awk '{printf "%.2f %.2f %d %.2f\n", $1, $2 + $3, $4 / 1024, $5}' >>"$WORK/$1"
	tail -1 "$WORK/$1" | awk '{printf "%.2f s (CPU %.2f s, %d MiB; scan %.2f s)", $1, $2, $3, $4}'
}
sides="d30 long"
[ -n "${BASE:-}" ] && sides="$sides base_long"
for i in $(seq "$PAIRS"); do
	order="$sides"
	[ $((i % 2)) = 0 ] && order=$(echo "$sides" | tr ' ' '\n' | tac | tr '\n' ' ')
	line="pair $i:"
	for side in $order; do
		case "$side" in
		d30) line="$line 30 days $(run d30 "$OUT/mcptrail" "$short") |" ;;
		long) line="$line $DAYS days $(run long "$OUT/mcptrail" "$long") |" ;;
		base_long) line="$line base, $DAYS days $(run base_long "$WORK/mcptrail-base" "$long") |" ;;
		esac
	done
	echo "$line"
done
for side in $sides; do
	wall=$(cut -d' ' -f1 "$WORK/$side" | median)
	scan=$(cut -d' ' -f4 "$WORK/$side" | median)
	printf '%s: median %.2f s (%.1f× its scan'"'"'s %.2f s), CPU %.2f s, peak RSS %.0f MiB\n' "$side" "$wall" \
		"$(awk -v a="$wall" -v b="$scan" 'BEGIN{print a/b}')" "$scan" "$(cut -d' ' -f2 "$WORK/$side" | median)" "$(cut -d' ' -f3 "$WORK/$side" | median)"
done
growth() {
	awk -v a="$(cut -d' ' -f"$3" "$WORK/$2" | median)" -v b="$(cut -d' ' -f"$3" "$WORK/$1" | median)" 'BEGIN{printf "%+.1f%%", 100 * (a / b - 1)}'
}
echo "$DAYS days against 30: ${CMD%% *} wall $(growth d30 long 1), CPU $(growth d30 long 2); the scan $(growth d30 long 4)"
if [ -n "${BASE:-}" ]; then
	echo "the base over $DAYS days against the tree over 30: wall $(growth d30 base_long 1), CPU $(growth d30 base_long 2)"
fi
