#!/usr/bin/env bash
# OTLP/JSON file benchmark: `mcptrail ingest` of the same simulated traffic as
# OTLP/JSON traces (`simulate --format otlp`, what a collector's file exporter
# writes: one request of up to 512 spans a line) and, beside it, as v1 events
# (JSONL), the yardstick: PAIRS alternating pairs (default 3), each run a whole
# process into a fresh database. Prints both rates, peak RSS and CPU time per
# pair, and the median ratio of the OTLP rate to the JSONL rate.
# BASE=<git revision> also runs the OTLP ingest built from that revision in
# each pair (a third run), to measure a change against the code before it.
#   EVENTS=200000 bench/otlp-file.sh
#   BASE=HEAD~1 PAIRS=5 bench/otlp-file.sh
EVENTS="${EVENTS:-200000}"
PAIRS="${PAIRS:-3}"
source "$(dirname "$0")/common.sh" otlpfile
source bench/median.sh

JSONL="$OUT/otlpfile-$EVENTS.jsonl"
TRACES="$OUT/otlpfile-$EVENTS.otlp.jsonl"
[ -s "$JSONL" ] || "$OUT/mcptrail" simulate --count "$EVENTS" --seed 1 --now 2026-11-29T00:00:00Z --out "$JSONL" 2>/dev/null
[ -s "$TRACES" ] || "$OUT/mcptrail" simulate --count "$EVENTS" --seed 1 --now 2026-11-29T00:00:00Z --format otlp --out "$TRACES" 2>/dev/null
echo "files: $JSONL ($(du -h "$JSONL" | cut -f1)), $TRACES ($(du -h "$TRACES" | cut -f1)), $EVENTS events each"

if [ -n "${BASE:-}" ]; then
	source bench/base.sh
	BASE=$(build_base "$BASE" "$WORK/mcptrail-base")
fi

# run NAME BIN FILE: one ingest into a fresh database; prints "seconds
# maxrss_kib cpu_seconds".
run() {
	rm -f "$WORK/$1.duckdb"*
	/usr/bin/time -f "%e %M %U %S" -o "$WORK/time.$1" "$2" ingest --db "$WORK/$1.duckdb" "$3" >"$WORK/$1.out" 2>"$WORK/stderr.log" ||
		{ cat "$WORK/stderr.log"; exit 1; }
	grep -q "^ingested $EVENTS," "$WORK/$1.out" || { echo "$1: $(cat "$WORK/$1.out")"; exit 1; }
	awk '{printf "%s %s %.2f\n", $1, $2, $3 + $4}' "$WORK/time.$1"
}
rate() { awk -v n="$EVENTS" -v t="$1" 'BEGIN{printf "%.0f", n/t}'; }

ratios=() bases=()
for pair in $(seq "$PAIRS"); do
	read -r t_o rss_o cpu_o < <(run otlp "$OUT/mcptrail" "$TRACES")
	read -r t_j rss_j cpu_j < <(run jsonl "$OUT/mcptrail" "$JSONL")
	ratio=$(awk -v a="$t_j" -v b="$t_o" 'BEGIN{printf "%.3f", a/b}')
	ratios+=("$ratio")
	line=$(printf 'pair %d: OTLP/JSON %6.2fs %7s ev/s  rss %4d MiB  cpu %6.2fs | JSONL %5.2fs %7s ev/s  rss %4d MiB  cpu %5.2fs | ratio %s' \
		"$pair" "$t_o" "$(rate "$t_o")" $((rss_o / 1024)) "$cpu_o" "$t_j" "$(rate "$t_j")" $((rss_j / 1024)) "$cpu_j" "$ratio")
	if [ -n "${BASE:-}" ]; then
		read -r t_b rss_b cpu_b < <(run base "$WORK/mcptrail-base" "$TRACES")
		bases+=("$(awk -v a="$t_j" -v b="$t_b" 'BEGIN{printf "%.3f", a/b}')")
		line+=$(printf ' | %s OTLP/JSON %6.2fs %7s ev/s  rss %4d MiB  cpu %6.2fs' "$BASE" "$t_b" "$(rate "$t_b")" $((rss_b / 1024)) "$cpu_b")
	fi
	echo "$line"
done
echo "median ratio (OTLP/JSON rate / JSONL rate): $(printf '%s\n' "${ratios[@]}" | median)"
[ -n "${BASE:-}" ] && echo "median ratio of $BASE: $(printf '%s\n' "${bases[@]}" | median)"
exit 0
