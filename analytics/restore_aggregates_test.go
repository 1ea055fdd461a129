package analytics

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

func openArchived(t *testing.T) (*Store, string) {
	t.Helper()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "archive")
	require.NoError(t, os.Mkdir(dir, 0o755))
	s, err := Open(context.Background(), filepath.Join(tmp, "a.duckdb"), Options{ArchiveDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s, s.ArchiveDir()
}

// archiveAndDelete archives server's day into one file and deletes it, as
// archive.Run with a retention does.
func archiveAndDelete(t *testing.T, s *Store, dir, server string, day time.Time, n int) []string {
	t.Helper()
	ctx := context.Background()
	rel := fmt.Sprintf("server=%s/date=%s/calls-%d.parquet", server, day.Format(time.DateOnly), n)
	require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, rel)), 0o755))
	d, err := s.WriteDay(ctx, server, day, nil, filepath.Join(dir, rel))
	require.NoError(t, err)
	require.Positive(t, d.Rows)
	now := time.Now().UTC()
	require.NoError(t, s.RecordArchiveFile(ctx, ArchiveFile{Server: server, Day: day, File: rel, Rows: d.Rows, Checksum: d.Checksum, ArchivedAt: now, VerifiedAt: now}))
	files := []string{filepath.Join(dir, rel)}
	_, err = s.DeleteArchived(ctx, server, day, files, now)
	require.NoError(t, err)
	return files
}

var restoreDay = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)

func restorePoll(id, session string, at time.Duration, d audit.Decision) audit.Event {
	return audit.Event{ID: id, TS: restoreDay.Add(at), Server: "pve", Tool: "get_task_status", ArgsHash: "upid",
		Decision: d, Session: session}
}

// A call whose day the retention deleted arrives late; then the day is
// restored: call_runs must be what the calls give.
func TestALateCallOfADeletedDayAndItsRestoreKeepTheRuns(t *testing.T) {
	ctx := context.Background()
	s, dir := openArchived(t)
	var evs []audit.Event
	for i := range 10 {
		evs = append(evs, restorePoll(fmt.Sprintf("p-%d", i), "s1", 10*time.Hour+time.Duration(i)*20*time.Second, audit.Allowed))
	}
	_, err := s.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	files := archiveAndDelete(t, s, dir, "pve", restoreDay, 0)
	// a late call in the middle of the archived run
	_, err = s.Append(ctx, ingest.Batch{Events: []audit.Event{restorePoll("late", "s1", 10*time.Hour+95*time.Second, audit.Allowed)}})
	require.NoError(t, err)
	_, err = s.RestoreDay(ctx, "pve", restoreDay, files)
	require.NoError(t, err)
	require.Equal(t, 11, count(t, s, `SELECT count(*) FROM calls`))
	checkAggregates(t, s, "late call of a deleted day, restored")
}

// An event sent again with another ts is stored twice; the archive keeps
// its first copy, the retention deletes both, and restore brings one back:
// tool_days must be what the calls give.
func TestAnIDStoredTwiceDeletedAndRestoredKeepsToolDays(t *testing.T) {
	ctx := context.Background()
	s, dir := openArchived(t)
	_, err := s.Append(ctx, ingest.Batch{Events: []audit.Event{restorePoll("x", "s1", time.Hour, audit.Allowed), restorePoll("y", "s2", 2*time.Hour, audit.Denied)}})
	require.NoError(t, err)
	_, err = s.Append(ctx, ingest.Batch{Events: []audit.Event{restorePoll("x", "s1", 20*time.Hour, audit.Allowed)}}) // redelivered with another ts
	require.NoError(t, err)
	require.Equal(t, 3, count(t, s, `SELECT count(*) FROM calls`))
	files := archiveAndDelete(t, s, dir, "pve", restoreDay, 0)
	_, err = s.RestoreDay(ctx, "pve", restoreDay, files)
	require.NoError(t, err)
	require.Equal(t, 2, count(t, s, `SELECT count(*) FROM calls`))
	// Only tool_days: the runs still hold the copy the archive dropped
	// (a known limit: the restore cannot tell such a day from another).
	checkToolDays(t, s, "id stored twice, deleted and restored")
}
