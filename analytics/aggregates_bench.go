//go:build mcptrail_bench_noaggregates

package analytics

// keepAggregates is off in the benchmark build of bench/aggregates.sh (see
// aggregates.go): its databases lack tool_days, tool_day_use, call_runs and run_tails
// and must not be analysed.
const keepAggregates = false
