package archive

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/runtraffic"
)

var day0 = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)

func open(t *testing.T, db, dir string) *analytics.Store {
	t.Helper()
	s, err := analytics.Open(context.Background(), db, analytics.Options{ArchiveDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// events makes n calls per server per day for days days from day0, ids
// prefixed so that a later call adds new ones.
func events(prefix string, servers []string, days, n int) []audit.Event {
	var out []audit.Event
	for d := range days {
		for _, srv := range servers {
			for i := range n {
				out = append(out, audit.Event{
					ID: fmt.Sprintf("%s-%s-%d-%d", prefix, srv, d, i), TS: day0.Add(time.Duration(d)*day + time.Duration(i)*time.Minute),
					Server: srv, Tool: "get_vm_status", Method: "tools/call", Decision: audit.Allowed, Status: "ok", Session: "s1",
				})
			}
		}
	}
	return out
}

// setup is a store with an empty archive folder.
func setup(t *testing.T) (*analytics.Store, string) {
	t.Helper()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "archive")
	require.NoError(t, os.Mkdir(dir, 0o755))
	return open(t, filepath.Join(tmp, "a.duckdb"), dir), dir
}

func appendEvents(t *testing.T, s *analytics.Store, evs []audit.Event) {
	t.Helper()
	_, err := s.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(t, err)
}

func scalar(t *testing.T, s *analytics.Store, q string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, s.DB().QueryRow(q).Scan(&n))
	return n
}

func TestArchiveWritesVerifiesAndReadsBack(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	// 3 sealed days and today (day0+3), for 2 servers.
	appendEvents(t, s, events("e", []string{"pve", "git"}, 4, 10))
	now := day0.Add(3*day + 12*time.Hour)

	res, err := Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	require.Len(t, res.Days, 6, "3 sealed days x 2 servers; today is not sealed")
	assert.EqualValues(t, 60, res.Written)
	assert.Zero(t, res.Deleted, "no retention: nothing deleted")
	for _, d := range res.Days {
		assert.True(t, d.Verified, d)
		assert.FileExists(t, filepath.Join(dir, d.File))
	}
	assert.FileExists(t, filepath.Join(dir, "server=pve", "date=2026-11-21", "calls-1.parquet"))
	assert.FileExists(t, filepath.Join(dir, "server=pve", "date=2026-11-21", "manifest.json"))
	assert.NoFileExists(t, filepath.Join(dir, "server=pve", "date=2026-11-23", "calls-1.parquet"))

	// Read back as any reader would: hive-partitioned, every id once.
	glob := filepath.Join(dir, "**", "*.parquet")
	assert.EqualValues(t, 60, scalar(t, s, `SELECT count(DISTINCT id) FROM read_parquet('`+glob+`', hive_partitioning = true)`))
	assert.EqualValues(t, 0, scalar(t, s, `SELECT count(*) FROM read_parquet('`+glob+`', hive_partitioning = true) a
		ANTI JOIN calls c USING (id)`), "every archived id is a stored call")
	assert.EqualValues(t, 10, scalar(t, s, `SELECT count(*) FROM read_parquet('`+glob+`', hive_partitioning = true)
		WHERE "date" = '2026-11-22' AND server = 'git'`), "partitions as folders")
	assert.EqualValues(t, 6, scalar(t, s, `SELECT count(*) FROM archive_days WHERE verified_at IS NOT NULL AND deleted_at IS NULL`))

	// A second run writes nothing new.
	res, err = Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	assert.Zero(t, res.Written)
	assert.NoFileExists(t, filepath.Join(dir, "server=pve", "date=2026-11-21", "calls-2.parquet"))
}

// dayUse is the whole of tool_day_use, as text.
func dayUse(t *testing.T, s *analytics.Store) string {
	t.Helper()
	var out *string
	require.NoError(t, s.DB().QueryRow(`SELECT string_agg(concat_ws('|', server, "grant", tool, day, calls, allowed, denied, hidden,
		rate_limited, approval, with_session, with_agent, last_allowed, hex(sessions), hex(allowed_sessions)), ',' ORDER BY server, "grant", tool, day)
		FROM tool_day_use`).Scan(&out))
	if out == nil {
		return ""
	}
	return *out
}

func TestRetentionDeletesOnlyVerifiedDays(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve", "git"}, 4, 10))
	now := day0.Add(3*day + 12*time.Hour)

	// The sealed days' peaks per session and minute are counted.
	rc, err := s.Recluster(ctx, now)
	require.NoError(t, err)
	require.Equal(t, 3, rc.CountedDays)

	// A damaged file of one day: its day does not verify, so it keeps its rows.
	res, err := Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	bad := filepath.Join(dir, "server=git", "date=2026-11-20", "calls-1.parquet")
	b, err := os.ReadFile(bad)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(bad, b[:len(b)/2], 0o644))

	res, err = Run(ctx, s, Options{Now: now, Retention: 36 * time.Hour}) // days ending before day0+2 12:00
	require.Error(t, err)
	assert.Contains(t, err.Error(), "git 2026-11-20")
	assert.EqualValues(t, 1, res.Failed)
	assert.EqualValues(t, 30, res.Deleted, "pve 20, 21 and git 21: 10 each; git 20 failed verification")
	assert.EqualValues(t, 10, scalar(t, s, `SELECT count(*) FROM calls WHERE server = 'git' AND ts < '2026-11-21'`))
	assert.EqualValues(t, 0, scalar(t, s, `SELECT count(*) FROM calls WHERE server = 'pve' AND ts < '2026-11-22'`))
	assert.EqualValues(t, 20, scalar(t, s, `SELECT count(*) FROM calls WHERE ts >= '2026-11-22' AND server = 'pve'`))
	assert.EqualValues(t, 3, scalar(t, s, `SELECT count(DISTINCT (server, "date")) FROM archive_days WHERE deleted_at IS NOT NULL`))
	// A day with calls deleted is left to the calls (the archive's, for a
	// window that reaches it), and Recluster does not count it again.
	assert.Equal(t, []string{"20779"}, rowsOf(t, s, `SELECT day::VARCHAR FROM counted_days`))
	rc, err = s.Recluster(ctx, now)
	require.NoError(t, err)
	assert.Zero(t, rc.CountedDays)
	// tool_day_use keeps the deleted days, for windows that read the
	// archive.
	assert.Equal(t, `git|get_vm_status|20777|10,git|get_vm_status|20778|10,git|get_vm_status|20779|10,git|get_vm_status|20780|10,`+
		`pve|get_vm_status|20777|10,pve|get_vm_status|20778|10,pve|get_vm_status|20779|10,pve|get_vm_status|20780|10`,
		strings.Join(rowsOf(t, s, `SELECT server || '|' || tool || '|' || day || '|' || calls FROM tool_day_use ORDER BY ALL`), ","))
}

