#!/usr/bin/env bash
# The recommender before and after a change, side by side: `mcptrail
# recommend` built from BASE (a git revision, default HEAD~1) and from the
# working tree, PAIRS alternating pairs (default 8, the order swapped every
# pair) over the same stored calls, each run on a fresh copy of the
# database (a recommendation records its findings in it), each pair beside
# the yardstick (one grouped scan of the window through `mcptrail query`),
# run by each side's own build, SCANS times a pair (default 3).
# Prints every pair, the medians of wall time, CPU time and peak RSS, each
# side's ratio to the median of its own scan, the median of each side's
# ratios within a pair (its run against its scans beside it: the host's
# load moves between pairs more than within one), how many pairs the
# working tree won, and whether both printed the same output. One run moves by ±10–40% with the
# host's load; a change of a few percent needs many pairs.
# Both read the calls clustered by grant (as serve keeps them); BASE=tree
# builds both sides from the working tree, and RECLUSTER=1 gives the base
# side the calls as ingested, before `mcptrail recluster`.
#   SIZE=5000000 PAIRS=8 bench/recommend-pairs.sh
#   BASE=abc1234 CMD="report --server proxmox-mcp --since 30d --format json" bench/recommend-pairs.sh
#   BASE=abc1234 CMD="replay --server proxmox-mcp --policy bench/replay-all-tools.json --format json" bench/recommend-pairs.sh
#     (a policy whose all_tools limit sends every call through the evaluator)
#   BASE=tree RECLUSTER=1 bench/recommend-pairs.sh   # what clustering the calls saves
#   BASE=abc1234 MIGRATE=1 bench/recommend-pairs.sh  # against a build before a migration
# MIGRATE=1 gives the base side the same calls stored by the base's own
# bench/fill, catalog import and `recluster` (cached in OUT by the base's
# hash), which the base can open whatever migrations the working tree
# added, and the working tree a copy of it that its `recluster` migrated
# (and counted); with BASE_RECLUSTER=1 the base side too reads a copy its
# own `recluster` went over, for a base that counts aggregates at recluster
# (since migration 11) against a tree that counts more.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE="${SIZE:-5000000}"
PAIRS="${PAIRS:-8}"
SCANS="${SCANS:-3}"
BASE="${BASE:-HEAD~1}"
CMD="${CMD:-recommend --server proxmox-mcp --format json}"
source bench/recommend-window.sh pairs
source bench/base.sh
source bench/median.sh
if [ "$BASE" = tree ]; then
	cp "$OUT/mcptrail" "$WORK/mcptrail-base"
	cp "$OUT/fill" "$WORK/fill-base"
else
	BASE=$(build_base "$BASE" "$WORK/mcptrail-base" "$WORK/fill-base")
fi
# MIGRATE=1: the working tree's schema may be newer than BASE's, which
# cannot open a database the working tree made or migrated. The base side
# reads the calls as the base stored them, the tree side a copy the working
# tree migrated (and reclustered) once, so that no run pays the migration.
if [ -n "${MIGRATE:-}" ]; then
	base_db="$OUT/recommend-$SIZE-30d-base-$BASE.duckdb"
	if [ ! -s "$base_db" ]; then
		"$WORK/fill-base" -db "$WORK/base-fill.duckdb" -count "$SIZE" -days 30 >&2
		"$WORK/mcptrail-base" --db "$WORK/base-fill.duckdb" --now 2026-11-29T00:00:00Z catalog import testdata/proxmox-mcp.tools.json --server proxmox-mcp >/dev/null
		"$WORK/mcptrail-base" --db "$WORK/base-fill.duckdb" --now 2026-11-29T00:00:00Z recluster >&2
		mv "$WORK/base-fill.duckdb" "$base_db"
	fi
	tree_db="$base_db"
else
	tree_db=$(window_db "$SIZE" 30)
fi
db="$tree_db"
if [ -n "${RECLUSTER:-}" ]; then
	db=$(window_db "$SIZE" 30 ingested)
fi
if [ -n "${MIGRATE:-}" ]; then
	cp "$tree_db" "$WORK/migrated.duckdb"
	# recluster, as serve does daily: it migrates, and counts what the
	# migration left to it (the sealed days' peaks per session and minute).
	"$OUT/mcptrail" --db "$WORK/migrated.duckdb" --now 2026-11-29T00:00:00Z recluster >/dev/null
	tree_db="$WORK/migrated.duckdb"
fi
if [ -n "${BASE_RECLUSTER:-}" ]; then
	cp "$db" "$WORK/base-reclustered.duckdb"
	"$WORK/mcptrail-base" --db "$WORK/base-reclustered.duckdb" --now 2026-11-29T00:00:00Z recluster >/dev/null
	db="$WORK/base-reclustered.duckdb"
fi
echo "$BASE over $db against the working tree over $tree_db: $CMD"

