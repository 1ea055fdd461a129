#!/usr/bin/env bash
# Archive benchmark: 1M simulated events ingested into DuckDB, then
# `mcptrail archive` writes every sealed day to zstd Parquet (write rate,
# events/s, whole process) and `mcptrail restore` puts them back into an
# empty database. Prints bytes per event in Parquet against the DuckDB
# file's, and peak RSS.
#   EVENTS=1000000 bench/archive.sh
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${EVENTS:-1000000}"
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"

go build -tags duckdb_arrow -o "$OUT/mcptrail" ./cmd/mcptrail
FILE="$OUT/events-$EVENTS.jsonl"
if [ ! -s "$FILE" ]; then
	"$OUT/mcptrail" simulate --count "$EVENTS" --seed 1 --now 2026-11-29T00:00:00Z --out "$FILE" 2>/dev/null
fi
echo "file: $FILE ($(du -h "$FILE" | cut -f1), $EVENTS events)"

# run NAME CMD... : times one process, prints "seconds maxrss_kb".
run() {
	local tf="$OUT/time.$1"
	shift
	/usr/bin/time -f "%e %M" -o "$tf" "$@" >"$OUT/stdout.log" 2>"$OUT/stderr.log" || { cat "$OUT/stdout.log" "$OUT/stderr.log"; exit 1; }
	cat "$tf"
}

DB="$OUT/archive.duckdb"
ARCHIVE="$OUT/archive"
rm -rf "$DB"* "$OUT/restored.duckdb"* "$ARCHIVE"
mkdir -p "$ARCHIVE"
"$OUT/mcptrail" ingest --db "$DB" "$FILE" >/dev/null 2>&1
db_bytes=$(stat -c %s "$DB")
export MCPTRAIL_STORAGE_ARCHIVE="$ARCHIVE" MCPTRAIL_NOW=2026-11-30T00:00:00Z

read -r t_a rss_a < <(run archive "$OUT/mcptrail" archive --db "$DB")
tail -1 "$OUT/stdout.log"
pq_bytes=$(find "$ARCHIVE" -name 'calls-*.parquet' -printf '%s\n' | awk '{s+=$1} END{print s}')
files=$(find "$ARCHIVE" -name 'calls-*.parquet' | wc -l)

read -r t_r rss_r < <(run restore "$OUT/mcptrail" restore --db "$OUT/restored.duckdb" --since 60d)
tail -1 "$OUT/stdout.log"

awk -v n="$EVENTS" -v ta="$t_a" -v tr="$t_r" -v ra="$rss_a" -v rr="$rss_r" -v pq="$pq_bytes" -v db="$db_bytes" -v f="$files" 'BEGIN{
	printf "archive: %6.2fs %8.0f ev/s  rss %4d MiB  %d files\n", ta, n/ta, ra/1024, f
	printf "restore: %6.2fs %8.0f ev/s  rss %4d MiB\n", tr, n/tr, rr/1024
	printf "bytes/event: Parquet (zstd) %.1f  DuckDB file %.1f  (ratio %.2f)\n", pq/n, db/n, pq/db
}'