// A day's calls deleted by the retention are marked deleted in the same
// transaction: a crash (or a cancel) right after the delete would
// otherwise leave a day with files but no calls that is not marked
// deleted, which Recluster then counted as an empty day, readers taking
// zeros for it instead of reading the archive, for good.
func TestTheRetentionsDeleteMarksTheDayDeleted(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 4, 10))
	now := day0.Add(3*day + 12*time.Hour)
	_, err := Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(dir, "server=pve", "date=2026-11-20", "*.parquet"))
	require.NoError(t, err)
	require.NotEmpty(t, files)

	// The retention's delete of day0, then nothing: the process ends.
	n, err := s.DeleteArchived(ctx, "pve", day0, files, now)
	require.NoError(t, err)
	assert.EqualValues(t, 10, n)
	assert.EqualValues(t, 1, scalar(t, s, `SELECT count(*) FROM archive_days WHERE "date" = '2026-11-20' AND deleted_at IS NOT NULL`))
	rc, err := s.Recluster(ctx, now)
	require.NoError(t, err)
	assert.Equal(t, 2, rc.CountedDays, "day0+1 and day0+2; day0's calls are the archive's")
	assert.Equal(t, []string{"20778", "20779"}, rowsOf(t, s, `SELECT day::VARCHAR FROM counted_days ORDER BY day`))

	// Restored, in the restore's own transaction the day is no longer
	// marked deleted.
	_, err = Restore(ctx, s, day0)
	require.NoError(t, err)
	assert.EqualValues(t, 0, scalar(t, s, `SELECT count(*) FROM archive_days WHERE deleted_at IS NOT NULL`))
	assert.EqualValues(t, 40, scalar(t, s, `SELECT count(*) FROM calls`))
}

