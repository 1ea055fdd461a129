package analytics

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecordRunRoundTrip holds what RecordRuns writes: the run, the scope's
// findings as advance returns them (other scopes untouched), the logged
// transitions, and the history advance is given on the next run.
func TestRecordRunRoundTrip(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	t1 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	rec := func(id, state string, at time.Time, run int64) FindingRecord {
		return FindingRecord{ID: id, Kind: "k", Tool: "tool-" + id, State: state, Severity: "low", Summary: "s", Action: `{"op":"hide"}`,
			FirstSeen: t1, LastSeen: at, ChangedAt: at, LastRunID: run}
	}
	_, err := s.Findings(ctx, FindingFilter{Server: "srv", Grant: "g"})
	require.ErrorIs(t, err, ErrNoRuns)

	var got []RunHistory
	record := func(grant string, at time.Time, next func(RunHistory) []FindingRecord, log []FindingTransition) {
		t.Helper()
		require.NoError(t, s.RecordRuns(ctx, []ScopeRun{{Run: RecommendRun{Server: "srv", Grant: grant, At: at, WindowFrom: at.AddDate(0, 0, -30), WindowTo: at,
			Source: "test"}, Advance: func(h RunHistory) ([]FindingRecord, []FindingTransition) {
			got = append(got, h)
			return next(h), log
		}}}))
	}
	record("g", t1, func(h RunHistory) []FindingRecord {
		return []FindingRecord{rec("b", "open", t1, h.RunID), rec("a", "open", t1, h.RunID)}
	}, []FindingTransition{{FindingID: "a", To: "open"}, {FindingID: "b", To: "open"}})
	// A finding without a tool, summary or action (stored as NULLs).
	bare := func(id string, run int64) FindingRecord {
		return FindingRecord{ID: id, Kind: "k", State: "open", Severity: "info", FirstSeen: t1, LastSeen: t1, ChangedAt: t1, LastRunID: run}
	}
	record("other", t1, func(h RunHistory) []FindingRecord {
		return []FindingRecord{rec("e", "open", t1, h.RunID), bare("f", h.RunID)}
	},
		[]FindingTransition{{FindingID: "e", To: "open"}, {FindingID: "f", To: "open"}})
	t2 := t1.Add(24 * time.Hour)
	record("g", t2, func(h RunHistory) []FindingRecord {
		return []FindingRecord{rec("a", "open", t2, h.RunID), rec("b", "resolved", t1, h.Known[1].LastRunID)}
	}, []FindingTransition{{FindingID: "b", From: "open", To: "resolved"}})

	require.Len(t, got, 3)
	assert.Equal(t, RunHistory{RunID: 1}, got[0], "the first run of a scope has no previous run and no findings")
	assert.Equal(t, int64(0), got[1].PreviousRunID, "another grant is another scope")
	assert.Equal(t, int64(3), got[2].RunID)
	assert.Equal(t, int64(1), got[2].PreviousRunID)
	assert.Equal(t, t1, got[2].PreviousAt)
	require.Len(t, got[2].Known, 2)
	want := rec("a", "open", t1, 1)
	want.Server, want.Grant = "srv", "g" // the run's scope
	assert.Equal(t, want, got[2].Known[0], "the history comes back as written, by id")

	recs, err := s.Findings(ctx, FindingFilter{Server: "srv", AnyGrant: true})
	require.NoError(t, err)
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Grant+"/"+r.ID+":"+r.State)
	}
	assert.Equal(t, []string{"g/a:open", "g/b:resolved", "other/e:open", "other/f:open"}, ids)
	for _, r := range recs {
		if r.ID == "f" {
			want := bare("f", 2)
			want.Server, want.Grant = "srv", "other"
			assert.Equal(t, want, r, "a finding's empty fields come back empty")
		}
	}
	var nulls int
	require.NoError(t, s.DB().QueryRow(`SELECT count(*) FROM findings WHERE finding_id = 'f' AND tool IS NULL AND summary IS NULL AND action IS NULL`).Scan(&nulls))
	assert.Equal(t, 1, nulls, "stored as NULLs")
	open, err := s.Findings(ctx, FindingFilter{Server: "srv", Grant: "g", State: "open"})
	require.NoError(t, err)
	require.Len(t, open, 1)
	assert.Equal(t, "a", open[0].ID)
	assert.True(t, open[0].LastSeen.Equal(t2))

	log, err := s.FindingLog(ctx, "srv")
	require.NoError(t, err)
	var moves []string
	for _, e := range log {
		moves = append(moves, e.FindingID+":"+e.From+">"+e.To)
	}
	assert.Equal(t, []string{"a:>open", "b:>open", "e:>open", "f:>open", "b:open>resolved"}, moves)
}

