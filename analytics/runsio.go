package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/mcptrail/mcptrail/internal/duckhash"
)

// The DuckDB side of runsfast.go: the stored tails it starts from, the
// runs and tails it stores, the open runs it extends, the sessions it hands
// to the SQL path, each crossing as one Arrow record.

// recentTails is how far before a batch's first call the tails of its
// sessions are looked for among the recent rows of run_tails alone (by
// last_ts, which DuckDB skips row groups by); older ones are read with a
// scan of the whole table, for the sessions whose key tailKeys holds.
const recentTails = 24 * time.Hour

// tailColumns are a stored tail's columns (run_tails t) in storedTail's
// order.
const tailColumns = `epoch_ms(t.last_ts), epoch_us(t.last_ts), t.last_th, t.last_hh,
	       t.b_ms, coalesce(epoch_us(t.a_ts), 0), coalesce(t.a_th, 0), t.a_ts IS NOT NULL`

// lookupTails reads run_tails for the batch's sessions, and whether each
// session's first new call continues its stored last call; with every
// session's key (pk, by session index), computed in Go as the SQL path's
// hash() computes it. Only the sessions whose key keys holds are looked up:
// among the recent tails first, then in the whole table for those not
// found there.
func lookupTails(ctx context.Context, v *arrowViews, keys *tailKeys, b *batchCalls) (map[int32]storedTail, []uint64, error) {
	out := map[int32]storedTail{}
	pks := make([]uint64, len(b.sessions))
	for si, s := range b.sessions {
		pks[si] = s.pk()
	}
	if len(pks) == 0 {
		return out, pks, nil
	}
	if err := keys.use(ctx, v.conn); err != nil {
		return nil, nil, err
	}
	each := func(si int32, t storedTail) {
		t.continues = b.continuesStored(si, t)
		out[si] = t
	}
	// lookup joins the sessions ask selects (as the view name: session
	// index and key) with the tails cond (after the join) selects, and
	// tells how many it asked for.
	schema := arrow.NewSchema([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32}, {Name: "pk", Type: arrow.PrimitiveTypes.Uint64}}, nil)
	lookup := func(name string, ask func(si int32, pk uint64) bool, cond string, args ...any) (int, error) {
		mem := v.allocator()
		ib, kb := array.NewInt32Builder(mem), array.NewUint64Builder(mem)
		for si, pk := range pks {
			if ask(int32(si), pk) {
				ib.Append(int32(si))
				kb.Append(pk)
			}
		}
		asked := ib.Len()
		if asked == 0 {
			ib.Release()
			kb.Release()
			return 0, nil
		}
		names, err := v.add(schema, name, 1, ib, kb)
		if err != nil {
			return 0, err
		}
		return asked, scanTails(ctx, v, `SELECT f.i, `+tailColumns+` FROM `+names[0]+` f JOIN run_tails t ON t.pk = f.pk`+cond, each, args...)
	}
	held := func(_ int32, pk uint64) bool { return keys.has(pk) }
	first := int64(math.MaxInt64)
	for si, pk := range pks {
		if held(int32(si), pk) {
			first = min(first, b.calls[b.starts[si]].ms)
		}
	}
	asked, err := lookup("run_sessions", held, ` WHERE t.last_ts >= ?`, time.UnixMilli(first).Add(-recentTails).UTC())
	if err != nil {
		return nil, nil, err
	}
	if len(out) < asked {
		older := func(si int32, pk uint64) bool {
			_, found := out[si]
			return !found && keys.has(pk)
		}
		if _, err := lookup("run_sessions_older", older, ""); err != nil {
			return nil, nil, err
		}
	}
	return out, pks, nil
}

// continuesStored tells whether session si's first call in the batch
// continues its stored last call t, as a run's calls continue each other:
// the same tool and the same arguments (some) within RunsMaxGap.
func (b *batchCalls) continuesStored(si int32, t storedTail) bool {
	c := b.calls[b.starts[si]]
	return c.args != noArgs && c.ms-t.lastMS <= RunsMaxGap.Milliseconds() &&
		duckhash.String(b.tools[c.tool]) == t.lastTH && duckhash.String(b.argsOf(c.args)) == t.lastHH
}