// Events of a day the retention deleted, sent again (a file ingested again,
// a gateway's backfill), are stored already, in the archive: duplicates,
// not calls stored a second time whose counts tool_day_use would keep
// doubled after the next run deleted them again.
func TestEventsOfADeletedDayAreDuplicates(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	evs := events("e", []string{"pve", "git"}, 4, 10)
	appendEvents(t, s, evs)
	now := day0.Add(3*day + 12*time.Hour)
	res, err := Run(ctx, s, Options{Now: now, Retention: 36 * time.Hour}) // deletes day0 and day0+1
	require.NoError(t, err)
	require.EqualValues(t, 40, res.Deleted)
	use := dayUse(t, s)

	r, err := s.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Duplicates: 80}, r, "every event is stored: 40 in calls, 40 in the archive")
	assert.EqualValues(t, 40, scalar(t, s, `SELECT count(*) FROM calls`))
	assert.Equal(t, use, dayUse(t, s))

	// A damaged file of a deleted day cannot be compared with, but the
	// batch is stored all the same: ingestion never stalls on it.
	damaged := filepath.Join(dir, "server=git", "date=2026-11-20", "calls-1.parquet")
	kept, err := os.ReadFile(damaged)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(damaged, kept[:len(kept)/2], 0o644))
	_, err = s.Append(ctx, ingest.Batch{Events: events("other", []string{"git"}, 1, 1)})
	require.NoError(t, err, "a batch of a day whose file is damaged")
	require.NoError(t, os.WriteFile(damaged, kept, 0o644))

	// A new event of a deleted day (a late one) is stored, and archived
	// by the next run.
	late := events("late", []string{"pve"}, 1, 1)
	r, err = s.Append(ctx, ingest.Batch{Events: append(late, evs[:3]...)})
	require.NoError(t, err)
	assert.Equal(t, ingest.Result{Ingested: 1, Duplicates: 3}, r)
	res, err = Run(ctx, s, Options{Now: now, Retention: 36 * time.Hour})
	require.NoError(t, err)
	assert.EqualValues(t, 2, res.Written, "the late event and the one stored beside the damaged file")
	assert.EqualValues(t, 2, res.Deleted)
	assert.EqualValues(t, 40, scalar(t, s, `SELECT count(*) FROM calls`))
}

// A call of the day stored while the run archives it (a late event at five
// past midnight) is no failure: the day is left unverified, nothing of it
// deleted, and the next run archives it and deletes the day.
func TestACallStoredWhileArchivingWaitsForTheNextRun(t *testing.T) {
	ctx := context.Background()
	s, _ := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 2, 10))
	now := day0.Add(3 * day)
	late := events("late", []string{"pve"}, 1, 1)
	res, err := Run(ctx, s, Options{Now: now, Retention: time.Hour, beforeVerify: func(d analytics.DayRows) {
		if d.Day.Equal(day0) {
			appendEvents(t, s, late)
		}
	}})
	require.NoError(t, err)
	assert.Zero(t, res.Failed)
	require.Len(t, res.Days, 2)
	first := res.Days[0]
	assert.NoError(t, first.Err)
	assert.False(t, first.Verified)
	assert.EqualValues(t, 1, first.Late)
	assert.EqualValues(t, 1, res.Late)
	assert.Zero(t, first.Deleted)
	assert.EqualValues(t, 10, res.Deleted, "day0+1 only")

	res, err = Run(ctx, s, Options{Now: now, Retention: time.Hour})
	require.NoError(t, err)
	assert.EqualValues(t, 1, res.Written)
	assert.EqualValues(t, 11, res.Deleted)
	assert.Zero(t, scalar(t, s, `SELECT count(*) FROM calls`))
}

