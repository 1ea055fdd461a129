package analytics

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

func openTemp(t *testing.T) *Store {
	t.Helper()
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "t.duckdb"), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func sampleEvents(n int, base time.Time) []audit.Event {
	evs := make([]audit.Event, n)
	lat := 12.5
	code := int64(-32000)
	for i := range evs {
		evs[i] = audit.Event{
			ID: fmt.Sprintf("e-%d", i), TS: base.Add(time.Duration(i) * time.Second), Server: "proxmox-mcp",
			Tool: "get_vm_status", Method: "tools/call", Decision: audit.Allowed, Status: "ok",
			Grant: "ops", Agent: "agent-1", Session: "s1", LatencyMS: &lat,
			ArgKeys: []string{"node", "vmid"}, ArgsHash: "sha256:ab", Attrs: map[string]string{"k": "v"},
		}
		if i%2 == 1 {
			evs[i].Decision, evs[i].Status, evs[i].ErrorCode, evs[i].ArgKeys, evs[i].Attrs = audit.Denied, "", &code, nil, nil
		}
	}
	return evs
}

func count(t *testing.T, s *Store, q string) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB().QueryRow(q).Scan(&n))
	return n
}

// appendInBatches stores evs in batches of size, in order.
func appendInBatches(t *testing.T, s *Store, evs []audit.Event, size int) {
	t.Helper()
	for lo := 0; lo < len(evs); lo += size {
		_, err := s.Append(context.Background(), ingest.Batch{Events: evs[lo:min(lo+size, len(evs))]})
		require.NoError(t, err)
	}
}

// readString is the one string q (with args) selects.
func readString(t *testing.T, s *Store, q string, args ...any) string {
	t.Helper()
	var out string
	require.NoError(t, s.DB().QueryRow(q, args...).Scan(&out))
	return out
}

func TestOpenMigratesAndReopens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.duckdb")
	s, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	assert.Equal(t, SchemaVersion(), count(t, s, `SELECT max(version) FROM schema_migrations`))
	for _, table := range []string{"calls", "dead_letters", "tools", "policies", "suppressions", "checkpoints"} {
		assert.Equal(t, 1, count(t, s, `SELECT count(*) FROM information_schema.tables WHERE table_name = '`+table+`'`), table)
	}
	_, err = s.Append(context.Background(), ingest.Batch{Events: sampleEvents(3, time.Now())})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	s, err = Open(context.Background(), path, Options{})
	require.NoError(t, err)
	defer s.Close()
	assert.Equal(t, len(migrations), count(t, s, `SELECT count(*) FROM schema_migrations`), "migrations run once")
	assert.Equal(t, 3, count(t, s, `SELECT count(*) FROM calls`), "data survives reopen")
}

func TestOpenErrors(t *testing.T) {
	_, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing", "x.duckdb"), Options{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not exist")

	_, err = Open(context.Background(), filepath.Join(t.TempDir(), "none.duckdb"), Options{ReadOnly: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no such file")
}

// WriteBack leaves nothing committed in the write-ahead log: what a
// batch wrote there is written into the database file.
func TestWriteBackEmptiesTheLog(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	_, err := s.Append(ctx, ingest.Batch{Events: sampleEvents(3, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))})
	require.NoError(t, err)
	wal, err := os.Stat(s.Path() + ".wal")
	require.NoError(t, err)
	require.Positive(t, wal.Size(), "the batch in the log")

	require.NoError(t, s.WriteBack(ctx))
	if wal, err := os.Stat(s.Path() + ".wal"); err == nil {
		assert.Zero(t, wal.Size(), "the log after the write-back")
	} else {
		require.ErrorIs(t, err, os.ErrNotExist)
	}
}