// scanTails runs a query of session index and tailColumns, and hands each
// row to each.
func scanTails(ctx context.Context, v *arrowViews, text string, each func(i int32, t storedTail), args ...any) error {
	rows, err := v.conn.QueryContext(ctx, text, args...)
	if err != nil {
		return fmt.Errorf("record runs: stored tails: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var i int32
		var t storedTail
		if err := rows.Scan(&i, &t.lastMS, &t.lastUS, &t.lastTH, &t.lastHH, &t.bMS, &t.aUS, &t.aTH, &t.aSet); err != nil {
			return fmt.Errorf("record runs: stored tails: %w", err)
		}
		each(i, t)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("record runs: stored tails: %w", err)
	}
	return nil
}

// storeFastRuns inserts the Go path's runs and replaces its sessions' tails
// (stored: those lookupTails found; pks: every session's key). The hashes
// the tables hold are computed here, in Go, so that no string crosses
// into DuckDB but a run's server and grant.
func storeFastRuns(ctx context.Context, v *arrowViews, b *batchCalls, runs []fastRun, tails []runTail, stored map[int32]storedTail, pks []uint64) error {
	mem := v.allocator()
	if len(runs) > 0 {
		sc, thb, hhb, prev := newSessionHashCols(mem), array.NewUint64Builder(mem), array.NewUint64Builder(mem), newBeforeCols(mem)
		gapsb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int64)
		gapb := gapsb.ValueBuilder().(*array.Int64Builder)
		eb, leb, t0b, t1b := array.NewInt64Builder(mem), array.NewBooleanBuilder(mem), array.NewInt64Builder(mem), array.NewInt64Builder(mem)
		fb, lb := array.NewTimestampBuilder(mem, tsType), array.NewTimestampBuilder(mem, tsType)
		mb := array.NewFloat64Builder(mem)
		var sorted []int64
		for _, r := range runs {
			sc.add(b.sessions[r.session])
			thb.Append(duckhash.String(r.tool))
			hhb.Append(duckhash.String(r.args))
			prev.add(r.prevSet, r.prevTool, r.prevTH, r.prevUS)
			gapsb.Append(true)
			gapb.AppendValues(r.gaps, nil)
			mb.Append(medianGap(r.gaps, &sorted))
			eb.Append(r.errors)
			leb.Append(r.lastErr)
			t0b.Append(r.t0)
			t1b.Append(r.t1)
			fb.Append(arrow.Timestamp(r.first))
			lb.Append(arrow.Timestamp(r.lastU))
		}
		schema := arrow.NewSchema(slices.Concat(sc.fields(), []arrow.Field{
			{Name: "th", Type: arrow.PrimitiveTypes.Uint64}, {Name: "hh", Type: arrow.PrimitiveTypes.Uint64},
		}, prev.fields("prev"), []arrow.Field{
			{Name: "gaps", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)}, {Name: "median_gap", Type: arrow.PrimitiveTypes.Float64},
			{Name: "errors", Type: arrow.PrimitiveTypes.Int64}, {Name: "last_err", Type: arrow.FixedWidthTypes.Boolean},
			{Name: "t0", Type: arrow.PrimitiveTypes.Int64}, {Name: "t1", Type: arrow.PrimitiveTypes.Int64},
			{Name: "first_ts", Type: tsType}, {Name: "last_ts", Type: tsType},
		}), nil)
		names, err := v.add(schema, "run_found", 1, slices.Concat(sc.builders(), []array.Builder{thb, hhb}, prev.builders(), []array.Builder{gapsb, mb, eb, leb, t0b, t1b, fb, lb})...)
		if err != nil {
			return err
		}
		// The figures by the same aggregates as insertRunsSQL's, over the
		// gaps in order; the median computed as DuckDB's (medianGap).
		if _, err := v.conn.ExecContext(ctx, `INSERT INTO call_runs
SELECT server, g, skh, th, hh, prev_th, prev_ts,
       len(gaps) + 1, (t1 - t0) / 1000.0, coalesce(list_avg(gaps), 0) / 1000.0,
       coalesce(list_aggregate(gaps, 'stddev_pop'), 0) / 1000.0, median_gap / 1000.0,
       errors, last_err, t0, t1, first_ts, last_ts
FROM `+names[0]); err != nil {
			return fmt.Errorf("record runs: store runs: %w", err)
		}
	}
	if len(tails) == 0 {
		return nil
	}
	pkb, bb, a := array.NewUint64Builder(mem), array.NewInt64Builder(mem), newBeforeCols(mem)
	lub, ltb, lab := array.NewTimestampBuilder(mem, tsType), array.NewUint64Builder(mem), array.NewUint64Builder(mem)
	for _, t := range tails {
		pkb.Append(pks[t.sessionIndex])
		bb.Append(t.bMS)
		a.add(t.aSet, t.aTool, t.aTH, t.aUS)
		lub.Append(arrow.Timestamp(t.lastUS))
		ltb.Append(duckhash.String(t.lastTool))
		if t.lastArgs == "" {
			lab.Append(duckhash.Null)
		} else {
			lab.Append(duckhash.String(t.lastArgs))
		}
	}
	schema := arrow.NewSchema(slices.Concat([]arrow.Field{
		{Name: "pk", Type: arrow.PrimitiveTypes.Uint64}, {Name: "b_ms", Type: arrow.PrimitiveTypes.Int64},
	}, a.fields("a"), []arrow.Field{
		{Name: "last_ts", Type: tsType}, {Name: "last_th", Type: arrow.PrimitiveTypes.Uint64}, {Name: "last_hh", Type: arrow.PrimitiveTypes.Uint64},
	}), nil)
	names, err := v.add(schema, "run_tails_new", 2, slices.Concat([]array.Builder{pkb, bb}, a.builders(), []array.Builder{lub, ltb, lab})...)
	if err != nil {
		return err
	}
	// Only the sessions with a stored tail have one to replace, none older
	// than the oldest of those: a bound DuckDB skips row groups by.
	oldest, replaced := int64(math.MaxInt64), false
	for _, t := range tails {
		if st, ok := stored[t.sessionIndex]; ok {
			oldest, replaced = min(oldest, st.lastUS), true
		}
	}
	if replaced {
		if _, err := v.conn.ExecContext(ctx, `DELETE FROM run_tails WHERE last_ts >= ? AND pk IN (SELECT pk FROM `+names[0]+`)`,
			time.UnixMicro(oldest).UTC()); err != nil {
			return fmt.Errorf("record runs: tails: %w", err)
		}
	}
	if _, err := v.conn.ExecContext(ctx, `INSERT INTO run_tails SELECT pk, b_ms, a_ts, a_th, last_ts, last_th, last_hh FROM `+names[1]); err != nil {
		return fmt.Errorf("record runs: tails: %w", err)
	}
	return nil
}

