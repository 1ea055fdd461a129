//go:build !mcptrail_bench_noaggregates

package analytics

// keepAggregates: Append keeps tool_days, call_runs and run_tails in each
// batch's transaction (SPEC §3). Only bench/aggregates.sh builds with the
// mcptrail_bench_noaggregates tag, which turns their upkeep off to measure
// what it costs ingest; a database that build writes lacks them.
const keepAggregates = true
