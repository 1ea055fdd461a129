// Command fill stores N simulated events straight into a DuckDB file (no
// JSON in between), to prepare large databases for bench/recommend.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/simulate"
)

func main() {
	db := flag.String("db", "", "database file to create")
	n := flag.Int("count", 1_000_000, "events")
	now := flag.String("now", "2026-11-29T00:00:00Z", "traffic ends at this time")
	days := flag.Int("days", 30, "days of traffic")
	flag.Parse()
	end, err := time.Parse(time.RFC3339, *now)
	if err != nil || *db == "" {
		fmt.Fprintln(os.Stderr, "usage: fill -db FILE [-count N] [-now RFC3339] [-days D]")
		os.Exit(2)
	}
	ctx := context.Background()
	// One DuckDB thread, as `mcptrail ingest` stores batches: in their staged order.
	store, err := analytics.Open(ctx, *db, analytics.Options{IngestThreads: 1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	batch := make([]audit.Event, 0, 100_000)
	flush := func() error {
		_, err := store.Append(ctx, ingest.Batch{Events: batch})
		batch = batch[:0]
		return err
	}
	start := time.Now()
	_, err = simulate.Generate(ctx, simulate.Options{Seed: 1, Count: *n, Duration: time.Duration(*days) * 24 * time.Hour, Now: end},
		func(e audit.Event) error {
			e.Args = nil
			batch = append(batch, e)
			if len(batch) == cap(batch) {
				return flush()
			}
			return nil
		})
	if err == nil {
		err = flush()
	}
	if err == nil {
		err = store.Close()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "stored %d events in %s\n", *n, time.Since(start).Round(time.Millisecond))
}
