# Sourced by the benchmarks that run daemons: OUT (binaries and results),
# WORK (a scratch folder removed on exit), pids (processes to stop on exit)
# and freeport. $1 names the scratch folder.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
OUT="${OUT:-bench/out}"
mkdir -p "$OUT"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/mcptrail-$1.XXXXXX")"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

go build -o "$OUT/mcptrail" ./cmd/mcptrail
go build -o "$OUT/jetstream" ./bench/jetstream