// medianGap is median() of a run's gaps as DuckDB computes it over
// BIGINT, 0 without any: the middle gap, or of the two middle ones the
// lower plus half their difference (exact in doubles for gaps under 2^53
// ms, so that one rounding remains, as in DuckDB's interpolation). Computed
// here because list_aggregate's median cost a quarter of the runs' INSERT.
// sorted is scratch space, kept from run to run.
func medianGap(gaps []int64, sorted *[]int64) float64 {
	n := len(gaps)
	if n == 0 {
		return 0
	}
	s := append((*sorted)[:0], gaps...)
	*sorted = s
	slices.Sort(s)
	lo := float64(s[(n-1)/2])
	if n%2 == 1 {
		return lo
	}
	return lo + (float64(s[n/2])-lo)*0.5
}

// recordSlowRuns runs recordRuns for the sessions slow of b (pks: every
// session's key, by index), among the calls that where selects.
func recordSlowRuns(ctx context.Context, v *arrowViews, b *batchCalls, slow []int32, pks []uint64, where string, args ...any) error {
	kb := array.NewUint64Builder(v.allocator())
	for _, si := range slow {
		kb.Append(pks[si])
	}
	schema := arrow.NewSchema([]arrow.Field{{Name: "pk", Type: arrow.PrimitiveTypes.Uint64}}, nil)
	names, err := v.add(schema, "run_slow", 1, kb)
	if err != nil {
		return err
	}
	if _, err := v.conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE run_slow AS SELECT pk FROM `+names[0]); err != nil {
		return fmt.Errorf("record runs: sessions: %w", err)
	}
	defer func() { _, _ = v.conn.ExecContext(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS run_slow`) }()
	// Their keys are among the batch's, which recordBatchRuns adds to the
	// store's tail keys.
	return recordRunsOf(ctx, v.conn, nil, `(`+where+`) AND `+sessionHash+` IN (SELECT pk FROM run_slow)`, sessionsFilter(b, slow), args...)
}

