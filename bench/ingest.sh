#!/usr/bin/env bash
# Ingest benchmark: mcptrail ingest against DuckDB's own read_json on the same
# 1M simulated events, each run a whole process from start to exit, three
# alternating pairs. Prints both rates per pair, the median ratio and peak RSS,
# and each side's CPU time (user + system): on this 2-core machine the ratio
# cannot pass read_json's CPU time over ingest's (the "cpu bound").
# Each pair also runs ingest with Go's default GC target (GOGC=100) beside
# ingest's own (50), for the memory the lower target saves and what it costs.
# BASE=<git revision> also runs `ingest` built from that revision in every
# pair and prints its rate and ratio beside the working tree's.
#   EVENTS=1000000 bench/ingest.sh
#   BASE=HEAD~1 bench/ingest.sh
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${EVENTS:-1000000}"
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"

go build -o "$OUT/mcptrail" ./cmd/mcptrail
go build -o "$OUT/readjson" ./bench/readjson
if [ -n "${BASE:-}" ]; then
	source bench/base.sh
	BASE=$(build_base "$BASE" "$(realpath "$OUT")/mcptrail-base")
fi
FILE="$OUT/events-$EVENTS.jsonl"
if [ ! -s "$FILE" ]; then
	"$OUT/mcptrail" simulate --count "$EVENTS" --seed 1 --now 2026-11-29T00:00:00Z --out "$FILE" 2>/dev/null
fi
echo "file: $FILE ($(du -h "$FILE" | cut -f1), $EVENTS events)"

# run NAME CMD... : times one process, prints "seconds maxrss_kb cpu_seconds"
# (user + system: on 2 cores a process cannot finish faster than half its
# CPU time, which bounds the ratio by the two CPU times).
run() {
	local tf="$OUT/time.$1"
	shift
	/usr/bin/time -f "%e %M %U %S" -o "$tf" "$@" >/dev/null 2>"$OUT/stderr.log" || { cat "$OUT/stderr.log"; exit 1; }
	awk '{printf "%s %s %.2f\n", $1, $2, $3 + $4}' "$tf"
}

ratios=()
base_ratios=()
for pair in 1 2 3; do
	rm -f "$OUT/ingest.duckdb"* "$OUT/readjson.duckdb"*
	read -r t_m rss_m cpu_m < <(run mcptrail "$OUT/mcptrail" ingest --db "$OUT/ingest.duckdb" "$FILE")
	read -r t_r rss_r cpu_r < <(run readjson "$OUT/readjson" "$FILE" "$OUT/readjson.duckdb")
	rm -f "$OUT/ingest.duckdb"*
	read -r t_g rss_g _ < <(run gogc100 env GOGC=100 "$OUT/mcptrail" ingest --db "$OUT/ingest.duckdb" "$FILE")
	rate_m=$(awk -v n="$EVENTS" -v t="$t_m" 'BEGIN{printf "%.0f", n/t}')
	rate_r=$(awk -v n="$EVENTS" -v t="$t_r" 'BEGIN{printf "%.0f", n/t}')
	ratio=$(awk -v a="$t_r" -v b="$t_m" 'BEGIN{printf "%.3f", a/b}')
	ratios+=("$ratio")
	rate_g=$(awk -v n="$EVENTS" -v t="$t_g" 'BEGIN{printf "%.0f", n/t}')
	bound=$(awk -v a="$cpu_r" -v b="$cpu_m" 'BEGIN{printf "%.3f", a/b}')
	printf 'pair %d: mcptrail ingest %6.2fs %8s ev/s  rss %4d MiB  cpu %6.2fs | read_json %6.2fs %8s ev/s  rss %4d MiB  cpu %6.2fs | ratio %s (cpu bound %s) | ingest at GOGC=100 %8s ev/s  rss %4d MiB\n' \
		"$pair" "$t_m" "$rate_m" $((rss_m / 1024)) "$cpu_m" "$t_r" "$rate_r" $((rss_r / 1024)) "$cpu_r" "$ratio" "$bound" "$rate_g" $((rss_g / 1024))
	if [ -n "${BASE:-}" ]; then
		rm -f "$OUT/ingest.duckdb"*
		read -r t_b rss_b cpu_b < <(run base "$OUT/mcptrail-base" ingest --db "$OUT/ingest.duckdb" "$FILE")
		base_ratio=$(awk -v a="$t_r" -v b="$t_b" 'BEGIN{printf "%.3f", a/b}')
		base_ratios+=("$base_ratio")
		printf 'pair %d: %s ingest %6.2fs %8s ev/s  rss %4d MiB  cpu %6.2fs | ratio %s\n' "$pair" "$BASE" "$t_b" \
			"$(awk -v n="$EVENTS" -v t="$t_b" 'BEGIN{printf "%.0f", n/t}')" $((rss_b / 1024)) "$cpu_b" "$base_ratio"
	fi
done
median=$(printf '%s\n' "${ratios[@]}" | sort -n | sed -n 2p)
echo "median ratio (mcptrail rate / read_json rate): $median   (target >= 1.0)"
if [ -n "${BASE:-}" ]; then
	echo "median ratio of $BASE: $(printf '%s\n' "${base_ratios[@]}" | sort -n | sed -n 2p)"
fi
