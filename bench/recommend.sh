#!/usr/bin/env bash
# Recommender benchmark: `mcptrail recommend --server proxmox-mcp` over 1M and
# 10M stored calls of one server (30 days, clustered by grant as serve keeps
# them: bench/recommend-window.sh), as whole processes, with peak RSS,
# each run beside its yardstick: one grouped scan of the same window through
# `mcptrail query` (the cost of reading every call once), and their ratio;
# then `mcptrail report --since 30d` of the same window beside the same scan.
# A size N:D fills N calls over D days instead of 30: with N = D/30 × the
# 30-day size, the window holds as many calls and the rest is history before
# it, which should cost next to nothing (the recommender reads it from
# tool_days).
#   SIZES="1000000 10000000" bench/recommend.sh
#   SIZES="1000000 6000000:180" bench/recommend.sh    # the same window, 6x the history
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES="${SIZES:-1000000 10000000}"
source bench/recommend-window.sh
for size in $SIZES; do
	n="${size%%:*}"
	days=30
	[ "$size" != "$n" ] && days="${size##*:}"
	db=$(window_db "$n" "$days")
	# A database cached by an older build is migrated first, outside the
	# timings (migration 10 counts 5M calls in ~3-4 s).
	"$OUT/mcptrail" --db "$db" query --sql "SELECT 1" >/dev/null
	for run in 1 2; do
		/usr/bin/time -f "%e %M" -o "$OUT/time.recommend" \
			env MCPTRAIL_DEBUG=1 "$OUT/mcptrail" --db "$db" --now 2026-11-29T00:00:00Z recommend --server proxmox-mcp --format json \
			>"$OUT/recommend-$n-${days}d.json" 2>"$OUT/recommend-$n-${days}d.log"
		read -r secs rss <"$OUT/time.recommend"
		stages=$(grep -o 'stage=[a-z]* took=[0-9.]*[a-zµ]*' "$OUT/recommend-$n-${days}d.log" | sed 's/stage=//; s/ took=/ /' | tr '\n' ' ')
		/usr/bin/time -f "%e %M" -o "$OUT/time.scan" "$OUT/mcptrail" --db "$db" query --sql "$SCAN" >/dev/null
		read -r scan_secs scan_rss <"$OUT/time.scan"
		ratio=$(awk -v a="$secs" -v b="$scan_secs" 'BEGIN{printf "%.1f", a/b}')
		printf '%9d calls over %3d days, run %d: %6.2fs  peak RSS %5d MiB | grouped scan %5.2fs  peak RSS %5d MiB | %s× the scan   (%s)\n' \
			"$n" "$days" "$run" "$secs" $((rss / 1024)) "$scan_secs" $((scan_rss / 1024)) "$ratio" "$stages"
		# The report of the same 30 days: its own tables, the recommendation
		# and the per-grant loops and limits, beside the same yardstick.
		/usr/bin/time -f "%e %M" -o "$OUT/time.report" "$OUT/mcptrail" --db "$db" --now 2026-11-29T00:00:00Z report --server proxmox-mcp --since 30d --format json \
			>"$OUT/report-$n-${days}d.json"
		read -r rep_secs rep_rss <"$OUT/time.report"
		printf '%9s report --since 30d, run %d: %6.2fs  peak RSS %5d MiB | %s× the scan\n' \
			"" "$run" "$rep_secs" $((rep_rss / 1024)) "$(awk -v a="$rep_secs" -v b="$scan_secs" 'BEGIN{printf "%.1f", a/b}')"
	done
done
echo "target: <= 10 s and <= 2 GiB at 10M calls; goal (issue 14): <= 3x the grouped scan"
