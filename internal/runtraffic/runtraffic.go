// Package runtraffic makes simulated traffic that is hard on the runs the
// store keeps (analytics/runs.go) and reads (recommend/storedruns.go), and
// prints the runs kept, for the tests that hold them to each other and to
// the recommender's own scan.
package runtraffic

import (
	"context"
	"database/sql"
	"time"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/simulate"
)

// Generate returns n simulated events (polling loops among them) over
// span up to now, changed so: with sessionless, every 13th without a
// session (the store derives one, in SQL); every 17th without arguments
// (never in a run), every
// 11th a few microseconds into its millisecond, every 5th moved to the
// start of its second (calls of a session in one millisecond, ordered by
// tool). Calls of a session identical in millisecond, tool and arguments
// get the same status: which of them is last is arbitrary, and with it
// whether a run ended in an error.
func Generate(seed int64, n int, span time.Duration, now time.Time, sessionless bool) ([]audit.Event, error) {
	var evs []audit.Event
	_, err := simulate.Generate(context.Background(), simulate.Options{Seed: seed, Count: n, Duration: span, Now: now},
		func(e audit.Event) error {
			e.Args = nil
			evs = append(evs, e)
			return nil
		})
	if err != nil {
		return nil, err
	}
	for i := range evs {
		switch {
		case i%13 == 0 && sessionless:
			evs[i].Session = ""
		case i%17 == 0:
			evs[i].ArgsHash = ""
		case i%11 == 0:
			evs[i].TS = evs[i].TS.Add(437 * time.Microsecond)
		case i%5 == 0:
			evs[i].TS = evs[i].TS.Truncate(time.Second)
		}
	}
	type tie struct {
		session, tool, args string
		ms                  int64
	}
	status := map[tie]string{}
	for i, e := range evs {
		k := tie{e.Session + "\x00" + e.Gateway + "\x00" + e.Grant, e.Tool, e.ArgsHash, e.TS.UnixMilli()}
		if s, ok := status[k]; ok {
			evs[i].Status = s
		} else {
			status[k] = e.Status
		}
	}
	return evs, nil
}

// State is a store's call_runs and run_tails as text, one row per line,
// sorted; gaps rounded to the microsecond (floating sums may differ in
// their last bits by the order DuckDB adds them in; the recommender rounds
// far coarser).
func State(ctx context.Context, db *sql.DB) (runs, tails string, err error) {
	if err := db.QueryRowContext(ctx, `SELECT coalesce(string_agg(l, E'\n' ORDER BY l), '') FROM (
	SELECT concat_ws('|', server, "grant", skh, th, hh, prev_th, prev_ts, polls, round(span_s, 6), round(mean_gap, 6),
	       round(sd_gap, 6), round(median_gap, 6), errors, last_err, t0, t1, first_ts, last_ts) l FROM call_runs)`).Scan(&runs); err != nil {
		return "", "", err
	}
	if err := db.QueryRowContext(ctx, `SELECT coalesce(string_agg(l, E'\n' ORDER BY l), '') FROM (
	SELECT concat_ws('|', pk, b_ms, a_ts, a_th, last_ts, last_th, last_hh) l FROM run_tails)`).Scan(&tails); err != nil {
		return "", "", err
	}
	return runs, tails, nil
}