// sessionsFilter is a condition on calls' columns that admits the calls of
// the sessions slow of b (and maybe others, which the hash then tells
// apart): comparing the stored strings costs less than hashing them.
func sessionsFilter(b *batchCalls, slow []int32) string {
	var sessions, gateways []string
	none := false
	for _, si := range slow {
		k := b.sessions[si].key
		switch {
		case strings.HasPrefix(k, "gateway:"):
			gateways = append(gateways, sqlQuote(strings.TrimPrefix(k, "gateway:")))
		case k == "":
			none = true
		}
		sessions = append(sessions, sqlQuote(k)) // a session may be named gateway:… too
	}
	cond := `calls.session IN ('` + strings.Join(sessions, `', '`) + `')`
	if len(gateways) > 0 {
		cond += ` OR (calls.session IS NULL AND calls.gateway IN ('` + strings.Join(gateways, `', '`) + `'))`
	}
	if none {
		cond += ` OR (calls.session IS NULL AND calls.gateway IS NULL)`
	}
	return cond
}

// sessionCols are a record's columns of sessions: server, grant and key.
type sessionCols struct{ server, grant, key *array.StringBuilder }

func newSessionCols(mem memory.Allocator) sessionCols {
	return sessionCols{array.NewStringBuilder(mem), array.NewStringBuilder(mem), array.NewStringBuilder(mem)}
}

func (c sessionCols) add(s runSession) {
	c.server.Append(s.server)
	c.grant.Append(s.grant)
	c.key.Append(s.key)
}

// fields and builders are the columns', named server, g and sk.
func (c sessionCols) fields() []arrow.Field {
	return []arrow.Field{{Name: "server", Type: arrow.BinaryTypes.String}, {Name: "g", Type: arrow.BinaryTypes.String}, {Name: "sk", Type: arrow.BinaryTypes.String}}
}

func (c sessionCols) builders() []array.Builder { return []array.Builder{c.server, c.grant, c.key} }

// sessionHashCols are a record's columns of sessions as call_runs keys
// them: server, grant and the session key's hash (duckhash, as the SQL
// path's hash(sk)).
type sessionHashCols struct {
	server, grant *array.StringBuilder
	skh           *array.Uint64Builder
}

func newSessionHashCols(mem memory.Allocator) sessionHashCols {
	return sessionHashCols{array.NewStringBuilder(mem), array.NewStringBuilder(mem), array.NewUint64Builder(mem)}
}

func (c sessionHashCols) add(s runSession) {
	c.server.Append(s.server)
	c.grant.Append(s.grant)
	c.skh.Append(duckhash.String(s.key))
}