// TestRecordRunsAllOrNone: the scopes of one recommendation are recorded
// together or not at all; a later scope that fails leaves no run of an
// earlier one behind, and the scopes recorded together see each other's
// run ids in order.
func TestRecordRunsAllOrNone(t *testing.T) {
	s := openTemp(t)
	ctx := context.Background()
	// A findings table that refuses one kind: the second scope's finding
	// fails its append.
	_, err := s.DB().ExecContext(ctx, `DROP TABLE findings;
CREATE TABLE findings (
	finding_id VARCHAR NOT NULL, server VARCHAR NOT NULL, "grant" VARCHAR NOT NULL, kind VARCHAR NOT NULL CHECK (kind <> 'refused'),
	tool VARCHAR, first_seen TIMESTAMPTZ NOT NULL, last_seen TIMESTAMPTZ NOT NULL, state VARCHAR NOT NULL, severity VARCHAR NOT NULL,
	summary VARCHAR, action VARCHAR, last_run_id BIGINT NOT NULL, changed_at TIMESTAMPTZ NOT NULL, changes VARCHAR)`)
	require.NoError(t, err)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	var ids []int64
	scope := func(grant, kind string) ScopeRun {
		return ScopeRun{Run: RecommendRun{Server: "srv", Grant: grant, At: at, WindowFrom: at.AddDate(0, 0, -30), WindowTo: at, Source: "test"},
			Advance: func(h RunHistory) ([]FindingRecord, []FindingTransition) {
				ids = append(ids, h.RunID)
				return []FindingRecord{{ID: "x", Kind: kind, State: "open", Severity: "low", FirstSeen: at, LastSeen: at, ChangedAt: at, LastRunID: h.RunID}},
					[]FindingTransition{{FindingID: "x", To: "open"}}
			}}
	}
	err = s.RecordRuns(ctx, []ScopeRun{scope("a", "k"), scope("b", "refused")})
	require.ErrorContains(t, err, `grant "b"`)
	var runs, findings, logged int
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT (SELECT count(*) FROM recommend_runs), (SELECT count(*) FROM findings),
	(SELECT count(*) FROM finding_log)`).Scan(&runs, &findings, &logged))
	assert.Equal(t, []int{0, 0, 0}, []int{runs, findings, logged}, "nothing of grant a's run is left")

	ids = nil
	require.NoError(t, s.RecordRuns(ctx, []ScopeRun{scope("a", "k"), scope("b", "k")}))
	assert.Equal(t, []int64{1, 2}, ids, "each scope sees the runs recorded before it in the same transaction")
	recs, err := s.Findings(ctx, FindingFilter{Server: "srv", AnyGrant: true})
	require.NoError(t, err)
	assert.Len(t, recs, 2)
}

// TestRecordRunReadOnly: a read-only store says it cannot record.
func TestRecordRunReadOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.duckdb")
	s, err := Open(ctx, path, Options{})
	require.NoError(t, err)
	require.NoError(t, s.Close())
	ro, err := Open(ctx, path, Options{ReadOnly: true})
	require.NoError(t, err)
	defer ro.Close()
	err = ro.RecordRuns(ctx, []ScopeRun{{Run: RecommendRun{Server: "srv"}, Advance: func(RunHistory) ([]FindingRecord, []FindingTransition) { return nil, nil }}})
	require.ErrorIs(t, err, ErrReadOnly)
}