func TestAppendDeduplicates(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	evs := sampleEvents(10, base)

	r, err := s.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Ingested: 10}, r)

	// The same events again, plus two new ones and a repeat inside the batch.
	more := append(append([]audit.Event{}, evs...), sampleEvents(12, base)[10:]...)
	more = append(more, more[11])
	r, err = s.Append(ctx, ingest.Batch{Events: more})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Ingested: 2, Duplicates: 11}, r)
	assert.Equal(t, 12, count(t, s, `SELECT count(*) FROM calls`))
	assert.Equal(t, 12, count(t, s, `SELECT count(DISTINCT id) FROM calls`))
}

func TestAppendStoresEveryField(t *testing.T) {
	s := openTemp(t)
	ts := time.Date(2026, 11, 20, 10, 0, 0, 123456000, time.FixedZone("X", 3600))
	lat, code := 7.25, int64(-32602)
	ev := audit.Event{ID: "full", TS: ts, Server: "proxmox-mcp", Tool: "vm_agent_exec", Method: "tools/call",
		Decision: audit.RateLimited, Status: "error", Gateway: "gw1", Grant: "ops", Agent: "a", Session: "s",
		RequestID: "7", Rule: "/tools/x/limits/0", Reason: "slow down", ErrorCode: &code, LatencyMS: &lat,
		ArgsHash: "sha256:00", ArgKeys: []string{"command", "vmid"}, Args: []byte(`{"command":"ls","vmid":1}`),
		PolicyVersion: "v3", Attrs: map[string]string{"region": "eu"}}
	_, err := s.Append(context.Background(), ingest.Batch{Events: []audit.Event{ev}})
	require.NoError(t, err)

	var got struct {
		ts                                                               time.Time
		server, tool, method, decision, status, gateway, grant, agent    string
		session, requestID, rule, reason, argsHash, args, pv, keys, attr string
		code                                                             int64
		lat                                                              float64
	}
	require.NoError(t, s.DB().QueryRow(`SELECT ts, server, tool, method, decision, status, gateway, "grant", agent,
		session, request_id, rule, reason, args_hash, args::VARCHAR, policy_version, arg_keys::VARCHAR, attrs['region'],
		error_code, latency_ms FROM calls`).Scan(&got.ts, &got.server, &got.tool, &got.method, &got.decision, &got.status,
		&got.gateway, &got.grant, &got.agent, &got.session, &got.requestID, &got.rule, &got.reason, &got.argsHash,
		&got.args, &got.pv, &got.keys, &got.attr, &got.code, &got.lat))
	assert.True(t, got.ts.Equal(ts))
	assert.Equal(t, "rate_limited", got.decision)
	assert.Equal(t, "ops", got.grant)
	assert.Equal(t, "[command, vmid]", got.keys)
	assert.Equal(t, "eu", got.attr)
	assert.JSONEq(t, `{"command":"ls","vmid":1}`, got.args)
	assert.Equal(t, int64(-32602), got.code)
	assert.Equal(t, 7.25, got.lat)
	assert.Equal(t, 1, count(t, s, `SELECT count(*) FROM calls WHERE ingested_at IS NOT NULL`))
}

