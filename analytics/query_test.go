package analytics

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
)

type result struct {
	cols      []Column
	rows      [][]any
	truncated *Truncated
}

func queryLimited(t *testing.T, s *Store, ctx context.Context, q string, lim QueryLimits, args ...any) (result, error) {
	t.Helper()
	var r result
	var err error
	r.truncated, err = s.QueryLimited(ctx, q, args, lim,
		func(c []Column) error { r.cols = c; return nil },
		func(row []any) error { r.rows = append(r.rows, append([]any(nil), row...)); return nil })
	return r, err
}

// A long query stops at query.timeout with an error that says so, and the
// store stays usable.
func TestQueryTimeout(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	start := time.Now()
	_, err := queryLimited(t, s, ctx, `SELECT count(*) FROM range(1000000000) a, range(1000000000) b`, QueryLimits{Timeout: time.Second})
	took := time.Since(start)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrQueryTimeout)
	assert.Contains(t, err.Error(), "query timed out after 1s (query.timeout)")
	assert.Less(t, took, 2*time.Second+500*time.Millisecond, "stopped near the timeout")

	r, err := queryLimited(t, s, ctx, `SELECT 42`, QueryLimits{Timeout: time.Second})
	require.NoError(t, err)
	assert.Equal(t, [][]any{{int32(42)}}, r.rows)
}

// A caller's own cancellation is not reported as a timeout.
func TestQueryCancelled(t *testing.T) {
	s := openTemp(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := queryLimited(t, s, ctx, `SELECT count(*) FROM range(1000000000) a, range(1000000000) b`, QueryLimits{Timeout: time.Minute})
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrQueryTimeout)
}

// max_rows stops DuckDB itself: a row past the first chunks would raise an
// error, so the statement must never produce it.
func TestQueryMaxRowsStopsTheProducer(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	start := time.Now()
	r, err := queryLimited(t, s, ctx, `SELECT CASE WHEN i < 1000000 THEN i ELSE error('produced row ' || i) END AS i
		FROM range(20000000) t(i)`, QueryLimits{MaxRows: 10, Timeout: time.Minute})
	require.NoError(t, err)
	assert.Len(t, r.rows, 10)
	require.NotNil(t, r.truncated)
	assert.Equal(t, Truncated{Rows: 10, Bytes: 90, Limit: "query.max_rows", Max: 10}, *r.truncated)
	assert.Equal(t, "result truncated after 10 rows (query.max_rows); add a LIMIT or aggregate, or raise query.max_rows", r.truncated.Note())

	r, err = queryLimited(t, s, ctx, `SELECT * FROM range(20000000)`, QueryLimits{MaxRows: 5, Timeout: time.Minute})
	require.NoError(t, err)
	assert.Equal(t, [][]any{{int64(0)}, {int64(1)}, {int64(2)}, {int64(3)}, {int64(4)}}, r.rows)
	assert.NotNil(t, r.truncated)
	assert.Less(t, time.Since(start), 5*time.Second)
}

// The limit keeps the statement's order, its column names and its
// parameters; a result of exactly max_rows is complete.
func TestQueryMaxRowsKeepsTheStatement(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	_, err := s.Append(ctx, ingest.Batch{Events: sampleEvents(6, time.Now())})
	require.NoError(t, err)

	r, err := queryLimited(t, s, ctx, `SELECT i FROM range(100) t(i) ORDER BY i DESC;`, QueryLimits{MaxRows: 3})
	require.NoError(t, err)
	assert.Equal(t, [][]any{{int64(99)}, {int64(98)}, {int64(97)}}, r.rows)

	r, err = queryLimited(t, s, ctx, "SELECT 1 AS a, 2 AS a, 3 -- last", QueryLimits{MaxRows: 3})
	require.NoError(t, err)
	require.Len(t, r.cols, 3)
	assert.Equal(t, []string{"a", "a", "3"}, []string{r.cols[0].Name, r.cols[1].Name, r.cols[2].Name})
	assert.Equal(t, "INTEGER", r.cols[0].Type)
	assert.Nil(t, r.truncated)

	r, err = queryLimited(t, s, ctx, `SELECT id FROM calls WHERE decision = $d ORDER BY id`, QueryLimits{MaxRows: 3}, namedArg("d", "denied"))
	require.NoError(t, err)
	assert.Equal(t, [][]any{{"e-1"}, {"e-3"}, {"e-5"}}, r.rows)
	assert.Nil(t, r.truncated, "exactly max_rows rows: nothing was cut")

	r, err = queryLimited(t, s, ctx, `SELECT id FROM calls WHERE decision = ? ORDER BY id`, QueryLimits{MaxRows: 2}, "denied")
	require.NoError(t, err)
	assert.Equal(t, [][]any{{"e-1"}, {"e-3"}}, r.rows)
	assert.NotNil(t, r.truncated)

	_, err = queryLimited(t, s, ctx, "SELECT 1; -- trailing", QueryLimits{MaxRows: 3})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "could not apply query.max_rows")
}

// max_bytes cuts the result before the row that would pass it.
func TestQueryMaxBytes(t *testing.T) {
	s := openTemp(t)
	r, err := queryLimited(t, s, context.Background(), `SELECT repeat('x', 1000) AS s FROM range(1000)`,
		QueryLimits{MaxRows: 100000, MaxBytes: 10_000})
	require.NoError(t, err)
	assert.Len(t, r.rows, 9, "1,001 bytes a row")
	require.NotNil(t, r.truncated)
	assert.Equal(t, Truncated{Rows: 9, Bytes: 9009, Limit: "query.max_bytes", Max: 10_000}, *r.truncated)
	assert.Equal(t, "result truncated after 9 rows: they reached query.max_bytes (9.8 KiB); select fewer columns or rows, or raise query.max_bytes",
		r.truncated.Note())
}

// Queries run side by side: a long one does not hold up a short one.
func TestQueriesRunSideBySide(t *testing.T) {
	s := openTemp(t)
	_, err := s.Append(context.Background(), ingest.Batch{Events: sampleEvents(4, time.Now())})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	long := make(chan error, 1)
	go func() {
		_, err := queryLimited(t, s, ctx, `SELECT count(*) FROM range(1000000000) a, range(1000000000) b`, QueryLimits{Timeout: time.Minute})
		long <- err
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	r, err := queryLimited(t, s, context.Background(), `SELECT count(*) FROM calls`, QueryLimits{Timeout: 10 * time.Second})
	require.NoError(t, err)
	assert.Equal(t, [][]any{{int64(4)}}, r.rows)
	assert.Less(t, time.Since(start), 3*time.Second)
	select {
	case err := <-long:
		t.Fatalf("the long query ended first: %v", err)
	default:
	}
	cancel()
	select {
	case err := <-long:
		assert.True(t, errors.Is(err, context.Canceled) || err != nil)
	case <-time.After(5 * time.Second):
		t.Fatal("the long query did not stop when cancelled")
	}
}
