# Sourced by the recommender benchmarks (from the repository's root): the
# binaries they run, the stored calls they read and their yardstick.
# Sourcing it sets OUT (binaries, cached stores and results, made if
# missing) and builds mcptrail and bench/fill there; with a name as its
# argument it also makes WORK, a scratch folder of that name removed on
# exit. window_db N DAYS prints the database holding N calls of
# one server over DAYS days up to 2026-11-29, clustered by grant as serve
# keeps them (`mcptrail recluster`); window_db N DAYS ingested prints the
# same calls as stored before that (filled by bench/fill, its catalog
# imported). Both are made on first use. SCAN is one grouped scan of the
# 30-day window through `mcptrail query`: the cost of reading every call
# once.
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
if [ -n "${1:-}" ]; then
	WORK="$(mktemp -d "${TMPDIR:-/tmp}/mcptrail-$1.XXXXXX")"
	trap 'rm -rf "$WORK"' EXIT
fi
go build -o "$OUT/mcptrail" ./cmd/mcptrail
go build -o "$OUT/fill" ./bench/fill

window_db() {
	local ingested="$OUT/recommend-$1-${2}d-ingested.duckdb" db="$OUT/recommend-$1-${2}d.duckdb"
	if [ ! -s "$ingested" ]; then
		"$OUT/fill" -db "$ingested" -count "$1" -days "$2" >&2
		"$OUT/mcptrail" --db "$ingested" --now 2026-11-29T00:00:00Z catalog import testdata/proxmox-mcp.tools.json --server proxmox-mcp >/dev/null
	fi
	if [ "${3:-}" = ingested ]; then
		echo "$ingested"
		return
	fi
	if [ ! -s "$db" ]; then
		cp "$ingested" "$db"
		"$OUT/mcptrail" --db "$db" --now 2026-11-29T00:00:00Z recluster >&2
	fi
	echo "$db"
}
SCAN="SELECT count(*), max(c) FROM (SELECT tool, session, count(*) c FROM calls
      WHERE server = 'proxmox-mcp' AND ts > TIMESTAMPTZ '2026-10-30 00:00:00+00' AND ts <= TIMESTAMPTZ '2026-11-29 00:00:00+00'
      GROUP BY ALL)"
