package analytics

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/ingest"
)

// A batch whose servers and grants arrive interleaved is stored with each
// server and grant's rows together (in runs of about DuckDB's vectors of
// 2,048 rows), every value intact, and repeats recognised across the
// chunks the rows are staged in.
func TestBatchIsStoredClusteredByServerAndGrant(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	const n = 30_000
	evs := sampleEvents(n, base)
	servers := []string{"proxmox-mcp", "github-mcp", "a-mcp"}
	grants := []string{"ops", "", "ci", "helpdesk"}
	for i := range evs {
		evs[i].Server, evs[i].Grant = servers[i%len(servers)], grants[(i/7)%len(grants)]
	}
	st := s.NewStaging(n)
	defer st.Release()
	repeat := make([]bool, n)
	st.Add(evs, repeat)
	st.Add(evs[100:200], repeat[:100])
	for i := range 100 {
		require.True(t, repeat[i], "event %d staged twice", 100+i)
	}
	r, err := s.Append(ctx, ingest.Batch{Staged: st})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Ingested: n, Duplicates: 100}, r)

	// Runs of one server and grant along the stored order: at most two per
	// staged chunk of 2,048 rows (DuckDB packs the vectors it stores and may
	// split a chunk where it fills one); 29,998 when the rows come as they
	// arrived.
	runs := count(t, s, `SELECT count(*) FROM (
		SELECT (server, "grant") IS DISTINCT FROM lag((server, "grant")) OVER (ORDER BY rowid) AS starts FROM calls) WHERE starts`)
	sets := count(t, s, `SELECT count(DISTINCT (server, "grant")) FROM calls`)
	chunks := count(t, s, `SELECT sum(ceil(k / 2048))::INTEGER FROM (SELECT count(*) AS k FROM calls GROUP BY server, "grant")`)
	require.Equal(t, len(servers)*len(grants), sets)
	assert.LessOrEqual(t, runs, 2*chunks, "the rows of a server and grant are stored together")
	assert.Zero(t, count(t, s, `SELECT count(*) FROM calls WHERE "grant" = ''`), "no grant is stored as NULL")

	// Every row as its event says.
	rows, err := s.DB().Query(`SELECT id, server, coalesce("grant", ''), ts, decision, coalesce(error_code, 0), coalesce(len(arg_keys), 0), coalesce(attrs['k'], '')
		FROM calls ORDER BY ts`)
	require.NoError(t, err)
	defer rows.Close()
	i := 0
	for rows.Next() {
		var id, server, grant, decision, attr string
		var ts time.Time
		var code int64
		var keys int
		require.NoError(t, rows.Scan(&id, &server, &grant, &ts, &decision, &code, &keys, &attr))
		e := evs[i]
		want := fmt.Sprint(e.ID, e.Server, e.Grant, e.TS.UTC(), e.Decision, len(e.ArgKeys), e.Attrs["k"])
		assert.Equal(t, want, fmt.Sprint(id, server, grant, ts.UTC(), decision, keys, attr), "row %d", i)
		if e.ErrorCode != nil {
			assert.Equal(t, *e.ErrorCode, code)
		}
		i++
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, n, i)
}

// More servers and grants than a batch keeps apart: the rows past them
// share chunks, and every row is stored as it came.
func TestBatchOfManyGrantsIsStoredWhole(t *testing.T) {
	s := openTemp(t)
	const n, grants = 5_000, 3 * maxKeys
	evs := sampleEvents(n, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC))
	for i := range evs {
		evs[i].Grant = fmt.Sprintf("g%03d", i%grants)
	}
	st := s.NewStaging(n)
	defer st.Release()
	st.Add(evs, nil)
	cols := st.(*staging).cols
	assert.Len(t, cols.keys, maxKeys, "servers and grants kept apart")
	assert.LessOrEqual(t, len(cols.chunks), maxKeys+n/chunkRows, "a partly filled chunk per key at most")
	r, err := s.Append(context.Background(), ingest.Batch{Staged: st})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Ingested: n}, r)
	assert.Equal(t, grants, count(t, s, `SELECT count(DISTINCT "grant") FROM calls`))
	assert.Equal(t, n, count(t, s, `SELECT count(*) FROM calls WHERE "grant" = 'g' || lpad((split_part(id, '-', 2)::INTEGER % `+fmt.Sprint(grants)+`)::VARCHAR, 3, '0')`))
	// The first maxKeys-1 grants' rows are each stored together (in at
	// most two runs, as above); the rest share the last chunks.
	runs := count(t, s, `SELECT count(*) FROM (
		SELECT "grant", "grant" IS DISTINCT FROM lag("grant") OVER (ORDER BY rowid) AS starts FROM calls)
		WHERE starts AND "grant" < 'g`+fmt.Sprintf("%03d", maxKeys-1)+`'`)
	assert.LessOrEqual(t, runs, 2*(maxKeys-1))
}