// fields and builders are the columns', named server, g and skh.
func (c sessionHashCols) fields() []arrow.Field {
	return []arrow.Field{{Name: "server", Type: arrow.BinaryTypes.String}, {Name: "g", Type: arrow.BinaryTypes.String},
		{Name: "skh", Type: arrow.PrimitiveTypes.Uint64}}
}

func (c sessionHashCols) builders() []array.Builder { return []array.Builder{c.server, c.grant, c.skh} }

// beforeCols are a record's columns of the call before something: its
// tool's hash (computed here when the call is in the batch, stored when it
// is the stored last call) and its time; both null without one.
type beforeCols struct {
	th *array.Uint64Builder
	ts *array.TimestampBuilder
}

func newBeforeCols(mem memory.Allocator) beforeCols {
	return beforeCols{array.NewUint64Builder(mem), array.NewTimestampBuilder(mem, tsType)}
}

// add appends the call before: tool when it is in the batch, else the
// stored tool's hash th; none when set is false.
func (c beforeCols) add(set bool, tool string, th uint64, us int64) {
	switch {
	case !set:
		c.th.AppendNull()
		c.ts.AppendNull()
		return
	case tool != "":
		c.th.Append(duckhash.String(tool))
	default:
		c.th.Append(th)
	}
	c.ts.Append(arrow.Timestamp(us))
}

// fields and builders are the columns', named prefix_th and prefix_ts.
func (c beforeCols) fields(prefix string) []arrow.Field {
	return []arrow.Field{{Name: prefix + "_th", Type: arrow.PrimitiveTypes.Uint64, Nullable: true}, {Name: prefix + "_ts", Type: tsType, Nullable: true}}
}

func (c beforeCols) builders() []array.Builder { return []array.Builder{c.th, c.ts} }

// tsType is the Arrow type of the records' times.
var tsType = &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}

// arrowViews registers Arrow records as views on the write connection and
// drops them all in one statement: a batch's upkeep registers several, for
// its tool days, tool day use and runs.
type arrowViews struct {
	ctx  context.Context
	conn *sql.Conn
	// mem builds the records: the store's pool for a batch's upkeep, Go's
	// allocator when nil.
	mem        memory.Allocator
	names      []string
	unregister []func()
}

// allocator is the allocator of v's records.
func (v *arrowViews) allocator() memory.Allocator {
	if v.mem == nil {
		return memory.DefaultAllocator
	}
	return v.mem
}

// add makes the builders' columns, in schema's order, copies views named
// after prefix: a view over an Arrow stream is read once, so a record read
// twice needs two.
func (v *arrowViews) add(schema *arrow.Schema, prefix string, copies int, builders ...array.Builder) ([]string, error) {
	cols := make([]arrow.Array, len(builders))
	for i, b := range builders {
		cols[i] = b.NewArray()
		b.Release()
	}
	rec := array.NewRecordBatch(schema, cols, int64(cols[0].Len()))
	for _, c := range cols {
		c.Release()
	}
	defer rec.Release()
	names := make([]string, copies)
	for i := range names {
		reader, err := array.NewRecordReader(schema, []arrow.RecordBatch{rec})
		if err != nil {
			return nil, fmt.Errorf("record runs: arrow: %w", err)
		}
		names[i] = fmt.Sprintf("%s_%d", prefix, viewSeq.Add(1))
		unregister, err := registerReader(v.conn, reader, names[i])
		if err != nil {
			return nil, fmt.Errorf("record runs: register %s: %w", prefix, err)
		}
		v.names = append(v.names, names[i])
		v.unregister = append(v.unregister, unregister)
	}
	return names, nil
}

// close drops the views and frees their streams.
func (v *arrowViews) close() {
	if len(v.names) == 0 {
		return
	}
	drops := make([]string, len(v.names))
	for i, n := range v.names {
		drops[i] = `DROP VIEW IF EXISTS ` + n
	}
	_, _ = v.conn.ExecContext(context.WithoutCancel(v.ctx), strings.Join(drops, "; "))
	for _, u := range v.unregister {
		u()
	}
	v.names, v.unregister = nil, nil
}

