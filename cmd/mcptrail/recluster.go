package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/internal/wait"
	"github.com/mcptrail/mcptrail/server"
)

func newReclusterCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "recluster",
		Short: "Rewrite the calls of sealed days sorted by server and grant, for faster per-grant queries",
		Long: `Rewrite the calls of sealed UTC days (before today) that are not clustered yet,
sorted by server, grant and time, a week at a time (shorter when a week holds
more than 1,048,576 calls), each span in one transaction.
Calls are stored as they arrive, every grant's in the same row groups; sorted, a
query of one grant (each grant's recommendation, report and replay) skips the other
grants' row groups. The calls stay the same. A span shorter than a week waits until
it holds 491,520 calls. Then each sealed day not counted yet has the busiest
minute of each session and tool counted, which recommend reads instead of
grouping that day's calls again. serve does this every day; run it after
ingesting files, with the daemon stopped.`,
		Example: `  mcptrail ingest events.jsonl && mcptrail recluster`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Sorting spans in DuckDB's default 1 GB peaked at 1.4 GiB of
			// RSS over 10M calls (25 s); at the daemon's 256 MB they spill
			// instead (41 s, 0.6 GiB).
			store, done, err := a.openStoreWith(cmd.Context(), analytics.Options{MemoryLimit: reclusterMemoryLimit})
			if err != nil {
				return err
			}
			defer done()
			res, err := store.Recluster(cmd.Context(), a.now)
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, reclusterSummary(res))
			return nil
		},
	}
}

// reclusterMemoryLimit bounds DuckDB's memory while recluster sorts, as
// serve's does.
const reclusterMemoryLimit = "256MB"

// reclusterSummary says what a Recluster did.
func reclusterSummary(res analytics.ReclusterResult) string {
	if res.Until.IsZero() {
		return "no calls to cluster"
	}
	out := fmt.Sprintf("clustered %d calls in %d spans; calls before %s are clustered", res.Calls, res.Spans, res.Until.Format(time.RFC3339))
	if res.Waiting > 0 {
		out += fmt.Sprintf("; %d calls of sealed days wait for a full week or %d calls", res.Waiting, analytics.ReclusterMinCalls)
	}
	if res.CountedDays > 0 {
		days := "days"
		if res.CountedDays == 1 {
			days = "day"
		}
		out += fmt.Sprintf("; peaks per session and minute and window figures counted for %d sealed %s", res.CountedDays, days)
	}
	return out
}

// startRecluster makes the daemon recluster sealed days soon after it
// starts (a starting daemon drains its backlog first) and then a quarter
// of an hour after each UTC midnight.
func (a *app) startRecluster(store *analytics.Store, opts *server.Options) {
	log := a.log.With("component", "recluster")
	addBackground(opts, func(ctx context.Context, _ *nats.Conn) { reclusterDaily(ctx, store, log, 2*time.Minute) })
}

// reclusterDaily reclusters after first and then daily until ctx ends.
func reclusterDaily(ctx context.Context, store *analytics.Store, log *slog.Logger, first time.Duration) {
	wait.Daily(ctx, first, 15*time.Minute, func() {
		start := time.Now()
		// The sort gets both threads and the full memory limit, as a
		// query does, for the seconds each span holds the writer.
		boosted := store.Boost(ctx)
		res, err := store.Recluster(ctx, start)
		boosted()
		switch {
		case ctx.Err() != nil:
			// stopping: the span in hand was rolled back
		case err != nil:
			log.Error("recluster", "err", err)
		case res.Spans > 0 || res.CountedDays > 0:
			log.Info(reclusterSummary(res), "took", time.Since(start).Round(time.Millisecond))
		default:
			log.Debug(reclusterSummary(res))
		}
	})
}
