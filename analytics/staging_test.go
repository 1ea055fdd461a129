package analytics

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// A batch staged fetch by fetch: repeats within it are flagged and left
// out, and it stores like the same events handed over as a slice, also
// when the first attempt fails and the same staging is retried.
func TestStagedBatchStoresOnceAndSurvivesARetry(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	evs := sampleEvents(10, base)
	_, err := s.Append(ctx, ingest.Batch{Events: evs[:3]}) // e-0..e-2 already stored
	require.NoError(t, err)
	st := s.NewStaging(16)
	defer st.Release()
	repeat := make([]bool, 6)
	st.Add(evs[:6], repeat)
	assert.Equal(t, []bool{false, false, false, false, false, false}, repeat)
	again := []audit.Event{evs[4], evs[6], evs[6], evs[7], evs[8], evs[9]}
	st.Add(again, repeat)
	assert.Equal(t, []bool{true, false, true, false, false, false}, repeat)
	assert.Equal(t, 10, st.Len())

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = s.Append(cancelled, ingest.Batch{Staged: st, Checkpoint: &ingest.Checkpoint{Consumer: "c", Seq: 12}})
	require.Error(t, err)
	r, err := s.Append(ctx, ingest.Batch{Staged: st, Checkpoint: &ingest.Checkpoint{Consumer: "c", Seq: 12}})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Ingested: 7, Duplicates: 5}, r, "3 already stored, 2 repeats")
	assert.Equal(t, 10, count(t, s, `SELECT count(DISTINCT id) FROM calls`))
	assert.Equal(t, 10, count(t, s, `SELECT count(*) FROM calls`))
	assert.Equal(t, 1, count(t, s, `SELECT count(*) FROM calls WHERE id = 'e-1' AND decision = 'denied' AND error_code = -32000`))
	seq, err := s.Checkpoint(ctx, "c")
	require.NoError(t, err)
	assert.Equal(t, uint64(12), seq)
}

type otherStaging struct{ ingest.Staging }

func TestAppendRefusesAForeignStaging(t *testing.T) {
	s := openTemp(t)
	_, err := s.Append(context.Background(), ingest.Batch{Staged: otherStaging{}})
	require.ErrorContains(t, err, "staged by another sink")
}

// Two ids with one hash: both are kept, and a repeat of the second is
// still recognised (the hash is forced to collide through the map).
func TestStagingKeepsIdsWhoseHashesCollide(t *testing.T) {
	st := newStaging(4)
	defer st.Release()
	evs := sampleEvents(3, time.Now())
	st.Add(evs[:1], nil)
	// Make e-1 look like e-0's hash: point e-0's slot at e-1's hash.
	st.seen.release()
	st.seen = getIDSet(4)
	st.seen.lookupOrAdd(hashID(evs[1].ID), 0) // e-1's hash now leads to e-0
	repeat := make([]bool, 3)
	st.Add([]audit.Event{evs[1], evs[1], evs[2]}, repeat)
	assert.Equal(t, []bool{false, true, false}, repeat)
	assert.Equal(t, 3, st.Len())
}
