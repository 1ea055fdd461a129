#!/usr/bin/env bash
# Archive benchmark: 1M simulated events ingested into DuckDB, then
# `mcptrail archive` writes every sealed day to zstd Parquet (write rate,
# events/s, whole process) and `mcptrail restore` puts them back into an
# empty database. Prints bytes per event in Parquet against the DuckDB
# file's, and peak RSS. Then the archive is read by another Parquet
# implementation (bench/readparquet: Apache Arrow's, no DuckDB), and
# `recommend` over 30 days runs on the data all hot against the same data
# with every day but the last 7 archived and deleted (storage.retention).
#   EVENTS=1000000 bench/archive.sh
set -euo pipefail
cd "$(dirname "$0")/.."
EVENTS="${EVENTS:-1000000}"
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"

go build -o "$OUT/mcptrail" ./cmd/mcptrail
go build -o "$OUT/readparquet" ./bench/readparquet
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
rm -rf "$DB"* "$OUT/restored.duckdb"* "$OUT/hot.duckdb"* "$ARCHIVE"
mkdir -p "$ARCHIVE"
"$OUT/mcptrail" ingest --db "$DB" "$FILE" >/dev/null 2>&1
db_bytes=$(stat -c %s "$DB")
cp "$DB" "$OUT/hot.duckdb"
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

# Another engine: Apache Arrow's Parquet reader over the hive partitions.
"$OUT/readparquet" "$ARCHIVE" >"$OUT/readparquet.log"
hot_calls=$("$OUT/mcptrail" query --db "$OUT/hot.duckdb" --format csv --sql "SELECT count(*) AS n FROM calls" | tail -1)
echo "readparquet (arrow-go, no DuckDB): $(tail -1 "$OUT/readparquet.log" | awk '{print $2" rows, "$3" distinct ids"}') in $(($(wc -l <"$OUT/readparquet.log") - 1)) server-days; DuckDB: $hot_calls calls"

# recommend over 30 days: all hot, against all but the last 7 days archived.
server=$("$OUT/mcptrail" query --db "$OUT/hot.duckdb" --format csv --sql "SELECT server FROM calls GROUP BY 1 ORDER BY count(*) DESC LIMIT 1" | tail -1)
MCPTRAIL_STORAGE_RETENTION=7d "$OUT/mcptrail" archive --db "$DB" >/dev/null
left=$("$OUT/mcptrail" query --db "$DB" --format csv --sql "SELECT count(*) FROM calls" | tail -1)
for pass in 1 2; do
	read -r t_h rss_h < <(run rec-hot env -u MCPTRAIL_STORAGE_ARCHIVE "$OUT/mcptrail" recommend --db "$OUT/hot.duckdb" --server "$server" --since 30d --format json)
	grep -v '"generated_at"' "$OUT/stdout.log" >"$OUT/rec-hot.json"
	read -r t_c rss_c < <(run rec-cold env MCPTRAIL_STORAGE_RETENTION=7d "$OUT/mcptrail" recommend --db "$DB" --server "$server" --since 30d --format json)
	grep -v '"generated_at"' "$OUT/stdout.log" >"$OUT/rec-cold.json"
	same=no
	cmp -s "$OUT/rec-hot.json" "$OUT/rec-cold.json" && same=yes
	awk -v th="$t_h" -v tc="$t_c" -v rh="$rss_h" -v rc="$rss_c" -v left="$left" -v n="$hot_calls" -v same="$same" -v p="$pass" 'BEGIN{
		printf "recommend 30d, pass %d: all hot %.2fs rss %d MiB | %d of %d calls hot, the rest archived %.2fs rss %d MiB (ratio %.2f) | same output: %s\n", p, th, rh/1024, left, n, tc, rc/1024, tc/th, same
	}'
done
