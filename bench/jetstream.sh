#!/usr/bin/env bash
# JetStream benchmark: pre-fill the MCP_AUDIT stream with simulated events
# (mcptrail simulate --nats, publish acks on), then in one run measure
#   1. how fast `mcptrail serve` drains it into DuckDB (from /readyz to the last
#      event stored, read from /metrics), its peak RSS (VmHWM), the CPU time it
#      took and the bytes it wrote to disk meanwhile (/proc/PID/stat and io), and
#   2. how fast a consumer that discards messages drains the same stream with
#      the same fetch and ack pattern (the transport ceiling), and with one
#      AckAll per fetch beside it,
# and print both rates, the ratio and peak RSS (and serve's system CPU time and
# page faults: on this machine the first touch of a page costs ~11 µs).
#   bench/jetstream.sh                           # both, one after the other
#   EVENTS=1000000 BATCH=1 bench/jetstream.sh    # one event per message
#   EVENTS=1000000 BATCH=64 bench/jetstream.sh   # 64 events per message (SPEC §2)
# Without BATCH it runs BATCH=1, then BATCH=64, with the same settings, and
# ends with each one's result line.
# Targets: >= 0.5x the ceiling with single events; >= 150k events/s with
# 64-event messages; RSS <= 512 MiB.
# serve starts right after the pre-fill, so the ids of the last 5 s of it are
# still inside the stream's Nats-Msg-Id window, which JetStream keeps in
# memory (about 200 MiB for 1M ids): the worst case for RSS. WAIT=10 starts
# it after the window instead, as a daemon catching up on an older backlog
# would. ALERTS=false runs serve without its live alarm (alerts.enabled), to
# measure what the alarm costs; NOW=$(date -u +%FT%TZ) ends the simulated
# traffic now, so that its newest calls are inside the alarm's lookback.
# RUNS=N repeats serve (each time on a fresh copy of the pre-filled stream,
# into a fresh database) and the ceiling N times, alternating, and prints the
# median ratio: one run moves ±30% with the host's load. All N start after
# the Nats-Msg-Id window. SERVE_ENV="GOMEMLIMIT=256MiB" sets variables for
# serve alone, to compare settings side by side. BASE=<git revision> also
# drains a fresh copy with serve built from that revision in every run (the
# two in alternating order) and prints the median rate and CPU time of each.
EVENTS="${EVENTS:-1000000}"
if [ -z "${BATCH:-}" ]; then
	set -euo pipefail
	results=()
	for batch in 1 64; do
		echo "== $batch event(s) a message =="
		log=$(mktemp)
		BATCH=$batch "$0" | tee "$log"
		results+=("$(tail -1 "$log")")
		rm -f "$log"
	done
	echo "== results =="
	printf '%s\n' "${results[@]}"
	exit 0
fi
source "$(dirname "$0")/common.sh" jsbench
STORE="$WORK/nats"
NATS="127.0.0.1:$(freeport)"
HTTP="127.0.0.1:$(freeport)"

# 1. Pre-fill.
"$OUT/jetstream" nats -store "$STORE" -listen "$NATS" >"$WORK/nats.out" &
pids+=($!)
for _ in $(seq 100); do grep -q ready "$WORK/nats.out" 2>/dev/null && break; sleep 0.1; done
prefill=$("$OUT/mcptrail" simulate --count "$EVENTS" --seed 1 --now "${NOW:-2026-11-29T00:00:00Z}" --nats "nats://$NATS" --batch "$BATCH" 2>&1 | tail -1)
echo "pre-fill: $prefill"
# The ceiling's consumer counts messages: "published N events in M messages".
MESSAGES=$(echo "$prefill" | awk '{for (i = 1; i < NF; i++) if ($(i+1) == "messages") {print $i; exit}}')
kill "${pids[0]}"
wait "${pids[0]}" || true
pids=()
echo "stream: $(du -sh "$STORE" | cut -f1) on disk"

RUNS="${RUNS:-1}"
wait_s="${WAIT:-0}"
# Later runs would start after the Nats-Msg-Id window anyway: with several
# runs, every one does, so that they measure the same thing.
[ "$RUNS" -gt 1 ] && [ "$wait_s" -lt 6 ] && wait_s=6
sleep "$wait_s"