// An id stored twice in a day (an event sent again with another ts, which
// the de-duplication by time range lets through) is archived once, as the
// de-duplication key says it is one event: the day verifies, and the
// retention deletes both copies, instead of the day failing every run.
func TestADayWithAnIDStoredTwiceIsArchived(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	evs := events("e", []string{"pve"}, 1, 10)
	appendEvents(t, s, evs)
	again := evs[3]
	again.TS = again.TS.Add(6 * time.Hour)
	appendEvents(t, s, []audit.Event{again})
	require.EqualValues(t, 11, scalar(t, s, `SELECT count(*) FROM calls`), "stored twice")

	res, err := Run(ctx, s, Options{Now: day0.Add(2 * day), Retention: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Days, 1)
	assert.True(t, res.Days[0].Verified)
	assert.EqualValues(t, 10, res.Written)
	assert.EqualValues(t, 11, res.Deleted, "both copies")
	glob := filepath.Join(dir, "server=pve", "date=2026-11-20", "*.parquet")
	assert.EqualValues(t, 10, scalar(t, s, `SELECT count(*) FROM read_parquet('`+glob+`')`))
	assert.EqualValues(t, 10, scalar(t, s, `SELECT count(DISTINCT id) FROM read_parquet('`+glob+`')`))
	// The next run has nothing to do and nothing fails.
	res, err = Run(ctx, s, Options{Now: day0.Add(2 * day), Retention: time.Hour})
	require.NoError(t, err)
	assert.Zero(t, res.Failed)
}

// rowsOf is a one-column query's rows.
func rowsOf(t *testing.T, s *analytics.Store, q string) []string {
	t.Helper()
	rows, err := s.DB().Query(q)
	require.NoError(t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var v string
		require.NoError(t, rows.Scan(&v))
		out = append(out, v)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestReadOnlyArchiveDeletesNothing(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into a read-only folder")
	}
	ctx := context.Background()
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "archive")
	require.NoError(t, os.Mkdir(dir, 0o555))
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	s := open(t, filepath.Join(tmp, "a.duckdb"), dir)
	appendEvents(t, s, events("e", []string{"pve"}, 3, 10))

	res, err := Run(ctx, s, Options{Now: day0.Add(10 * day), Retention: time.Hour})
	require.Error(t, err)
	assert.Contains(t, err.Error(), dir)
	assert.Zero(t, res.Deleted)
	assert.EqualValues(t, 30, scalar(t, s, `SELECT count(*) FROM calls`))
}

func TestMissingArchiveFolderIsAClearError(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "nope")
	s := open(t, filepath.Join(tmp, "a.duckdb"), dir)
	appendEvents(t, s, events("e", []string{"pve"}, 2, 3))
	_, err := Run(context.Background(), s, Options{Now: day0.Add(10 * day), Retention: time.Hour})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "storage.archive "+dir)
	assert.EqualValues(t, 6, scalar(t, s, `SELECT count(*) FROM calls`))
}

func TestLateEventsGoToANewFile(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 1, 10))
	now := day0.Add(2 * day)
	_, err := Run(ctx, s, Options{Now: now, Retention: time.Hour})
	require.NoError(t, err)
	first := filepath.Join(dir, "server=pve", "date=2026-11-20", "calls-1.parquet")
	before, err := os.ReadFile(first)
	require.NoError(t, err)
	require.EqualValues(t, 0, scalar(t, s, `SELECT count(*) FROM calls`), "deleted after verification")

	appendEvents(t, s, events("late", []string{"pve"}, 1, 4))
	res, err := Run(ctx, s, Options{Now: now, Retention: time.Hour})
	require.NoError(t, err)
	require.Len(t, res.Days, 1)
	assert.Equal(t, filepath.Join("server=pve", "date=2026-11-20", "calls-2.parquet"), res.Days[0].File)
	assert.EqualValues(t, 4, res.Days[0].Written)
	assert.EqualValues(t, 4, res.Days[0].Deleted)
	after, err := os.ReadFile(first)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(before, after), "calls-1.parquet is never rewritten")
	glob := filepath.Join(dir, "server=pve", "date=2026-11-20", "*.parquet")
	assert.EqualValues(t, 14, scalar(t, s, `SELECT count(DISTINCT id) FROM read_parquet('`+glob+`')`))
	m, err := readManifest(filepath.Dir(first))
	require.NoError(t, err)
	require.Len(t, m.Files, 2)
	assert.EqualValues(t, 10, m.Files[0].Rows)
	assert.EqualValues(t, 4, m.Files[1].Rows)
}

// TestRestoreTakesADayOffThePeaksList: a day whose restore inserts calls
// is left to its calls until Recluster counts its peaks per session and
// minute again; a restore that inserts nothing leaves a counted day alone.
func TestRestoreTakesADayOffThePeaksList(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve", "git"}, 3, 10))
	_, err := Run(ctx, s, Options{Now: day0.Add(5 * day), Retention: time.Hour})
	require.NoError(t, err)

	fresh := open(t, filepath.Join(t.TempDir(), "fresh.duckdb"), dir)
	_, err = Restore(ctx, fresh, day0.Add(day)) // the last two days
	require.NoError(t, err)
	rc, err := fresh.Recluster(ctx, day0.Add(5*day))
	require.NoError(t, err)
	require.Equal(t, 2, rc.CountedDays)
	listed := `SELECT day::VARCHAR FROM counted_days ORDER BY day`
	require.Equal(t, []string{"20778", "20779"}, rowsOf(t, fresh, listed))
	_, err = fresh.DB().Exec(`DELETE FROM calls WHERE server = 'pve' AND ts >= ? AND ts < ?`, day0.Add(day), day0.Add(2*day))
	require.NoError(t, err)

	_, err = Restore(ctx, fresh, day0) // inserts day0's calls and pve's of day0+1
	require.NoError(t, err)
	assert.Equal(t, []string{"20779"}, rowsOf(t, fresh, listed))
	rc, err = fresh.Recluster(ctx, day0.Add(5*day))
	require.NoError(t, err)
	assert.Equal(t, 2, rc.CountedDays, "day0 and day0+1")
	assert.EqualValues(t, 1, scalar(t, fresh, `SELECT max(peak) FROM session_peaks WHERE server = 'pve' AND day = 20778`))
}

