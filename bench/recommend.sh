#!/usr/bin/env bash
# Recommender benchmark: `mcptrail recommend --server proxmox-mcp` over 1M and
# 10M stored calls of one server (30 days), as whole processes, with peak RSS,
# each run beside its yardstick: one grouped scan of the same window through
# `mcptrail query` (the cost of reading every call once), and their ratio.
#   SIZES="1000000 10000000" bench/recommend.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES="${SIZES:-1000000 10000000}"
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
go build -tags duckdb_arrow -o "$OUT/mcptrail" ./cmd/mcptrail
go build -tags duckdb_arrow -o "$OUT/fill" ./bench/fill
for n in $SIZES; do
	db="$OUT/recommend-$n.duckdb"
	if [ ! -s "$db" ]; then
		"$OUT/fill" -db "$db" -count "$n"
		"$OUT/mcptrail" --db "$db" --now 2026-11-29T00:00:00Z catalog import testdata/proxmox-mcp.tools.json --server proxmox-mcp >/dev/null
	fi
	scan="SELECT count(*), max(c) FROM (SELECT tool, session, count(*) c FROM calls
	      WHERE server = 'proxmox-mcp' AND ts > TIMESTAMPTZ '2026-10-30 00:00:00+00' AND ts <= TIMESTAMPTZ '2026-11-29 00:00:00+00'
	      GROUP BY ALL)"
	for run in 1 2; do
		/usr/bin/time -f "%e %M" -o "$OUT/time.recommend" \
			env MCPTRAIL_DEBUG=1 "$OUT/mcptrail" --db "$db" --now 2026-11-29T00:00:00Z recommend --server proxmox-mcp --format json \
			>"$OUT/recommend-$n.json" 2>"$OUT/recommend-$n.log"
		read -r secs rss <"$OUT/time.recommend"
		stages=$(grep -o 'stage=[a-z]* took=[0-9.]*[a-zµ]*' "$OUT/recommend-$n.log" | sed 's/stage=//; s/ took=/ /' | tr '\n' ' ')
		/usr/bin/time -f "%e %M" -o "$OUT/time.scan" "$OUT/mcptrail" --db "$db" query --sql "$scan" >/dev/null
		read -r scan_secs scan_rss <"$OUT/time.scan"
		ratio=$(awk -v a="$secs" -v b="$scan_secs" 'BEGIN{printf "%.1f", a/b}')
		printf '%9d calls, run %d: %6.2fs  peak RSS %5d MiB | grouped scan %5.2fs  peak RSS %5d MiB | %s× the scan   (%s)\n' \
			"$n" "$run" "$secs" $((rss / 1024)) "$scan_secs" $((scan_rss / 1024)) "$ratio" "$stages"
	done
done
echo "target: <= 10 s and <= 2 GiB at 10M calls; goal (issue 14): <= 3x the grouped scan"
