package analytics

import (
	"cmp"
	"context"
	"database/sql"
	"slices"
)

// The runs of a batch are found in Go, from the staged columns, for every
// session whose new calls come after its stored ones and share no
// millisecond with each other: then the batch's calls follow the session's
// stored sequence, and sorting them by time, tool and arguments is
// DuckDB's order. The stored last call is the one before them; when the
// first new call continues it, the run it ends (the calls since the
// session's last cut) is read again and extended. Sorting in Go runs beside
// DuckDB's insert of the batch, where sorting the batch in DuckDB cost a
// quarter of the ingest rate. Every other session goes through recordRuns'
// SQL, which the tests hold the Go path to.

// runSession is a session's key: its server, grant and session key.
type runSession struct{ server, grant, key string }

// runCall is one call of a tool in a staged batch.
type runCall struct {
	session int32 // index in batchCalls.sessions
	ms, us  int64 // epoch milliseconds (truncated, as DuckDB's epoch_ms) and microseconds
	tool    string
	args    string // "" without arguments: never in a run
	err     bool
	allowed bool // the gateway allowed it (for tool_day_use's sets)
}

// batchCalls is a staged batch's calls of tools, sorted by session, time,
// tool and arguments; starts[i] is session i's first call. runs, tails and
// tied are findRuns': runs[runStarts[i]:runStarts[i+1]] are session i's.
type batchCalls struct {
	sessions  []runSession
	calls     []runCall
	starts    []int
	runs      []fastRun
	runStarts []int
	tails     []runTail
	tied      []bool
	// days are the batch's tool days (addToolDay), for tool_days, each
	// with its tool_day_use row.
	days map[toolDayKey]*toolDay
}

// collectCalls gathers the staged calls of tools, sorts them and finds
// their runs (findRuns), and counts their tool days and tool day use.
func collectCalls(c *columns) *batchCalls {
	b := &batchCalls{days: map[toolDayKey]*toolDay{}}
	index := map[runSession]int32{}
	// First each call's session (-1: no tool), then each call in its
	// session's place: one copy of the calls, not two.
	of := make([]int32, 0, c.n)
	var counts []int
	for _, ch := range c.chunks {
		s := &ch.strs
		for j := range ch.n {
			if s[3].value(j) == "" {
				of = append(of, -1)
				continue
			}
			rs := runSession{server: s[2].value(j), grant: s[8].value(j), key: ch.sessionKey(j)}
			dk := toolDayKey{server: rs.server, grant: rs.grant, tool: s[3].value(j), day: ch.ts[j] / 1000 / dayMillis}
			decision := s[5].value(j)
			d := addToolDay(b.days, dk, ch.ts[j], decision == "allowed")
			d.use.add(countCall(decision, s[10].value(j) != "", s[9].value(j) != "", ch.ts[j]))
			i, ok := index[rs]
			if !ok {
				i = int32(len(b.sessions))
				index[rs] = i
				b.sessions = append(b.sessions, rs)
				counts = append(counts, 0)
			}
			counts[i]++
			of = append(of, i)
		}
	}
	b.starts = make([]int, len(b.sessions)+1)
	for i, n := range counts {
		b.starts[i+1] = b.starts[i] + n
	}
	b.calls = make([]runCall, b.starts[len(b.sessions)])
	next := slices.Clone(b.starts[:len(b.sessions)])
	k := 0
	for _, ch := range c.chunks {
		s := &ch.strs
		for j := range ch.n {
			i := of[k]
			k++
			if i < 0 {
				continue
			}
			us := ch.ts[j]
			b.calls[next[i]] = runCall{session: i, ms: us / 1000, us: us, tool: s[3].value(j), args: s[16].value(j), err: s[6].value(j) == "error",
				allowed: s[5].value(j) == "allowed"}
			next[i]++
		}
	}
	// Each session's calls come mostly in time order already.
	for i := range b.sessions {
		slices.SortFunc(b.calls[b.starts[i]:b.starts[i+1]], compareCalls)
	}
	b.addSessionSets()
	b.findRuns()
	return b
}