func TestRestoreIntoAnEmptyDatabase(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve", "git"}, 3, 10))
	const cols = `id, ts, server, tool, method, decision, status, session, session_source, ingested_at`
	var want string
	require.NoError(t, s.DB().QueryRow(`SELECT string_agg(md5(concat_ws('|', `+cols+`)), ',' ORDER BY id) FROM calls`).Scan(&want))
	const toolDays = `SELECT string_agg(concat_ws('|', server, "grant", tool, day, first_call, first_allowed, last_allowed, last_refused), ',' ORDER BY server, "grant", tool, day) FROM tool_days`
	var wantDays string
	require.NoError(t, s.DB().QueryRow(toolDays).Scan(&wantDays))
	require.NotEmpty(t, wantDays)
	wantUse := dayUse(t, s)
	require.NotEmpty(t, wantUse)
	_, err := Run(ctx, s, Options{Now: day0.Add(5 * day), Retention: time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 0, scalar(t, s, `SELECT count(*) FROM calls`))
	assert.Equal(t, wantUse, dayUse(t, s), "tool_day_use keeps the days the retention deletes")
	var keptDays string
	require.NoError(t, s.DB().QueryRow(toolDays).Scan(&keptDays))
	assert.Equal(t, wantDays, keptDays, "the retention keeps each tool's days")

	fresh := open(t, filepath.Join(t.TempDir(), "fresh.duckdb"), dir)
	got, err := Restore(ctx, fresh, day0.Add(day)) // the last two days
	require.NoError(t, err)
	require.Len(t, got, 4)
	assert.EqualValues(t, 40, scalar(t, fresh, `SELECT count(*) FROM calls`))
	// Again: nothing twice.
	got, err = Restore(ctx, fresh, day0)
	require.NoError(t, err)
	require.Len(t, got, 6)
	var inserted int64
	for _, r := range got {
		inserted += r.Inserted
	}
	assert.EqualValues(t, 20, inserted)
	var have string
	require.NoError(t, fresh.DB().QueryRow(`SELECT string_agg(md5(concat_ws('|', `+cols+`)), ',' ORDER BY id) FROM calls`).Scan(&have))
	assert.Equal(t, want, have, "the same rows, column for column")
	var restoredDays string
	require.NoError(t, fresh.DB().QueryRow(toolDays).Scan(&restoredDays))
	assert.Equal(t, wantDays, restoredDays, "the restore records the days it restores, once")
	assert.Equal(t, wantUse, dayUse(t, fresh), "the restore counts the days it restores in tool_day_use, once")
	assert.EqualValues(t, 6, scalar(t, fresh, `SELECT count(*) FROM archive_days WHERE deleted_at IS NULL`))
}

// A restore keeps the calls' argument values only where the database keeps
// them (ingest.store_args): files that a database keeping them wrote,
// restored into one that does not, lose them, as an ingest would.
func TestRestoreKeepsArgumentsOnlyWhereStored(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	evs := events("e", []string{"pve"}, 1, 3)
	for i := range evs {
		evs[i].Args = json.RawMessage(`{"password":"hunter2"}`)
	}
	appendEvents(t, s, evs)
	_, err := Run(ctx, s, Options{Now: day0.Add(5 * day), Retention: time.Hour})
	require.NoError(t, err)
	withArgs := `SELECT count(*) FROM calls WHERE args IS NOT NULL`

	plain := open(t, filepath.Join(t.TempDir(), "plain.duckdb"), dir)
	_, err = Restore(ctx, plain, day0)
	require.NoError(t, err)
	assert.EqualValues(t, 3, scalar(t, plain, `SELECT count(*) FROM calls`))
	assert.Zero(t, scalar(t, plain, withArgs), "store_args off: no argument value at rest")

	keeping, err := analytics.Open(ctx, filepath.Join(t.TempDir(), "keeping.duckdb"), analytics.Options{ArchiveDir: dir, StoreArgs: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = keeping.Close() })
	_, err = Restore(ctx, keeping, day0)
	require.NoError(t, err)
	assert.EqualValues(t, 3, scalar(t, keeping, withArgs))
}

func TestDailyCountsErrorsAndRows(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 2, 5))
	m := NewMetrics()
	d := &Daily{Store: s, Retention: time.Hour, Metrics: m}

	require.NoError(t, os.Remove(dir))
	d.RunOnce(ctx, day0.Add(3*day))
	assert.EqualValues(t, 1, testutil.ToFloat64(m.errors), "a missing folder is an error")
	assert.EqualValues(t, 10, scalar(t, s, `SELECT count(*) FROM calls`))

	require.NoError(t, os.Mkdir(dir, 0o755))
	d.RunOnce(ctx, day0.Add(3*day))
	assert.EqualValues(t, 1, testutil.ToFloat64(m.errors))
	assert.EqualValues(t, 10, testutil.ToFloat64(m.written))
	assert.EqualValues(t, 10, testutil.ToFloat64(m.deleted))
	assert.EqualValues(t, 2, testutil.ToFloat64(m.runs))
}