best() { awk -v a="$1" -v b="$2" 'BEGIN{print (a < b ? a : b)}'; }
rate() { awk -v n="$EVENTS" -v t="$1" 'BEGIN{printf "%.0f", n/t}'; }
# drain BINARY: serve (BINARY) drains a fresh copy of the stream into a
# fresh database; sets t_serve, rss_kib, cpu_serve and written_mib.
drain() {
	rm -rf "$WORK/run-nats" "$WORK"/bench.duckdb*
	cp -r "$STORE" "$WORK/run-nats"
	MCPTRAIL_STORAGE_PATH="$WORK/bench.duckdb" \
		MCPTRAIL_NATS_EMBEDDED_LISTEN="$NATS" MCPTRAIL_NATS_EMBEDDED_STORE_DIR="$WORK/run-nats" \
		MCPTRAIL_HTTP_LISTEN="$HTTP" MCPTRAIL_ALERTS_ENABLED="${ALERTS:-true}" \
		env ${SERVE_ENV:-} "$1" serve 2>"$WORK/serve.log" &
	SERVE=$!
	pids+=("$SERVE")
	if ! read -r t_serve rss_kib cpu_serve written_mib sys_serve faults < <("$OUT/jetstream" watch -http "$HTTP" -count "$EVENTS" -pid "$SERVE"); then
		tail -20 "$WORK/serve.log"
		exit 1
	fi
	kill -TERM "$SERVE"
	wait "$SERVE"
	pids=()
	echo "alerts (alerts.enabled=${ALERTS:-true}): $(grep -c 'msg="alarm: [a-z_]* running' "$WORK/serve.log" || true) sent while draining"
	echo "stored (count, distinct ids): $("$OUT/mcptrail" query --db "$WORK/bench.duckdb" --sql "SELECT count(*) || ', ' || count(DISTINCT id) FROM calls" --format csv | tail -1)"
}
serve_line() {
	printf 'run %d: %-18s: %7.2fs %8s events/s   peak RSS %d MiB   CPU %.2fs (system %.2fs, %dk page faults)   written to disk %d MiB\n' \
		"$run" "$1" "$t_serve" "$(rate "$t_serve")" $((rss_kib / 1024)) "$cpu_serve" "$sys_serve" $((faults / 1000)) "$written_mib"
}
if [ -n "${BASE:-}" ]; then
	source bench/base.sh
	BASE=$(build_base "$BASE" "$WORK/mcptrail-base")
fi

ratios=()
base_runs=()
tree_runs=()
for run in $(seq "$RUNS"); do
	# 2. serve drains a fresh copy of the stream into a fresh database (and
	# serve built from BASE another, first in every other run).
	base_line=""
	if [ -n "${BASE:-}" ] && [ $((run % 2)) = 0 ]; then
		drain "$WORK/mcptrail-base"
		base_line=$(serve_line "$BASE serve")
		base_runs+=("$t_serve $cpu_serve")
	fi
	drain "$OUT/mcptrail"
	tree_line=$(serve_line "serve -> DuckDB")
	tree_runs+=("$t_serve $cpu_serve")
	t_tree=$t_serve
	if [ -n "${BASE:-}" ] && [ $((run % 2)) = 1 ]; then
		drain "$WORK/mcptrail-base"
		base_line=$(serve_line "$BASE serve")
		base_runs+=("$t_serve $cpu_serve")
	fi
	t_serve=$t_tree

	# 3. The transport ceiling on the same stream (own durable consumers),
	# acknowledging as serve does (-acks auto: none on this server), the
	# faster of two runs, so that neither gets all the cold reads; then the
	# same with one AckAll per fetch, the acknowledgements serve made before
	# it acknowledged nothing, and the ack-each variant in the first run only.
	# Each on a port of its own: the one serve listened on may still be held.
	discard() { "$OUT/jetstream" discard -store "$STORE" -listen "127.0.0.1:$(freeport)" -count "$MESSAGES" "$@"; }
	read -r t_ceiling policy < <(discard)
	read -r t_all _ < <(discard -acks all)
	[ "$run" = 1 ] && read -r t_each _ < <(discard -acks explicit)
	read -r t2 _ < <(discard)
	t_ceiling=$(best "$t_ceiling" "$t2")

	ratio=$(awk -v a="$t_ceiling" -v b="$t_serve" 'BEGIN{printf "%.2f", a/b}')
	ratios+=("$ratio")
	echo "$tree_line"
	[ -n "$base_line" ] && echo "$base_line"
	printf 'run %d: discard (%-9s): %7.2fs %8s events/s   (transport ceiling)\n' "$run" "$policy" "$t_ceiling" "$(rate "$t_ceiling")"
	printf 'run %d: discard (AckAll)   : %7.2fs %8s events/s   (serve/it: %s)\n' "$run" "$t_all" "$(rate "$t_all")" \
		"$(awk -v a="$t_all" -v b="$t_serve" 'BEGIN{printf "%.2f", a/b}')"
	[ "$run" = 1 ] && printf 'run %d: discard (AckExplicit): %7.2fs %8s events/s\n' "$run" "$t_each" "$(rate "$t_each")"
	printf 'run %d: ratio serve/ceiling: %s\n' "$run" "$ratio"
done
source bench/median.sh
median=$(printf '%s\n' "${ratios[@]}" | median)
if [ -n "${BASE:-}" ]; then
	for side in tree base; do
		name="the working tree"
		runs=("${tree_runs[@]}")
		[ "$side" = base ] && name="$BASE" runs=("${base_runs[@]}")
		t=$(printf '%s\n' "${runs[@]}" | cut -d' ' -f1 | median)
		cpu=$(printf '%s\n' "${runs[@]}" | cut -d' ' -f2 | median)
		echo "serve of $name: median $t s ($(rate "$t") events/s), CPU $cpu s over $RUNS run(s)"
	done
fi
t=$(printf '%s\n' "${tree_runs[@]}" | cut -d' ' -f1 | median)
printf 'ratio serve/ceiling: %s (median of %d run(s): %s), serve %s events/s (median)   (%s events a message in %s messages; targets: >= 0.5x single, >= 150000 events/s batched, RSS <= 512 MiB)\n' \
	"$median" "$RUNS" "${ratios[*]}" "$(rate "$t")" "$BATCH" "$MESSAGES"