// addSessionSets adds each session to the sets of the tools and days of
// its calls (days' use): once per session, tool and day, not per call.
func (b *batchCalls) addSessionSets() {
	type usedOn struct {
		tool    string
		day     int64
		allowed bool // the session's calls of the tool that day hold an allowed one
	}
	var seen []usedOn
	for i, rs := range b.sessions {
		if rs.key == "" {
			continue
		}
		seen = seen[:0]
	calls:
		for _, c := range b.calls[b.starts[i]:b.starts[i+1]] {
			day := c.ms / dayMillis
			for k := range seen {
				if seen[k].day == day && seen[k].tool == c.tool {
					seen[k].allowed = seen[k].allowed || c.allowed
					continue calls
				}
			}
			seen = append(seen, usedOn{tool: c.tool, day: day, allowed: c.allowed})
		}
		h := SessionHash(rs.key)
		for _, s := range seen {
			u := &b.days[toolDayKey{server: rs.server, grant: rs.grant, tool: s.tool, day: s.day}].use
			u.Sessions = append(u.Sessions, h)
			if s.allowed {
				u.AllowedSessions = append(u.AllowedSessions, h)
			}
		}
	}
}

// compareCalls orders calls by session, time, tool and arguments.
func compareCalls(x, y runCall) int {
	return cmp.Or(cmp.Compare(x.session, y.session), cmp.Compare(x.ms, y.ms), cmp.Compare(x.tool, y.tool), cmp.Compare(x.args, y.args), cmp.Compare(x.us, y.us))
}

// storedTail is what run_tails says of a session the batch touches.
type storedTail struct {
	lastMS, lastUS int64
	lastTH         uint64
	continues      bool // the batch's first call continues the stored last call
	bMS, aUS       int64
	aTH            uint64
	aSet           bool
}

// runTail is a session's new run_tails row, from the Go path.
type runTail struct {
	bMS          int64
	aUS          int64 // the call before the cut; aSet false: none
	aSet         bool
	aTool        string // "" when the call before is the stored last call: aTH
	aTH          uint64
	lastUS       int64
	lastTool     string
	lastArgs     string
	sessionIndex int32
	atStart      bool // the cut is at the batch's first call: a is the stored last call
}

// fastRun is a run found in Go.
type fastRun struct {
	session      int32
	tool, args   string
	prevTool     string // "" when the call before is the stored last call (prevTH) or none (prevSet false)
	prevTH       uint64
	prevUS       int64
	prevSet      bool
	gaps         []int64
	errors       int64
	lastErr      bool
	t0, t1       int64
	first, lastU int64
	atStart      bool // starts at the batch's first call: prev is the stored last call
}

// recordBatchRuns brings the runs up to date with a batch just inserted
// (its calls those of b, every staged call stored): the sessions the Go
// path can take from b, the others by recordRuns over the calls that
// where selects. keys learns every session of the batch: each now has a
// tail.
func recordBatchRuns(ctx context.Context, conn *sql.Conn, keys *tailKeys, b *batchCalls, where string, args ...any) error {
	v := &runViews{ctx: ctx, conn: conn}
	defer v.close()
	tails, pks, err := lookupTails(ctx, v, keys, b)
	if err != nil {
		return err
	}
	defer func() {
		for _, pk := range pks {
			keys.add(pk)
		}
	}()
	var runs []fastRun
	var newTails []runTail
	var slow, continuing, extended []int32
	for si := range b.sessions {
		calls := b.calls[b.starts[si]:b.starts[si+1]]
		tail, stored := tails[int32(si)]
		switch {
		case stored && calls[0].ms <= tail.lastMS || b.tied[si]:
			slow = append(slow, int32(si))
			continue
		case stored && tail.continues:
			continuing = append(continuing, int32(si))
			continue
		}
		// The stored last call, if any, is the one before the batch's
		// first: the start of a run from there, or of the cut there.
		for _, r := range b.runs[b.runStarts[si]:b.runStarts[si+1]] {
			if r.atStart && stored {
				r.prevTH, r.prevUS, r.prevSet = tail.lastTH, tail.lastUS, true
			}
			runs = append(runs, r)
		}
		t := b.tails[si]
		if t.atStart && stored {
			t.aUS, t.aTH, t.aSet = tail.lastUS, tail.lastTH, true
		}
		newTails = append(newTails, t)
	}
	if len(continuing) > 0 {
		// The stored run these sessions' first calls continue is read
		// again: the calls since its session's last cut.
		open, err := openRunCalls(ctx, v, b, continuing, tails, where, args...)
		if err != nil {
			return err
		}
		for _, si := range continuing {
			tail := tails[si]
			calls := append(open[si], b.calls[b.starts[si]:b.starts[si+1]]...)
			var t runTail
			var tied bool
			before := len(runs)
			runs, t, tied = sessionRuns(runs, si, calls, callBefore{set: tail.aSet, th: tail.aTH, us: tail.aUS})
			if tied || len(open[si]) == 0 || open[si][0].ms != tail.bMS {
				runs = runs[:before]
				slow = append(slow, si)
				continue
			}
			newTails = append(newTails, t)
			extended = append(extended, si)
		}
		if err := dropOpenRuns(ctx, v, b, extended, tails); err != nil {
			return err
		}
	}
	if err := storeFastRuns(ctx, v, b, runs, newTails, tails); err != nil {
		return err
	}
	if len(slow) == 0 {
		return nil
	}
	return recordSlowRuns(ctx, v, b, slow, where, args...)
}