# run NAME BINARY DB: one run on a fresh copy of DB; appends "wall cpu
# rss_mib" to $WORK/NAME, keeps its output in $WORK/NAME.out and prints the
# three.
run() {
	cp "$3" "$WORK/run.duckdb"
	rm -f "$WORK/run.duckdb.wal"
	# The copy's pages on disk before the run, as a database at rest is:
	# otherwise the finding history's fsync waits for the copy's writeback
	# (80–130 ms of the run, where it takes ~1 ms after a sync).
	sync
	# shellcheck disable=SC2086 # CMD is words
	/usr/bin/time -f "%e %U %S %M" -o "$WORK/time" "$2" --db "$WORK/run.duckdb" --now 2026-11-29T00:00:00Z $CMD >"$WORK/$1.out"
	awk '{printf "%.2f %.2f %d\n", $1, $2 + $3, $4 / 1024}' "$WORK/time" >>"$WORK/$1"
	tail -1 "$WORK/$1" | awk '{printf "%.2f s (CPU %.2f s, %d MiB)", $1, $2, $3}'
}
for i in $(seq "$PAIRS"); do
	order="base tree"
	[ $((i % 2)) = 0 ] && order="tree base"
	line="pair $i:"
	for side in $order; do
		if [ "$side" = base ]; then
			line="$line $side $(run base "$WORK/mcptrail-base" "$db") |"
		else
			line="$line $side $(run tree "$OUT/mcptrail" "$tree_db") |"
		fi
	done
	# Each side's yardstick is the scan by its own build (how DuckDB's
	# memory is mapped moves the scan too), over its own database (the
	# working tree would migrate the base's), SCANS times a pair (default
	# 3, alternating): one scan's spread (0.26–0.45 s within an hour)
	# would move the ratio more than most changes do.
	base_scans="" tree_scans=""
	for _ in $(seq "$SCANS"); do
		/usr/bin/time -f "%e" -o "$WORK/time" "$WORK/mcptrail-base" --db "$db" query --sql "$SCAN" >/dev/null
		cat "$WORK/time" >>"$WORK/scan_base"
		base_scans="$base_scans $(cat "$WORK/time")"
		/usr/bin/time -f "%e" -o "$WORK/time" "$OUT/mcptrail" --db "$tree_db" query --sql "$SCAN" >/dev/null
		cat "$WORK/time" >>"$WORK/scan_tree"
		tree_scans="$tree_scans $(cat "$WORK/time")"
	done
	# Each side's own ratio in this pair: its run against the median of its
	# scans beside it, taken within seconds of each other, so that the
	# host's load, which moves between pairs, moves both.
	for side in base tree; do
		scans=$base_scans
		[ "$side" = tree ] && scans=$tree_scans
		echo "$(tail -1 "$WORK/$side" | cut -d' ' -f1) $(echo "$scans" | tr ' ' '\n' | grep . | median)" |
			awk '{printf "%.3f\n", $1 / $2}' >>"$WORK/ratio_$side"
	done
	echo "$line scans (s): base$base_scans, tree$tree_scans | ratios: base $(tail -1 "$WORK/ratio_base"), tree $(tail -1 "$WORK/ratio_tree")"
done
for side in base tree; do
	wall=$(cut -d' ' -f1 "$WORK/$side" | median)
	scan=$(median <"$WORK/scan_$side")
	printf '%s: median %.2f s (%.1f× its scan'"'"'s %.2f s), CPU %.2f s, peak RSS %.0f MiB\n' "$side" "$wall" \
		"$(awk -v a="$wall" -v b="$scan" 'BEGIN{print a/b}')" "$scan" "$(cut -d' ' -f2 "$WORK/$side" | median)" "$(cut -d' ' -f3 "$WORK/$side" | median)"
done
for side in base tree; do
	printf "%s: the pairs' own ratios to the scan: median %.2f× (%s–%s)\n" "$side" "$(median <"$WORK/ratio_$side")" \
		"$(sort -g "$WORK/ratio_$side" | head -1)" "$(sort -g "$WORK/ratio_$side" | tail -1)"
done
won=$(paste -d' ' "$WORK/base" "$WORK/tree" | awk '$4 < $1 {n++} END {print n + 0}')
echo "the working tree was faster in $won of $PAIRS pairs"
# Kept for a look; a report's generated_at is the time it was made.
cp "$WORK/base.out" "$OUT/pairs-base.out"
cp "$WORK/tree.out" "$OUT/pairs-tree.out"
if diff -q <(grep -v '"generated_at"' "$OUT/pairs-base.out") <(grep -v '"generated_at"' "$OUT/pairs-tree.out") >/dev/null; then
	echo "outputs: identical (apart from generated_at)"
else
	echo "outputs: DIFFER (diff $OUT/pairs-base.out $OUT/pairs-tree.out)"
fi