// query --archive: calls spans the hot store and the archive, each call
// once, whether its day was deleted, kept, or is only partly archived.
func TestQueryArchiveCountsEachCallOnce(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve", "git"}, 4, 10)) // 80 calls, 4 days
	_, err := Run(ctx, s, Options{Now: day0.Add(3*day + time.Hour), Retention: 24 * time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 40, scalar(t, s, `SELECT count(*) FROM calls`), "days 0 and 1 left the hot store")
	appendEvents(t, s, events("late", []string{"pve"}, 1, 3)) // hot, not archived yet

	count := func(s *analytics.Store, archive bool) any {
		var got any
		_, err := s.QueryLimited(ctx, `SELECT count(*) FROM calls`, nil, analytics.QueryLimits{Archive: archive},
			func([]analytics.Column) error { return nil }, func(r []any) error { got = r[0]; return nil })
		require.NoError(t, err)
		return got
	}
	assert.EqualValues(t, 43, count(s, false))
	assert.EqualValues(t, 83, count(s, true))
	assert.EqualValues(t, 43, count(s, false), "the view does not outlive its query")

	// The read-only store that the CLI opens for queries does the same.
	require.NoError(t, s.Close())
	ro, err := analytics.Open(ctx, filepath.Join(filepath.Dir(dir), "a.duckdb"), analytics.Options{ReadOnly: true, ArchiveDir: dir})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Close() })
	assert.EqualValues(t, 83, count(ro, true))

	// Without an archive folder, --archive is an error that says so.
	plain := open(t, filepath.Join(t.TempDir(), "p.duckdb"), "")
	_, err = plain.QueryLimited(ctx, `SELECT 1`, nil, analytics.QueryLimits{Archive: true},
		func([]analytics.Column) error { return nil }, func([]any) error { return nil })
	assert.ErrorIs(t, err, analytics.ErrNoArchive)
}

// A crash between a file's rename and its manifest's leaves a file the
// manifest does not list: the next run adopts it instead of writing its
// calls again, and a leftover temporary file is never read.
func TestUnlistedFileIsAdopted(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 1, 10))
	now := day0.Add(2 * day)
	_, err := Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	folder := filepath.Join(dir, "server=pve", "date=2026-11-20")
	require.NoError(t, os.Remove(filepath.Join(folder, manifestName)))
	require.NoError(t, os.WriteFile(filepath.Join(folder, ".calls-2.parquet.tmp"), []byte("half a file"), 0o644))

	res, err := Run(ctx, s, Options{Now: now, Retention: time.Hour})
	require.NoError(t, err)
	assert.Empty(t, res.Days[0].File, "nothing written again")
	assert.EqualValues(t, 10, res.Days[0].Deleted)
	m, err := readManifest(folder)
	require.NoError(t, err)
	require.Len(t, m.Files, 1)
	assert.Equal(t, "calls-1.parquet", m.Files[0].File)
	assert.EqualValues(t, 10, m.Files[0].Rows)
}

