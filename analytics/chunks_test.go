package analytics

import (
	"bytes"
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var chunkKinds = []ColumnKind{Int64Column, Uint64Column, Float64Column, BoolColumn}

// TestScanChunksReadsEveryRowInOrder: a result of several chunks comes back
// whole, in order, each value as the query gave it, with named arguments
// bound as QueryContext binds them.
func TestScanChunksReadsEveryRowInOrder(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	const n = 5000 // more than two of DuckDB's 2,048-row chunks
	var ids []int64
	var hashes []uint64
	var halves []float64
	var evens []bool
	chunks := 0
	err := ScanChunks(ctx, s.DB(), `SELECT i::BIGINT, hash(i), i / 2.0, i % 2 = 0 FROM range($n) t(i) ORDER BY i`,
		[]any{sql.Named("n", n)}, chunkKinds, func(c *Chunk) error {
			chunks++
			ids = append(ids, c.Int64(0)...)
			hashes = append(hashes, c.Uint64(1)...)
			halves = append(halves, c.Float64(2)...)
			evens = append(evens, c.Bool(3)...)
			return nil
		})
	require.NoError(t, err)
	assert.GreaterOrEqual(t, chunks, 3)
	require.Len(t, ids, n)
	var want uint64
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT hash(4321::BIGINT)`).Scan(&want))
	for i := range n {
		require.Equal(t, int64(i), ids[i], "row %d", i)
		require.Equal(t, float64(i)/2, halves[i], "row %d", i)
		require.Equal(t, i%2 == 0, evens[i], "row %d", i)
	}
	assert.Equal(t, want, hashes[4321])

	calls := 0
	require.NoError(t, ScanChunks(ctx, s.DB(), `SELECT 1::BIGINT, 2::UBIGINT, 3.0::DOUBLE, true WHERE false`, nil, chunkKinds,
		func(*Chunk) error { calls++; return nil }))
	assert.Zero(t, calls, "no row, no chunk")
}

// TestScanChunksReadsStringsAndBlobs: strings and blobs of every length
// come back whole, those DuckDB keeps inline (up to 12 bytes) and those it
// points to alike.
func TestScanChunksReadsStringsAndBlobs(t *testing.T) {
	s := openTemp(t)
	var strs []string
	var blobs [][]byte
	err := ScanChunks(context.Background(), s.DB(), `SELECT repeat('ab', i::BIGINT), ('\x01' || repeat('xy', i::BIGINT))::BLOB
	FROM range(3000) t(i) ORDER BY i`, nil, []ColumnKind{VarcharColumn, BlobColumn}, func(c *Chunk) error {
		for row := range c.Len() {
			strs = append(strs, c.String(0, row))
			blobs = append(blobs, bytes.Clone(c.Bytes(1, row)))
		}
		return nil
	})
	require.NoError(t, err)
	require.Len(t, strs, 3000)
	for i := range 3000 {
		require.Equal(t, strings.Repeat("ab", i), strs[i], "row %d", i)
		require.Equal(t, append([]byte{1}, strings.Repeat("xy", i)...), blobs[i], "row %d", i)
	}
}

// TestScanChunksReadsTimestamps: a TIMESTAMP WITH TIME ZONE comes back as
// its microseconds since the epoch.
func TestScanChunksReadsTimestamps(t *testing.T) {
	s := openTemp(t)
	at := time.Date(2026, 11, 1, 12, 0, 0, 1000, time.UTC)
	var got []int64
	require.NoError(t, ScanChunks(context.Background(), s.DB(), `SELECT $at::TIMESTAMPTZ + INTERVAL (i) DAY FROM range(3) t(i) ORDER BY i`,
		[]any{sql.Named("at", at)}, []ColumnKind{TimestampColumn}, func(c *Chunk) error {
			got = append(got, c.Micros(0)...)
			return nil
		}))
	assert.Equal(t, []int64{at.UnixMicro(), at.AddDate(0, 0, 1).UnixMicro(), at.AddDate(0, 0, 2).UnixMicro()}, got)
}

// TestScanChunksRefusesWhatItCannotRead: a column of another type, another
// number of columns, or a NULL is an error naming the column, never a value
// read as something else.
func TestScanChunksRefusesWhatItCannotRead(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	none := func(*Chunk) error { return nil }
	err := ScanChunks(ctx, s.DB(), `SELECT 1::BIGINT, 2::UBIGINT, 3::BIGINT AS third, true`, nil, chunkKinds, none)
	require.ErrorContains(t, err, "column 3 (third) is not DOUBLE")
	err = ScanChunks(ctx, s.DB(), `SELECT 1::BIGINT, 2::UBIGINT, 3.0::DOUBLE`, nil, chunkKinds, none)
	require.ErrorContains(t, err, "the query has 3 columns, read as 4")
	err = ScanChunks(ctx, s.DB(), `SELECT i::BIGINT, 2::UBIGINT, CASE WHEN i = 3000 THEN NULL ELSE 1.0::DOUBLE END AS ratio, true
	FROM range(4000) t(i)`, nil, chunkKinds, none)
	require.ErrorContains(t, err, "column 3 (ratio) has a NULL")
}

// TestScanChunksStops: an error of the handler ends the scan and comes
// back; so does a cancelled context.
func TestScanChunksStops(t *testing.T) {
	s := openTemp(t)
	query := `SELECT i::BIGINT, 0::UBIGINT, 0.0::DOUBLE, false FROM range(10000) t(i)`
	calls := 0
	err := ScanChunks(context.Background(), s.DB(), query, nil, chunkKinds, func(*Chunk) error {
		calls++
		return sql.ErrNoRows
	})
	require.ErrorIs(t, err, sql.ErrNoRows)
	assert.Equal(t, 1, calls)

	ctx, cancel := context.WithCancel(context.Background())
	calls = 0
	err = ScanChunks(ctx, s.DB(), query, nil, chunkKinds, func(*Chunk) error {
		calls++
		cancel()
		return nil
	})
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, 1, calls)
}

// TestScanConnChunksReadsItsConnectionsTables: ScanConnChunks runs on the
// connection given, whose temporary tables no other connection sees, and
// leaves it open for the statements after.
func TestScanConnChunksReadsItsConnectionsTables(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	conn, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `CREATE TEMP TABLE minutes AS SELECT i::BIGINT AS m, hash(i) AS k, i / 4.0 AS r, i > 2 AS b FROM range(5) t(i)`)
	require.NoError(t, err)
	query := `SELECT m, k, r, b FROM minutes WHERE m >= $from ORDER BY m`
	var ms []int64
	err = ScanConnChunks(ctx, conn, query, []any{sql.Named("from", 1)}, chunkKinds, func(c *Chunk) error {
		ms = append(ms, c.Int64(0)...)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []int64{1, 2, 3, 4}, ms)
	var n int
	require.NoError(t, conn.QueryRowContext(ctx, `SELECT count(*) FROM minutes`).Scan(&n), "the connection stays open")
	assert.Equal(t, 5, n)
	err = ScanChunks(ctx, s.DB(), query, []any{sql.Named("from", 1)}, chunkKinds, func(*Chunk) error { return nil })
	require.ErrorContains(t, err, "minutes", "another connection has no such table")
}
