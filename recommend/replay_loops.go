package recommend

import (
	"context"
	"fmt"
	"time"

	"github.com/mcptrail/mcptrail/policy"
)

// LoopCalls are a tool's calls inside the runaway loops a replay was given
// (ReplayOptions.Loops): the backtest counts them apart, since refusing
// them is what a limit is for.
type LoopCalls struct {
	// Calls are inside the loops, whatever the gateway decided; Allowed
	// those the gateway allowed.
	Calls, Allowed int64
	// Cut are the calls the policy's limits refuse; Changed those, among
	// the calls the gateway allowed, that the policy refuses (by any rule),
	// split by cause in ChangedBy.
	Cut, Changed int64
	ChangedBy    map[Cause]int64
}

// refused counts one call inside a loop that the policy decided v on.
func (l *LoopCalls) refused(v policy.Verdict, recordedAllowed bool) {
	if v.Decision == policy.RateLimited {
		l.Cut++
	}
	if recordedAllowed && v.Decision != policy.Allowed {
		l.Changed++
		l.changedBy(v, 1)
	}
}

func (l *LoopCalls) changedBy(v policy.Verdict, n int64) { countCause(&l.ChangedBy, v, n) }

// inside reports whether a call at ts falls inside one of its session's
// loops of its tool.
func inside(loops []RunawayLoop, ts time.Time) bool {
	ms := ts.UnixMilli()
	for _, l := range loops {
		if ms >= l.First.UnixMilli() && ms <= l.Last.UnixMilli() {
			return true
		}
	}
	return false
}

func loopRuns(loops []RunawayLoop) []run {
	runs := make([]run, len(loops))
	for i, l := range loops {
		runs[i] = run{SessionHash: l.SessionHash, Tool: l.Tool, FirstMS: l.First.UnixMilli(), LastMS: l.Last.UnixMilli()}
	}
	return runs
}

// loopCalls counts each tool's calls inside the loops (LoopCalls.Calls and
// Allowed); a tool the policy refuses outright (static) has every allowed
// one of them changed.
func (q query) loopCalls(ctx context.Context, loops []RunawayLoop, r *Replay, static map[string]policy.Verdict) error {
	if len(loops) == 0 {
		return nil
	}
	conn, err := q.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("replay: loop calls: %w", err)
	}
	defer conn.Close()
	if err := loadExcluded(ctx, conn, loopRuns(loops)); err != nil {
		return err
	}
	rows, err := conn.QueryContext(ctx, `
SELECT tool, count(*), count(*) FILTER (decision = 'allowed') FROM calls c SEMI JOIN excluded_runs x
	ON x.skh = hash(`+sessionKey+`) AND x.tool = c.tool AND epoch_ms(c.ts) BETWEEN x.t0 AND x.t1
WHERE `+inWindow+` GROUP BY tool`, q.args()...)
	if err != nil {
		return fmt.Errorf("replay: loop calls: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t string
		var calls, allowed int64
		if err := rows.Scan(&t, &calls, &allowed); err != nil {
			return fmt.Errorf("replay: loop calls: %w", err)
		}
		tr := r.tool(t)
		tr.Loop.Calls, tr.Loop.Allowed = calls, allowed
		if v, ok := static[t]; ok && v.Decision != policy.Allowed {
			tr.Loop.Changed = allowed
			tr.Loop.changedBy(v, allowed)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("replay: loop calls: %w", err)
	}
	return nil
}