// A restore reads a file the manifest does not list yet (a crash between
// its two renames) as the archive run adopts it, without writing the
// manifest (the archive may be a read-only copy): its calls are not left
// behind when the database is lost before the next run.
func TestRestoreReadsAnUnlistedFile(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 1, 10))
	now := day0.Add(2 * day)
	_, err := Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	appendEvents(t, s, events("late", []string{"pve"}, 1, 4))
	_, err = Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	folder := filepath.Join(dir, "server=pve", "date=2026-11-20")
	m, err := readManifest(folder)
	require.NoError(t, err)
	require.Len(t, m.Files, 2)
	m.Files = m.Files[:1] // calls-2.parquet renamed, the manifest not yet
	require.NoError(t, writeJSON(filepath.Join(folder, manifestName), m))
	before, err := os.ReadFile(filepath.Join(folder, manifestName))
	require.NoError(t, err)

	fresh := open(t, filepath.Join(t.TempDir(), "fresh.duckdb"), dir)
	got, err := Restore(ctx, fresh, day0)
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, 2, got[0].Files)
	assert.EqualValues(t, 14, scalar(t, fresh, `SELECT count(*) FROM calls`))
	after, err := os.ReadFile(filepath.Join(folder, manifestName))
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "the restore writes nothing into the archive")
}

// serve's loop: the first run after First, and it stops with its context.
func TestDailyRunsAndStops(t *testing.T) {
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 2, 5))
	m := NewMetrics()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		(&Daily{Store: s, Metrics: m, First: 10 * time.Millisecond}).Run(ctx)
		close(done)
	}()
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.runs) == 1 }, 10*time.Second, 10*time.Millisecond)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Daily.Run did not stop with its context")
	}
	assert.EqualValues(t, 10, testutil.ToFloat64(m.written))
	assert.FileExists(t, filepath.Join(dir, "server=pve", "date=2026-11-21", "calls-1.parquet"))
}

// A day whose hot calls are exactly its files' (rows and checksum) is not
// read again until the retention deletes it; a change to the hot day is
// still seen.
func TestUnchangedDayIsNotReadAgain(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 1, 10))
	now := day0.Add(2 * day)
	_, err := Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	// A damaged file is not noticed while the day stays in the hot store...
	bad := filepath.Join(dir, "server=pve", "date=2026-11-20", "calls-1.parquet")
	require.NoError(t, os.WriteFile(bad, []byte("not parquet"), 0o644))
	res, err := Run(ctx, s, Options{Now: now})
	require.NoError(t, err)
	assert.True(t, res.Days[0].Verified)
	// ...but before anything is deleted, the whole day is read back.
	res, err = Run(ctx, s, Options{Now: now, Retention: time.Hour})
	require.Error(t, err)
	assert.Zero(t, res.Deleted)
	assert.EqualValues(t, 10, scalar(t, s, `SELECT count(*) FROM calls`))
}

// ArchiveDB: every connection of its pool sees the archived calls in
// calls, for analyses over a window past the retention; closing it leaves
// the store open.
func TestArchiveDBSpansTheArchive(t *testing.T) {
	ctx := context.Background()
	s, _ := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 3, 10))
	_, err := Run(ctx, s, Options{Now: day0.Add(2*day + time.Hour), Retention: time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 10, scalar(t, s, `SELECT count(*) FROM calls`))
	db, err := s.ArchiveDB(ctx)
	require.NoError(t, err)
	db.SetMaxOpenConns(3)
	for range 5 {
		var n int64
		require.NoError(t, db.QueryRowContext(ctx, `SELECT count(*) FROM calls WHERE ts >= '2026-11-20'`).Scan(&n))
		assert.EqualValues(t, 30, n)
	}
	require.NoError(t, db.Close())
	assert.EqualValues(t, 10, scalar(t, s, `SELECT count(*) FROM calls`), "the store's own pool never sees the view")
}

