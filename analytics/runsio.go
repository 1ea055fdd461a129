package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The DuckDB side of runsfast.go: the stored tails it starts from, the
// runs and tails it stores, the open runs it extends, the sessions it hands
// to the SQL path, each crossing as one Arrow record.

// recentTails is how far before a batch's first call the tails of its
// sessions are looked for among the recent rows of run_tails alone (by
// last_ts, which DuckDB skips row groups by); older ones are read with a
// scan of the whole table, for the sessions whose key tailKeys holds.
const recentTails = 24 * time.Hour

// tailColumns are a stored tail's columns in storedTail's order, for the
// session f whose tail t is: whether the session's first new call
// continues the stored last call among them.
var tailColumns = `epoch_ms(t.last_ts), epoch_us(t.last_ts), t.last_th,
	       t.b_ms, coalesce(epoch_us(t.a_ts), 0), coalesce(t.a_th, 0), t.a_ts IS NOT NULL,
	       coalesce(f.args IS NOT NULL AND hash(f.tool) = t.last_th AND hash(f.args) = t.last_hh
	                AND f.ms - epoch_ms(t.last_ts) <= ` + strconv.FormatInt(RunsMaxGap.Milliseconds(), 10) + `, false)`

// lookupTails reads run_tails for the batch's sessions, and whether each
// session's first new call continues its stored last call; with every
// session's key (pk, by session index). The recent tails come first; the
// sessions without one whose key keys holds are looked up in the whole
// table. The sessions are kept for it in the temporary table
// run_batch_sessions (i, pk and their first call's keys).
func lookupTails(ctx context.Context, v *arrowViews, keys *tailKeys, b *batchCalls) (map[int32]storedTail, []uint64, error) {
	if len(b.sessions) == 0 {
		return map[int32]storedTail{}, nil, nil
	}
	kept, err := keys.use(ctx, v.conn)
	if err != nil {
		return nil, nil, err
	}
	if !kept {
		out, err := lookupAllTails(ctx, v, b)
		return out, nil, err
	}
	sessions, first, err := addSessionsView(v, b)
	if err != nil {
		return nil, nil, err
	}
	if _, err := v.conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE run_batch_sessions AS
	SELECT i, hash(server, g, sk) AS pk, tool, args, ms FROM `+sessions); err != nil {
		return nil, nil, fmt.Errorf("record runs: sessions: %w", err)
	}
	pks := make([]uint64, 0, len(b.sessions))
	if err := scanKeys(ctx, v.conn, `SELECT pk FROM run_batch_sessions ORDER BY i`, func(pk uint64) { pks = append(pks, pk) }); err != nil {
		return nil, nil, err
	}
	out := map[int32]storedTail{}
	each := func(i int32, t storedTail) { out[i] = t }
	if err := scanTails(ctx, v, `SELECT f.i, `+tailColumns+` FROM run_batch_sessions f
	JOIN (SELECT * FROM run_tails WHERE last_ts >= ?) t ON t.pk = f.pk`, each, time.UnixMilli(first).Add(-recentTails).UTC()); err != nil {
		return nil, nil, err
	}
	var older []int32
	for si, pk := range pks {
		if _, ok := out[int32(si)]; !ok && keys.has(pk) {
			older = append(older, int32(si))
		}
	}
	if len(older) > 0 {
		in := make([]string, len(older))
		for j, si := range older {
			in[j] = strconv.Itoa(int(si))
		}
		if err := scanTails(ctx, v, `SELECT f.i, `+tailColumns+` FROM run_batch_sessions f JOIN run_tails t ON t.pk = f.pk
		WHERE f.i IN (`+strings.Join(in, ", ")+`)`, each); err != nil {
			return nil, nil, err
		}
	}
	return out, pks, nil
}

// lookupAllTails is lookupTails by one scan of run_tails, for a small one.
func lookupAllTails(ctx context.Context, v *arrowViews, b *batchCalls) (map[int32]storedTail, error) {
	sessions, _, err := addSessionsView(v, b)
	if err != nil {
		return nil, err
	}
	out := map[int32]storedTail{}
	err = scanTails(ctx, v, `SELECT f.i, `+tailColumns+` FROM `+sessions+` f JOIN run_tails t ON t.pk = hash(f.server, f.g, f.sk)`,
		func(i int32, t storedTail) { out[i] = t })
	return out, err
}

// addSessionsView registers the batch's sessions (i, server, g, sk) with
// their first call's tool, arguments and millisecond, which tell whether
// it continues the session's stored last call; first is the earliest of
// those calls.
func addSessionsView(v *arrowViews, b *batchCalls) (name string, first int64, err error) {
	mem := v.allocator()
	ib, sc := array.NewInt32Builder(mem), newSessionCols(mem)
	tb, ab, mb := array.NewStringBuilder(mem), array.NewStringBuilder(mem), array.NewInt64Builder(mem)
	first = math.MaxInt64
	for si, s := range b.sessions {
		c := b.calls[b.starts[si]]
		ib.Append(int32(si))
		sc.add(s)
		tb.Append(b.tools[c.tool])
		if c.args == noArgs {
			ab.AppendNull()
		} else {
			ab.Append(b.argsOf(c.args))
		}
		mb.Append(c.ms)
		first = min(first, c.ms)
	}
	schema := arrow.NewSchema(slices.Concat([]arrow.Field{{Name: "i", Type: arrow.PrimitiveTypes.Int32}}, sc.fields(), []arrow.Field{
		{Name: "tool", Type: arrow.BinaryTypes.String}, {Name: "args", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "ms", Type: arrow.PrimitiveTypes.Int64},
	}), nil)
	names, err := v.add(schema, "run_sessions", 1, slices.Concat([]array.Builder{ib}, sc.builders(), []array.Builder{tb, ab, mb})...)
	if err != nil {
		return "", 0, err
	}
	return names[0], first, nil
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
		if err := rows.Scan(&i, &t.lastMS, &t.lastUS, &t.lastTH, &t.bMS, &t.aUS, &t.aTH, &t.aSet, &t.continues); err != nil {
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
// (stored: those lookupTails found).
func storeFastRuns(ctx context.Context, v *arrowViews, b *batchCalls, runs []fastRun, tails []runTail, stored map[int32]storedTail) error {
	mem := v.allocator()
	if len(runs) > 0 {
		sc, prev, tb, ab := newSessionCols(mem), newBeforeCols(mem), array.NewStringBuilder(mem), array.NewStringBuilder(mem)
		gapsb := array.NewListBuilder(mem, arrow.PrimitiveTypes.Int64)
		gapb := gapsb.ValueBuilder().(*array.Int64Builder)
		eb, leb, t0b, t1b := array.NewInt64Builder(mem), array.NewBooleanBuilder(mem), array.NewInt64Builder(mem), array.NewInt64Builder(mem)
		fb, lb := array.NewTimestampBuilder(mem, tsType), array.NewTimestampBuilder(mem, tsType)
		for _, r := range runs {
			sc.add(b.sessions[r.session])
			prev.add(r.prevSet, r.prevTool, r.prevTH, r.prevUS)
			tb.Append(r.tool)
			ab.Append(r.args)
			gapsb.Append(true)
			gapb.AppendValues(r.gaps, nil)
			eb.Append(r.errors)
			leb.Append(r.lastErr)
			t0b.Append(r.t0)
			t1b.Append(r.t1)
			fb.Append(arrow.Timestamp(r.first))
			lb.Append(arrow.Timestamp(r.lastU))
		}
		schema := arrow.NewSchema(slices.Concat(sc.fields(), prev.fields("prev"), []arrow.Field{
			{Name: "tool", Type: arrow.BinaryTypes.String}, {Name: "args", Type: arrow.BinaryTypes.String},
			{Name: "gaps", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64)},
			{Name: "errors", Type: arrow.PrimitiveTypes.Int64}, {Name: "last_err", Type: arrow.FixedWidthTypes.Boolean},
			{Name: "t0", Type: arrow.PrimitiveTypes.Int64}, {Name: "t1", Type: arrow.PrimitiveTypes.Int64},
			{Name: "first_ts", Type: tsType}, {Name: "last_ts", Type: tsType},
		}), nil)
		names, err := v.add(schema, "run_found", 1, slices.Concat(sc.builders(), prev.builders(), []array.Builder{tb, ab, gapsb, eb, leb, t0b, t1b, fb, lb})...)
		if err != nil {
			return err
		}
		// The figures by the same aggregates as insertRunsSQL's, over the
		// gaps in order.
		if _, err := v.conn.ExecContext(ctx, `INSERT INTO call_runs
SELECT server, g, hash(sk), hash(tool), hash(args), CASE WHEN prev_tool IS NULL THEN prev_th ELSE hash(prev_tool) END, prev_ts,
       len(gaps) + 1, (t1 - t0) / 1000.0, coalesce(list_avg(gaps), 0) / 1000.0,
       coalesce(list_aggregate(gaps, 'stddev_pop'), 0) / 1000.0, coalesce(list_aggregate(gaps, 'median'), 0) / 1000.0,
       errors, last_err, t0, t1, first_ts, last_ts
FROM `+names[0]); err != nil {
			return fmt.Errorf("record runs: store runs: %w", err)
		}
	}
	if len(tails) == 0 {
		return nil
	}
	sc, a, bb := newSessionCols(mem), newBeforeCols(mem), array.NewInt64Builder(mem)
	lub, ltb, lab := array.NewTimestampBuilder(mem, tsType), array.NewStringBuilder(mem), array.NewStringBuilder(mem)
	for _, t := range tails {
		sc.add(b.sessions[t.sessionIndex])
		a.add(t.aSet, t.aTool, t.aTH, t.aUS)
		bb.Append(t.bMS)
		lub.Append(arrow.Timestamp(t.lastUS))
		ltb.Append(t.lastTool)
		if t.lastArgs == "" {
			lab.AppendNull()
		} else {
			lab.Append(t.lastArgs)
		}
	}
	schema := arrow.NewSchema(slices.Concat(sc.fields(), a.fields("a"), []arrow.Field{
		{Name: "b_ms", Type: arrow.PrimitiveTypes.Int64}, {Name: "last_ts", Type: tsType},
		{Name: "last_tool", Type: arrow.BinaryTypes.String}, {Name: "last_args", Type: arrow.BinaryTypes.String, Nullable: true},
	}), nil)
	names, err := v.add(schema, "run_tails_new", 2, slices.Concat(sc.builders(), a.builders(), []array.Builder{bb, lub, ltb, lab})...)
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
		if _, err := v.conn.ExecContext(ctx, `DELETE FROM run_tails WHERE last_ts >= ? AND pk IN (SELECT hash(server, g, sk) FROM `+names[0]+`)`,
			time.UnixMicro(oldest).UTC()); err != nil {
			return fmt.Errorf("record runs: tails: %w", err)
		}
	}
	if _, err := v.conn.ExecContext(ctx, `INSERT INTO run_tails
SELECT hash(server, g, sk), b_ms, a_ts, CASE WHEN a_tool IS NULL THEN a_th ELSE hash(a_tool) END, last_ts, hash(last_tool), hash(last_args)
FROM `+names[1]); err != nil {
		return fmt.Errorf("record runs: tails: %w", err)
	}
	return nil
}

// recordSlowRuns runs recordRuns for the sessions slow of b, among the
// calls that where selects.
func recordSlowRuns(ctx context.Context, v *arrowViews, b *batchCalls, slow []int32, where string, args ...any) error {
	sc := newSessionCols(v.allocator())
	for _, si := range slow {
		sc.add(b.sessions[si])
	}
	names, err := v.add(arrow.NewSchema(sc.fields(), nil), "run_slow", 1, sc.builders()...)
	if err != nil {
		return err
	}
	if _, err := v.conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE run_slow AS SELECT hash(server, g, sk) AS pk FROM `+names[0]); err != nil {
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

// beforeCols are a record's columns of the call before something: its
// tool when it is in the batch, its tool's hash when it is stored, its
// time; all null without one.
type beforeCols struct {
	tool *array.StringBuilder
	th   *array.Uint64Builder
	ts   *array.TimestampBuilder
}

func newBeforeCols(mem memory.Allocator) beforeCols {
	return beforeCols{array.NewStringBuilder(mem), array.NewUint64Builder(mem), array.NewTimestampBuilder(mem, tsType)}
}

func (c beforeCols) add(set bool, tool string, th uint64, us int64) {
	switch {
	case !set:
		c.tool.AppendNull()
		c.th.AppendNull()
		c.ts.AppendNull()
		return
	case tool != "":
		c.tool.Append(tool)
		c.th.AppendNull()
	default:
		c.tool.AppendNull()
		c.th.Append(th)
	}
	c.ts.Append(arrow.Timestamp(us))
}

// fields and builders are the columns', named prefix_tool, prefix_th and
// prefix_ts.
func (c beforeCols) fields(prefix string) []arrow.Field {
	return []arrow.Field{{Name: prefix + "_tool", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: prefix + "_th", Type: arrow.PrimitiveTypes.Uint64, Nullable: true}, {Name: prefix + "_ts", Type: tsType, Nullable: true}}
}

func (c beforeCols) builders() []array.Builder { return []array.Builder{c.tool, c.th, c.ts} }

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
	sc, tb := newSessionCols(mem), array.NewInt64Builder(mem)
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
	WHERE call_runs.t0 >= ? AND call_runs.server = e.server AND call_runs."grant" = e.g AND call_runs.skh = hash(e.sk) AND call_runs.t0 = e.t0`, floor); err != nil {
		return fmt.Errorf("record runs: extended runs: %w", err)
	}
	return nil
}