// Rows whose optional fields are set or missing in every combination come
// back as they went in, with NULL for what is missing (null bitmaps span
// several bytes, lists and maps their own offsets).
func TestAppendMixedNullsRoundTrip(t *testing.T) {
	s := openTemp(t)
	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	var evs []audit.Event
	for i := range 37 {
		e := audit.Event{ID: fmt.Sprintf("m%02d", i), TS: base.Add(time.Duration(i) * time.Second), Server: "pve", Decision: audit.Allowed}
		if i%2 == 0 {
			e.Tool = fmt.Sprintf("tool_%d", i)
		}
		if i%3 == 0 {
			code := int64(-i)
			e.ErrorCode = &code
		}
		if i%5 != 0 {
			lat := float64(i) / 4
			e.LatencyMS = &lat
		}
		if i%4 == 1 {
			e.ArgKeys = []string{"node", fmt.Sprintf("k%d", i)}
			e.Args = fmt.Appendf(nil, `{"node":"pve%d"}`, i)
		}
		if i%7 == 3 {
			e.Attrs = map[string]string{"z": "last", "a": fmt.Sprint(i)}
		}
		evs = append(evs, e)
	}
	_, err := s.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)

	rows, err := s.DB().Query(`SELECT id, ts, tool, error_code, latency_ms, arg_keys::VARCHAR, args::VARCHAR,
		cardinality(attrs) || ':' || attrs['a'] || ',' || attrs['z'] FROM calls ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	i := 0
	for ; rows.Next(); i++ {
		var id string
		var ts time.Time
		var tool, keys, args, attrs sql.NullString
		var code sql.NullInt64
		var lat sql.NullFloat64
		require.NoError(t, rows.Scan(&id, &ts, &tool, &code, &lat, &keys, &args, &attrs))
		e := evs[i]
		assert.Equal(t, e.ID, id)
		assert.True(t, e.TS.Equal(ts), id)
		assert.Equal(t, e.Tool != "", tool.Valid, id)
		assert.Equal(t, e.Tool, tool.String, id)
		assert.Equal(t, e.ErrorCode != nil, code.Valid, id)
		if e.ErrorCode != nil {
			assert.Equal(t, *e.ErrorCode, code.Int64, id)
		}
		assert.Equal(t, e.LatencyMS != nil, lat.Valid, id)
		if e.LatencyMS != nil {
			assert.Equal(t, *e.LatencyMS, lat.Float64, id)
		}
		assert.Equal(t, len(e.ArgKeys) > 0, keys.Valid, id)
		if len(e.ArgKeys) > 0 {
			assert.Equal(t, "["+strings.Join(e.ArgKeys, ", ")+"]", keys.String, id)
			assert.JSONEq(t, string(e.Args), args.String, id)
		} else {
			assert.False(t, args.Valid, id)
		}
		assert.Equal(t, len(e.Attrs) > 0, attrs.Valid, id)
		if len(e.Attrs) > 0 {
			assert.Equal(t, fmt.Sprintf("2:%s,last", e.Attrs["a"]), attrs.String, id)
		}
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, len(evs), i)
}

func TestAppendDeadLettersAndCheckpoint(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	before := time.Now()
	raw := []byte{'{', 0xff, 0xfe, '}'}
	r, err := s.Append(ctx, ingest.Batch{
		Events:      sampleEvents(2, time.Now()),
		DeadLetters: []ingest.DeadLetter{{Source: "bad.jsonl", Line: 4, Reason: "not_utf8", Detail: "invalid UTF-8", Raw: raw}},
		Checkpoint:  &ingest.Checkpoint{Consumer: "mcptrail", Seq: 42},
	})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Ingested: 2, Rejected: 1}, r)
	var gotRaw []byte
	var line int
	require.NoError(t, s.DB().QueryRow(`SELECT raw, line FROM dead_letters`).Scan(&gotRaw, &line))
	assert.Equal(t, raw, gotRaw)
	assert.Equal(t, 4, line)
	seq, err := s.Checkpoint(ctx, "mcptrail")
	require.NoError(t, err)
	assert.Equal(t, uint64(42), seq)
	seq, err = s.Checkpoint(ctx, "other")
	require.NoError(t, err)
	assert.Zero(t, seq)
	// With when it was stored, which tells a stream created since.
	seq, at, err := s.CheckpointAt(ctx, "mcptrail")
	require.NoError(t, err)
	assert.Equal(t, uint64(42), seq)
	assert.WithinRange(t, at, before.Add(-time.Millisecond), time.Now())
	seq, at, err = s.CheckpointAt(ctx, "other")
	require.NoError(t, err)
	assert.Zero(t, seq)
	assert.True(t, at.IsZero())
}

func TestAppendFailureCommitsNothing(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err := s.Append(cancelled, ingest.Batch{Events: sampleEvents(5, time.Now()), Checkpoint: &ingest.Checkpoint{Consumer: "c", Seq: 9}})
	require.Error(t, err)
	assert.Zero(t, count(t, s, `SELECT count(*) FROM calls`))
	seq, err := s.Checkpoint(ctx, "c")
	require.NoError(t, err)
	assert.Zero(t, seq, "the checkpoint commits only with its batch")
	// The store stays usable after a failed batch.
	r, err := s.Append(ctx, ingest.Batch{Events: sampleEvents(5, time.Now())})
	require.NoError(t, err)
	assert.Equal(t, 5, r.Ingested)
}

func TestQueryIsReadOnly(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	_, err := s.Append(ctx, ingest.Batch{Events: sampleEvents(4, time.Now())})
	require.NoError(t, err)
	attach := filepath.Join(t.TempDir(), "other.duckdb")
	refused := []string{
		`INSERT INTO calls SELECT * FROM calls`,
		`DELETE FROM calls`,
		`UPDATE calls SET tool = 'x'`,
		`DROP TABLE calls`,
		`CREATE TABLE x AS SELECT 1`,
		`ATTACH '` + attach + `' AS other`,
		`COPY calls TO '` + filepath.Join(t.TempDir(), "out.csv") + `'`,
		`LOAD json`,
		`SET threads = 1`,
		`DELETE FROM calls; SELECT 1`,
		`SELECT 1; DELETE FROM calls`,
		`CHECKPOINT`,
	}
	for _, q := range refused {
		t.Run(q, func(t *testing.T) {
			err := s.Query(ctx, q, nil, func([]Column) error { return nil }, func([]any) error { return nil })
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrNotReadOnly)
		})
	}
	assert.Equal(t, 4, count(t, s, `SELECT count(*) FROM calls`), "database unchanged")
	assert.NoFileExists(t, attach)
}

func TestQueryBindsParameters(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	_, err := s.Append(ctx, ingest.Batch{Events: sampleEvents(6, time.Now())})
	require.NoError(t, err)
	var cols []Column
	var rows [][]any
	err = s.Query(ctx, `SELECT decision, count(*) AS n FROM calls WHERE tool = $tool GROUP BY ALL ORDER BY 1`,
		[]any{namedArg("tool", "get_vm_status")},
		func(c []Column) error { cols = c; return nil },
		func(r []any) error { rows = append(rows, append([]any(nil), r...)); return nil })
	require.NoError(t, err)
	require.Len(t, cols, 2)
	assert.Equal(t, "decision", cols[0].Name)
	assert.Equal(t, [][]any{{"allowed", int64(3)}, {"denied", int64(3)}}, rows)

	// A value that looks like SQL stays a value.
	rows = nil
	err = s.Query(ctx, `SELECT count(*) FROM calls WHERE tool = $tool`, []any{namedArg("tool", "x' OR '1'='1")},
		func([]Column) error { return nil }, func(r []any) error { rows = append(rows, append([]any(nil), r...)); return nil })
	require.NoError(t, err)
	assert.Equal(t, [][]any{{int64(0)}}, rows)
}

// A daemon's store appends on IngestThreads; Boosts (nested) give queries
// DuckDB's default threads and hand them back when the last one ends.
func TestBoostLendsAllThreadsWhileHeld(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "t.duckdb"), Options{IngestThreads: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	threads := func() int { return count(t, s, `SELECT current_setting('threads')`) }
	if s.queryThreads <= 1 {
		t.Skip("DuckDB runs one thread on this machine: nothing to lend")
	}
	assert.Equal(t, 1, threads())
	done1 := s.Boost(ctx)
	assert.Equal(t, s.queryThreads, threads())
	done2 := s.Boost(ctx)
	done1()
	done1() // idempotent
	assert.Equal(t, s.queryThreads, threads(), "still held by the second")
	done2()
	assert.Equal(t, 1, threads())

	plain := openTemp(t)
	before := count(t, plain, `SELECT current_setting('threads')`)
	plainMemory := memoryLimit(t, plain)
	plain.Boost(ctx)()
	assert.Equal(t, before, count(t, plain, `SELECT current_setting('threads')`), "no IngestThreads: untouched")
	assert.Equal(t, plainMemory, memoryLimit(t, plain), "no IngestMemoryLimit: untouched")
}

// Appends run under IngestMemoryLimit; a Boost lifts it to MemoryLimit.
func TestBoostLiftsTheIngestMemoryLimit(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "t.duckdb"), Options{MemoryLimit: "256MB", IngestMemoryLimit: "160MB"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	assert.Equal(t, "152.5 MiB", memoryLimit(t, s))
	done := s.Boost(ctx)
	assert.Equal(t, "244.1 MiB", memoryLimit(t, s))
	done()
	assert.Equal(t, "152.5 MiB", memoryLimit(t, s))
}

func memoryLimit(t *testing.T, s *Store) string {
	t.Helper()
	var v string
	require.NoError(t, s.DB().QueryRow(`SELECT current_setting('memory_limit')`).Scan(&v))
	return v
}

// A file that is not a database, or a database cut short or damaged, is
// reported as such, not as locked.
func TestOpenDamagedFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.duckdb")
	require.NoError(t, os.WriteFile(garbage, []byte(strings.Repeat("not a database\n", 1000)), 0o600))

	good := filepath.Join(dir, "good.duckdb")
	s, err := Open(ctx, good, Options{})
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: sampleEvents(100, time.Now())})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	data, err := os.ReadFile(good)
	require.NoError(t, err)
	truncated := filepath.Join(dir, "truncated.duckdb") // the headers, then the first kilobyte of its blocks
	require.NoError(t, os.WriteFile(truncated, data[:12288+1000], 0o600))
	corrupt := filepath.Join(dir, "corrupt.duckdb")
	bad := append([]byte(nil), data...)
	copy(bad[4200:], "XXXXXXXX") // inside the first database header, under its checksum
	require.NoError(t, os.WriteFile(corrupt, bad, 0o600))

	for path, reported := range map[string]string{
		garbage:   "not a valid DuckDB database file",
		truncated: "Could not read enough bytes",
		corrupt:   "checksum",
	} {
		for _, ro := range []bool{false, true} {
			_, err := Open(ctx, path, Options{ReadOnly: ro})
			require.Error(t, err, path)
			assert.ErrorIs(t, err, ErrNotDatabase, path)
			assert.NotErrorIs(t, err, ErrLocked, path)
			assert.Contains(t, err.Error(), "storage.path "+path+" is not a valid mcptrail database (DuckDB reported: ")
			assert.Contains(t, err.Error(), reported)
			assert.Contains(t, err.Error(), "restore it from a backup or point storage.path elsewhere")
		}
	}
}

// A file another process holds is reported as locked. The other process
// is this test binary, run again as TestHoldDatabase.
func TestOpenLockedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "held.duckdb")
	s, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())

	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldDatabase$")
	cmd.Env = append(os.Environ(), "MCPTRAIL_HOLD_DB="+path)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "holding\n", line)

	_, err = Open(context.Background(), path, Options{})
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrLocked)
	assert.NotErrorIs(t, err, ErrNotDatabase)
}

func TestHoldDatabase(t *testing.T) {
	path := os.Getenv("MCPTRAIL_HOLD_DB")
	if path == "" {
		t.Skip("run by TestOpenLockedFile")
	}
	s, err := Open(context.Background(), path, Options{})
	require.NoError(t, err)
	defer s.Close()
	fmt.Println("holding")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// The Arrow path reaches into the driver's connection: a connection of
// another layout must be refused by name, not dereferenced.
func TestRawConnectionRefusesAnotherDriver(t *testing.T) {
	_, err := rawConnection(otherConn{})
	require.ErrorIs(t, err, errNoRawConnection)
	require.ErrorContains(t, err, "analytics/arrowscan.go")

	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "raw.duckdb"), Options{})
	require.NoError(t, err)
	defer s.Close()
	conn, err := s.db.Conn(context.Background())
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.Raw(func(dc any) error {
		c, err := rawConnection(dc.(driver.Conn))
		require.NotNil(t, c)
		return err
	}))
}

// otherConn is a database/sql driver connection that is not DuckDB's.
type otherConn struct{}

func (otherConn) Prepare(string) (driver.Stmt, error) { return nil, driver.ErrSkip }
func (otherConn) Close() error                        { return nil }
func (otherConn) Begin() (driver.Tx, error)           { return nil, driver.ErrSkip }

// A stream message's dead letters are stored once, however often it is
// delivered: two deliveries of one message in one batch (a consumer that
// acknowledges redelivers what a stalled commit held past the ack wait),
// or a message read again after its batch was stored (a re-read from the
// stream's start), count as duplicates. A file's are not: a file has no
// redelivery, and its lines are told apart by nothing else.
func TestAppendStoresAStreamMessagesDeadLettersOnce(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	bad := func(seq uint64, line int64, raw string) ingest.DeadLetter {
		return ingest.DeadLetter{Source: "mcp.audit.\xff", Seq: seq, Line: line, Reason: "malformed_json", Raw: []byte(raw)}
	}
	r, err := s.Append(ctx, ingest.Batch{
		DeadLetters: []ingest.DeadLetter{bad(3, 2, "{x"), bad(3, 2, "{x"), bad(3, 3, "{y"), bad(4, 0, "{x"),
			{Source: "bad.jsonl", Line: 4, Reason: "malformed_json", Raw: []byte("{x")}},
		Checkpoint: &ingest.Checkpoint{Consumer: "mcptrail", Seq: 4},
	})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Rejected: 4, Duplicates: 1}, r)
	second := []ingest.DeadLetter{bad(3, 3, "{y"), bad(4, 0, "{x"), bad(5, 1, "{x"), bad(4, 0, "{other"),
		{Source: "bad.jsonl", Line: 4, Reason: "malformed_json", Raw: []byte("{x")}}
	r, err = s.Append(ctx, ingest.Batch{DeadLetters: second, Checkpoint: &ingest.Checkpoint{Consumer: "mcptrail", Seq: 5}})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Rejected: 3, Duplicates: 2}, r)
	assert.Equal(t, []bool{true, true, false, false, false}, []bool{second[0].Duplicate, second[1].Duplicate, second[2].Duplicate,
		second[3].Duplicate, second[4].Duplicate}, "each dead letter stored already is marked in the batch")
	assert.Equal(t, 7, count(t, s, `SELECT count(*) FROM dead_letters`))
	assert.Equal(t, 1, count(t, s, `SELECT count(*) FROM dead_letters WHERE seq = 3 AND line = 2`))
	assert.Equal(t, 2, count(t, s, `SELECT count(*) FROM dead_letters WHERE source = 'bad.jsonl'`))
}

// A dead letter's text is stored whatever its bytes: a NATS subject or a
// file name that is not UTF-8 (a gateway may publish on one) is kept with
// its invalid bytes replaced, instead of failing its batch, and every batch
// retried after it, for ever.
func TestAppendDeadLetterOfInvalidUTF8Source(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	r, err := s.Append(ctx, ingest.Batch{
		Events: sampleEvents(2, time.Now()),
		DeadLetters: []ingest.DeadLetter{{Source: "mcp.audit.\xff", Seq: 7, Reason: "subject_mismatch",
			Detail: "server \"pve\" is not the subject's \xfe", Raw: []byte("{}")}},
		Checkpoint: &ingest.Checkpoint{Consumer: "mcptrail", Seq: 7},
	})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Ingested: 2, Rejected: 1}, r)
	var source, detail string
	require.NoError(t, s.DB().QueryRow(`SELECT source, detail FROM dead_letters`).Scan(&source, &detail))
	assert.Equal(t, "mcp.audit.\uFFFD", source)
	assert.Equal(t, "server \"pve\" is not the subject's \uFFFD", detail)
}