// openRunCalls reads, for each continuing session, its stored calls since
// its last cut (the run its first new call continues), sorted; the calls
// that where selects (the batch's own) are left out.
func openRunCalls(ctx context.Context, v *arrowViews, b *batchCalls, continuing []int32, tails map[int32]storedTail, where string, args ...any) (map[int32][]runCall, error) {
	mem := v.allocator()
	ib, sc, bb := array.NewInt32Builder(mem), newSessionCols(mem), array.NewInt64Builder(mem)
	floor := tails[continuing[0]].bMS
	for _, si := range continuing {
		ib.Append(si)
		sc.add(b.sessions[si])
		bb.Append(tails[si].bMS)
		floor = min(floor, tails[si].bMS)
	}
	schema := arrow.NewSchema(slices.Concat([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32}}, sc.fields(),
		[]arrow.Field{{Name: "b_ms", Type: arrow.PrimitiveTypes.Int64}}), nil)
	names, err := v.add(schema, "run_open", 1, slices.Concat([]array.Builder{ib}, sc.builders(), []array.Builder{bb})...)
	if err != nil {
		return nil, err
	}
	rows, err := v.conn.QueryContext(ctx, `SELECT v.i, epoch_ms(calls.ts), epoch_us(calls.ts), calls.tool, coalesce(calls.args_hash, ''),
	       coalesce(calls.status = 'error', false)
	FROM calls JOIN `+names[0]+` v ON calls.server = v.server AND coalesce(calls."grant", '') = v.g AND `+SessionKey+` = v.sk
	WHERE calls.ts >= ? AND calls.tool IS NOT NULL AND epoch_ms(calls.ts) >= v.b_ms AND NOT (`+where+`)`,
		append([]any{time.UnixMilli(floor).UTC()}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("record runs: open runs: %w", err)
	}
	defer rows.Close()
	out := map[int32][]runCall{}
	for rows.Next() {
		var c runCall
		var tool, args string
		if err := rows.Scan(&c.session, &c.ms, &c.us, &tool, &args, &c.err); err != nil {
			return nil, fmt.Errorf("record runs: open runs: %w", err)
		}
		c.tool, c.args = b.toolID(tool), b.storedArgsRef(args)
		out[c.session] = append(out[c.session], c)
	}
	for _, calls := range out {
		slices.SortFunc(calls, b.compareCalls)
	}
	return out, rows.Err()
}

// dropOpenRuns deletes the stored runs that the extended sessions' new
// calls continue: each starts at its session's last cut.
func dropOpenRuns(ctx context.Context, v *arrowViews, b *batchCalls, extended []int32, tails map[int32]storedTail) error {
	if len(extended) == 0 {
		return nil
	}
	mem := v.allocator()
	sc, tb := newSessionHashCols(mem), array.NewInt64Builder(mem)
	floor := int64(math.MaxInt64)
	for _, si := range extended {
		sc.add(b.sessions[si])
		tb.Append(tails[si].bMS)
		floor = min(floor, tails[si].bMS)
	}
	schema := arrow.NewSchema(slices.Concat(sc.fields(), []arrow.Field{{Name: "t0", Type: arrow.PrimitiveTypes.Int64}}), nil)
	names, err := v.add(schema, "run_extended", 1, slices.Concat(sc.builders(), []array.Builder{tb})...)
	if err != nil {
		return err
	}
	if _, err := v.conn.ExecContext(ctx, `DELETE FROM call_runs USING `+names[0]+` e
	WHERE call_runs.t0 >= ? AND call_runs.server = e.server AND call_runs."grant" = e.g AND call_runs.skh = e.skh AND call_runs.t0 = e.t0`, floor); err != nil {
		return fmt.Errorf("record runs: extended runs: %w", err)
	}
	return nil
}
