#!/usr/bin/env bash
# OTLP benchmark: the same simulated traffic end to end into DuckDB, live,
#   1. over NATS: `mcptrail simulate --nats` publishes v1 events (publish acks
#      on) to a fresh `mcptrail serve`, and
#   2. over OTLP/HTTP: `mcptrail simulate --otlp` POSTs protobuf trace batches
#      of 512 spans to the same daemon's receiver (otlp.listen), which maps
#      them, publishes them to the stream and answers after every ack, and
#   3. over OTLP/gRPC: the same batches, gzip-compressed, with
#      `--otlp-protocol grpc` to otlp.grpc_listen,
# each from /readyz to the last event stored (read from /metrics), and prints
# events/s and serve's peak RSS (/usr/bin/time -v) for each.
# BASE=<git revision> first runs the first two with serve built from that revision
# (simulate is the working tree's in every run) and prints its lines too.
#   EVENTS=200000 bench/otlp.sh
#   BASE=HEAD~1 bench/otlp.sh
EVENTS="${EVENTS:-200000}"
source "$(dirname "$0")/common.sh" otlpbench

# run PATH [SERVE]: one fresh daemon (the SERVE binary, by default the
# working tree's) fed by simulate over PATH (nats or otlp); prints "seconds
# peak_rss_kib".
run() {
	local path="$1" bin="${2:-$OUT/mcptrail}"
	local dir="$WORK/$1-$(basename "$bin")"
	mkdir -p "$dir"
	local nats="127.0.0.1:$(freeport)" http="127.0.0.1:$(freeport)" otlp="127.0.0.1:$(freeport)"
	export MCPTRAIL_STORAGE_PATH="$dir/bench.duckdb" MCPTRAIL_NATS_EMBEDDED_LISTEN="$nats" \
		MCPTRAIL_NATS_EMBEDDED_STORE_DIR="$dir/nats" MCPTRAIL_HTTP_LISTEN="$http" MCPTRAIL_OTLP_LISTEN="$otlp"
	# Only the grpc path names otlp.grpc_listen: a base build without the
	# key refuses the variable.
	unset MCPTRAIL_OTLP_GRPC_LISTEN
	[ "$path" = grpc ] && export MCPTRAIL_OTLP_GRPC_LISTEN="127.0.0.1:$(freeport)"
	/usr/bin/time -v -o "$dir/serve.time" "$bin" serve 2>"$dir/serve.log" &
	local serve=$!
	pids+=("$serve")
	"$OUT/jetstream" watch -http "$http" -count "$EVENTS" >"$dir/watch.out" &
	local watch=$!
	pids+=("$watch")
	for _ in $(seq 600); do
		curl -fs "http://$http/readyz" >/dev/null 2>&1 && break
		sleep 0.05
	done
	local target=(--nats "nats://$nats")
	[ "$path" = otlp ] && target=(--otlp "http://$otlp")
	[ "$path" = grpc ] && target=(--otlp "http://$MCPTRAIL_OTLP_GRPC_LISTEN" --otlp-protocol grpc)
	"$OUT/mcptrail" simulate --count "$EVENTS" --seed 1 --now 2026-11-29T00:00:00Z "${target[@]}" >"$dir/simulate.out" 2>&1 ||
		{ cat "$dir/simulate.out" "$dir/serve.log" | tail -20 >&2; return 1; }
	if ! wait "$watch"; then
		tail -20 "$dir/serve.log" >&2
		return 1
	fi
	# Stop serve itself (the child of /usr/bin/time), so that time reports.
	kill -TERM "$(pgrep -P "$serve")"
	wait "$serve" || true
	pids=()
	local stored
	stored=$("$OUT/mcptrail" query --db "$dir/bench.duckdb" --sql "SELECT count(*) || ', ' || count(DISTINCT id) FROM calls" --format csv | tail -1)
	echo "$path: $(tail -1 "$dir/simulate.out"); stored (count, distinct ids): $stored" >&2
	echo "$(cut -d' ' -f1 "$dir/watch.out") $(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir/serve.time")"
}

rate() { awk -v n="$EVENTS" -v t="$1" 'BEGIN{printf "%.0f", n/t}'; }
if [ -n "${BASE:-}" ]; then
	source bench/base.sh
	BASE=$(build_base "$BASE" "$WORK/mcptrail-base")
	read -r tb_nats rssb_nats < <(run nats "$WORK/mcptrail-base")
	read -r tb_otlp rssb_otlp < <(run otlp "$WORK/mcptrail-base")
	printf '%s: NATS v1 events      : %7.2fs %8s events/s   serve peak RSS %d MiB\n' "$BASE" "$tb_nats" "$(rate "$tb_nats")" $((rssb_nats / 1024))
	printf '%s: OTLP/HTTP protobuf  : %7.2fs %8s events/s   serve peak RSS %d MiB\n' "$BASE" "$tb_otlp" "$(rate "$tb_otlp")" $((rssb_otlp / 1024))
fi
read -r t_nats rss_nats < <(run nats)
read -r t_otlp rss_otlp < <(run otlp)
read -r t_grpc rss_grpc < <(run grpc)
printf 'NATS v1 events -> serve -> DuckDB     : %7.2fs %8s events/s   serve peak RSS %d MiB\n' "$t_nats" "$(rate "$t_nats")" $((rss_nats / 1024))
printf 'OTLP/HTTP protobuf (512 spans/request): %7.2fs %8s events/s   serve peak RSS %d MiB\n' "$t_otlp" "$(rate "$t_otlp")" $((rss_otlp / 1024))
printf 'OTLP/gRPC (512 spans/request, gzip)   : %7.2fs %8s events/s   serve peak RSS %d MiB\n' "$t_grpc" "$(rate "$t_grpc")" $((rss_grpc / 1024))
printf 'ratio OTLP/NATS: %s   (both with simulate generating on the same 2 cores)\n' "$(awk -v a="$t_nats" -v b="$t_otlp" 'BEGIN{printf "%.2f", a/b}')"