// Files written before a migration added a column to calls (here: one
// without policy_version) are read by name beside newer ones, by the
// analyses' view and by a restore, the missing column NULL.
func TestFilesOfAnOlderSchemaAreRead(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 3, 10))
	_, err := Run(ctx, s, Options{Now: day0.Add(3 * day), Retention: time.Hour})
	require.NoError(t, err)
	old := filepath.Join(dir, "server=pve", "date=2026-11-20", "calls-1.parquet")
	tmp := filepath.Join(dir, "older.parquet")
	conn, err := s.DB().Conn(ctx)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `CREATE TEMP TABLE older AS SELECT * EXCLUDE (policy_version) FROM read_parquet('`+old+`', hive_partitioning = false)`)
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, `COPY older TO '`+tmp+`' (FORMAT parquet)`)
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	require.NoError(t, os.Rename(tmp, old))

	db, err := s.ArchiveDB(ctx)
	require.NoError(t, err)
	// Each column by its name: the same calls, none shifted into another.
	const same = `SELECT count(*) FROM calls WHERE tool = 'get_vm_status' AND status = 'ok' AND decision = 'allowed' AND session = 's1'
		AND ts >= '2026-11-20' AND ts < '2026-11-23' AND ingested_at IS NOT NULL`
	var n int64
	require.NoError(t, db.QueryRowContext(ctx, same).Scan(&n))
	require.NoError(t, db.Close())
	assert.EqualValues(t, 30, n)

	fresh := open(t, filepath.Join(t.TempDir(), "fresh.duckdb"), dir)
	_, err = Restore(ctx, fresh, day0)
	require.NoError(t, err)
	assert.EqualValues(t, 30, scalar(t, fresh, same))
}

// runsState is s's call_runs and run_tails as text (runtraffic.State).
func runsState(t *testing.T, s *analytics.Store) string {
	t.Helper()
	runs, tails, err := runtraffic.State(context.Background(), s.DB())
	require.NoError(t, err)
	return runs + "\n--\n" + tails
}

// TestRestoreKeepsTheRuns: the retention deletes calls but not their runs;
// restoring days this store archived changes nothing (their sessions'
// earlier calls may still be in the archive only); restoring them
// into an empty database, the last days first and then the earlier ones
// (calls earlier than their sessions' stored ones), gives the same runs.
func TestRestoreKeepsTheRuns(t *testing.T) {
	ctx := context.Background()
	s, dir := setup(t)
	evs, err := runtraffic.Generate(3, 6000, 3*day, day0.Add(3*day), false)
	require.NoError(t, err)
	for i := range 7 { // a run across the first midnight
		evs = append(evs, audit.Event{ID: fmt.Sprintf("night-%d", i), TS: day0.Add(day - 30*time.Second + time.Duration(i)*10*time.Second),
			Server: "pve", Tool: "get_task_status", ArgsHash: "upid", Decision: audit.Allowed, Session: "night"})
	}
	appendEvents(t, s, evs)
	require.Greater(t, scalar(t, s, `SELECT count(*) FROM call_runs WHERE polls >= 3`), int64(50), "the traffic has polling loops")
	want := runsState(t, s)

	_, err = Run(ctx, s, Options{Now: day0.Add(5 * day), Retention: time.Hour})
	require.NoError(t, err)
	require.EqualValues(t, 0, scalar(t, s, `SELECT count(*) FROM calls`))
	assert.Equal(t, want, runsState(t, s), "the retention keeps the runs")
	_, err = Restore(ctx, s, day0.Add(day)) // the first day stays in the archive alone
	require.NoError(t, err)
	assert.Equal(t, want, runsState(t, s), "restoring its own days")

	fresh := open(t, filepath.Join(t.TempDir(), "fresh.duckdb"), dir)
	_, err = Restore(ctx, fresh, day0.Add(2*day))
	require.NoError(t, err)
	_, err = Restore(ctx, fresh, day0)
	require.NoError(t, err)
	assert.Equal(t, want, runsState(t, fresh), "restored into an empty database, late days first")
}

// A new server's and day's folders are each synced into their parent
// before the day's file is recorded: the archive's root for the server's
// folder, the server's for the day's.
func TestNewFoldersAreSyncedIntoTheirParents(t *testing.T) {
	s, dir := setup(t)
	appendEvents(t, s, events("e", []string{"pve"}, 2, 3))
	var synced []string
	sync := syncFile
	syncFile = func(path string) error {
		synced = append(synced, path)
		return sync(path)
	}
	t.Cleanup(func() { syncFile = sync })
	_, err := Run(context.Background(), s, Options{Now: day0.Add(day + time.Hour)})
	require.NoError(t, err)
	server := filepath.Join(dir, "server=pve")
	assert.Contains(t, synced, dir, "the server's folder in the archive's root")
	assert.Contains(t, synced, server, "the day's folder in the server's")
	assert.Less(t, slices.Index(synced, dir), slices.Index(synced, filepath.Join(server, "date=2026-11-20", ".calls-1.parquet.tmp")),
		"the folders before the file")
}