// findRuns finds each session's runs among its calls in the batch, and its
// new tail, as if it had no stored call: recordBatchRuns then gives the
// runs and the cut at its first call the stored last call as the call
// before. tied marks the sessions with two calls in one millisecond: DuckDB
// orders them by its hashes of tool and arguments, which Go does not know.
func (b *batchCalls) findRuns() {
	b.tails = make([]runTail, len(b.sessions))
	b.tied = make([]bool, len(b.sessions))
	b.runStarts = make([]int, len(b.sessions)+1)
	for si := range b.sessions {
		b.runStarts[si] = len(b.runs)
		b.runs, b.tails[si], b.tied[si] = sessionRuns(b.runs, int32(si), b.calls[b.starts[si]:b.starts[si+1]], callBefore{})
	}
	b.runStarts[len(b.sessions)] = len(b.runs)
}

// callBefore is the stored call before a sequence of calls, if any: its
// tool's hash and its time.
type callBefore struct {
	set bool
	th  uint64
	us  int64
}

// sessionRuns appends to runs the runs of one session's calls (sorted,
// before them the call before), and returns the session's new tail and
// whether two of its calls share a millisecond (then the result is not
// DuckDB's: the caller takes the SQL path).
func sessionRuns(runs []fastRun, si int32, calls []runCall, before callBefore) ([]fastRun, runTail, bool) {
	gap := RunsMaxGap.Milliseconds()
	t := runTail{sessionIndex: si}
	tied := false
	var open *fastRun
	for i, c := range calls {
		if i > 0 && c.ms == calls[i-1].ms {
			tied = true
		}
		cont := i > 0 && c.args != "" && c.tool == calls[i-1].tool && c.args == calls[i-1].args && c.ms-calls[i-1].ms <= gap
		if cont {
			if open == nil {
				p := calls[i-1]
				open = &fastRun{session: si, tool: p.tool, args: p.args, t0: p.ms, first: p.us, errors: b2i(p.err), atStart: i == 1}
				switch {
				case i > 1:
					open.prevTool, open.prevUS, open.prevSet = calls[i-2].tool, calls[i-2].us, true
				case before.set:
					open.prevTH, open.prevUS, open.prevSet = before.th, before.us, true
				}
			}
			open.gaps = append(open.gaps, c.ms-calls[i-1].ms)
			open.errors += b2i(c.err)
			open.lastErr, open.t1, open.lastU = c.err, c.ms, c.us
			continue
		}
		if open != nil {
			runs = append(runs, *open)
			open = nil
		}
		// Not continuing the call before, a millisecond or more later
		// (else the session is tied): a cut.
		t.bMS, t.atStart = c.ms, i == 0
		switch {
		case i > 0:
			t.aUS, t.aTool, t.aSet = calls[i-1].us, calls[i-1].tool, true
		case before.set:
			t.aUS, t.aTH, t.aSet = before.us, before.th, true
		}
	}
	if open != nil {
		runs = append(runs, *open)
	}
	last := calls[len(calls)-1]
	t.lastUS, t.lastTool, t.lastArgs = last.us, last.tool, last.args
	return runs, t, tied
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}
