// Package archive writes each sealed UTC day of every server's calls to the
// Parquet archive (storage.archive), verifies what it wrote by reading it
// back, deletes from the hot store only what is archived and verified
// (storage.retention), and restores archived days into a store.
//
// Layout, hive-partitioned so that any Parquet reader can query it:
//
//	<dir>/server=<server>/date=<yyyy-mm-dd>/calls-<n>.parquet
//	<dir>/server=<server>/date=<yyyy-mm-dd>/manifest.json
//
// A file, once written, is never rewritten: calls that reach a day after its
// files were written (late events) go to the next calls-<n>.parquet. Every
// file and manifest is written under a temporary name in its folder and
// renamed, so a reader or a crash sees a whole file or none.
package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
)

const day = 24 * time.Hour

// Options are one archive run's settings.
type Options struct {
	// Retention deletes from the hot store the archived and verified calls
	// of days that ended more than this long ago; 0 keeps everything.
	Retention time.Duration
	// Now is the clock: days before its UTC date are sealed.
	Now time.Time
	Log *slog.Logger

	beforeVerify func(analytics.DayRows) // tests: calls stored while a day is archived
}

// Day is what a run did with one server's day.
type Day struct {
	Server   string
	Date     string // yyyy-mm-dd
	File     string // the file written by this run, relative to the archive; "" for none
	Written  int64  // calls written to File
	Verified bool   // every call of the hot store is in the day's files, read back intact
	// Late counts the calls of the day stored while this run archived it
	// (late events): the day is not verified and nothing of it deleted;
	// the next run archives them.
	Late    int64
	Deleted int64 // calls deleted from the hot store
	Err     error
}

// Result is one run.
type Result struct {
	Days                     []Day
	Written, Deleted, Failed int64
	Late                     int64 // calls stored while their day was archived, left to the next run
}

// Run archives every sealed day that has calls in the store and is not
// fully archived, verifies each day, and applies the retention. A day that
// fails is reported in its Day and in the returned error and nothing of it
// is deleted; the other days go on.
func Run(ctx context.Context, st *analytics.Store, opts Options) (Result, error) {
	var res Result
	dir := st.ArchiveDir()
	if err := checkDir(dir); err != nil {
		return res, err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	today := opts.Now.UTC().Truncate(day)
	days, err := st.SealedDays(ctx, today)
	if err != nil {
		return res, err
	}
	var errs []error
	for _, d := range days {
		r := runDay(ctx, st, dir, d, opts)
		if r.Err != nil {
			res.Failed++
			errs = append(errs, r.Err)
			log.Error("archive day", "server", r.Server, "date", r.Date, "err", r.Err)
		}
		res.Written += r.Written
		res.Deleted += r.Deleted
		res.Late += r.Late
		res.Days = append(res.Days, r)
		if ctx.Err() != nil {
			break
		}
	}
	return res, errors.Join(append(errs, ctx.Err())...)
}

func runDay(ctx context.Context, st *analytics.Store, dir string, d analytics.DayRows, opts Options) Day {
	date := d.Day.Format(time.DateOnly)
	r := Day{Server: d.Server, Date: date}
	fail := func(err error) Day {
		r.Err = fmt.Errorf("archive %s %s: %w", d.Server, date, err)
		return r
	}
	rel := dayFolder(d.Server, date)
	folder := filepath.Join(dir, rel)
	m, err := loadDay(ctx, st, folder, d.Server, date, true)
	if err != nil {
		return fail(err)
	}
	due := opts.Retention > 0 && !d.Day.Add(day).After(opts.Now.Add(-opts.Retention))
	if !due && m.holds(d) {
		// The hot day is exactly what its files hold (rows and id
		// checksum), each file read back when written: nothing to read
		// until the retention deletes it, when the whole day is verified.
		r.Verified = true
		return r
	}
	now := time.Now().UTC()
	if n, err := st.Unarchived(ctx, d.Server, d.Day, m.paths(folder)); err != nil {
		return fail(err)
	} else if n > 0 {
		f, err := writeFile(ctx, st, folder, d, m)
		if err != nil {
			return fail(err)
		}
		m.Files = append(m.Files, f)
		if err := writeJSON(filepath.Join(folder, manifestName), m); err != nil {
			return fail(err)
		}
		r.File, r.Written = filepath.Join(rel, f.File), f.Rows
	}
	for _, f := range m.Files {
		if err := st.RecordArchiveFile(ctx, analytics.ArchiveFile{Server: d.Server, Day: d.Day, File: filepath.Join(rel, f.File),
			Rows: f.Rows, Checksum: f.Checksum, ArchivedAt: f.ArchivedAt, VerifiedAt: f.VerifiedAt}); err != nil {
			return fail(err)
		}
	}
	files := m.paths(folder)
	if opts.beforeVerify != nil {
		opts.beforeVerify(d)
	}
	late, err := verify(ctx, st, d, m, files)
	if err != nil {
		return fail(err)
	}
	if late > 0 {
		r.Late = late
		return r
	}
	r.Verified = true
	if due {
		n, err := st.DeleteArchived(ctx, d.Server, d.Day, files, now)
		if err != nil {
			return fail(err)
		}
		r.Deleted = n
	}
	return r
}

// writeFile writes the day's calls not yet in m's files to the next
// calls-<n>.parquet: under a temporary name, read back and compared with
// what DuckDB selected, synced, then renamed.
func writeFile(ctx context.Context, st *analytics.Store, folder string, d analytics.DayRows, m *manifest) (File, error) {
	if err := makeFolder(folder); err != nil {
		return File{}, err
	}
	name := "calls-" + strconv.Itoa(m.next()) + ".parquet"
	final := filepath.Join(folder, name)
	tmp := filepath.Join(folder, "."+name+".tmp")
	_ = os.Remove(tmp) // a crash's leftover
	wrote, err := st.WriteDay(ctx, d.Server, d.Day, m.paths(folder), tmp)
	if err != nil {
		_ = os.Remove(tmp)
		return File{}, err
	}
	rows, distinct, sum, err := st.ParquetRows(ctx, []string{tmp})
	if err == nil && (rows != wrote.Rows || distinct != rows || sum != wrote.Checksum) {
		err = fmt.Errorf("%s read back %d rows (%d ids, checksum %s), DuckDB wrote %d (checksum %s)",
			tmp, rows, distinct, sum, wrote.Rows, wrote.Checksum)
	}
	if err == nil {
		err = syncFile(tmp)
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err == nil {
		err = syncFile(folder)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return File{}, err
	}
	now := time.Now().UTC()
	return File{File: name, Rows: rows, Checksum: sum, ArchivedAt: now, VerifiedAt: now}, nil
}

// verify holds the day archived: the files read back hold as many rows,
// and the same checksum, as the manifest says, no id twice, and every call
// of the day in the hot store is among them. late counts the calls of the
// day in no file (stored while archiving, which the next run archives): a
// day with late calls is not verified, without failing.
func verify(ctx context.Context, st *analytics.Store, d analytics.DayRows, m *manifest, files []string) (late int64, err error) {
	var want int64
	for _, f := range m.Files {
		want += f.Rows
	}
	rows, distinct, _, err := st.ParquetRows(ctx, files)
	if err != nil {
		return 0, err
	}
	if rows != want || distinct != rows {
		return 0, fmt.Errorf("verify: the files hold %d rows (%d ids), the manifest says %d", rows, distinct, want)
	}
	for i, f := range m.Files {
		n, _, sum, err := st.ParquetRows(ctx, files[i:i+1])
		if err != nil {
			return 0, err
		}
		if n != f.Rows || sum != f.Checksum {
			return 0, fmt.Errorf("verify: %s holds %d rows (checksum %s), the manifest says %d (checksum %s)", f.File, n, sum, f.Rows, f.Checksum)
		}
	}
	return st.Unarchived(ctx, d.Server, d.Day, files)
}

// checkDir fails unless the archive folder exists and is a folder; that it
// is writable shows when a file is written.
func checkDir(dir string) error {
	if dir == "" {
		return analytics.ErrNoArchive
	}
	st, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("storage.archive %s: %w: create the folder or change storage.archive", dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("storage.archive %s is not a folder", dir)
	}
	return nil
}

// dayFolder is a day's folder relative to the archive, the server name
// escaped so that it stays one path element.
func dayFolder(server, date string) string {
	return filepath.Join("server="+url.PathEscape(server), "date="+date)
}

const manifestName = "manifest.json"

// manifest is a day's manifest.json: its files with their row counts and
// id checksums, for verification and for restoring into another database.
type manifest struct {
	Server string `json:"server"`
	Date   string `json:"date"`
	Files  []File `json:"files"`
}

// File is one Parquet file of a day.
type File struct {
	File       string    `json:"file"`
	Rows       int64     `json:"rows"`
	Checksum   string    `json:"checksum"` // sum of md5_number_lower(id), as text
	ArchivedAt time.Time `json:"archived_at"`
	VerifiedAt time.Time `json:"verified_at"`
}

var fileName = regexp.MustCompile(`^calls-([0-9]+)\.parquet$`)

func (m *manifest) next() int {
	n := 0
	for _, f := range m.Files {
		if k := fileNumber(f.File); k > n {
			n = k
		}
	}
	return n + 1
}

// holds reports whether the day's files hold as many calls as d, with the
// same id checksum.
func (m *manifest) holds(d analytics.DayRows) bool {
	var rows int64
	sum, want := new(big.Int), new(big.Int)
	if _, ok := want.SetString(d.Checksum, 10); !ok {
		return false
	}
	for _, f := range m.Files {
		n, ok := new(big.Int).SetString(f.Checksum, 10)
		if !ok {
			return false
		}
		sum.Add(sum, n)
		rows += f.Rows
	}
	return len(m.Files) > 0 && rows == d.Rows && sum.Cmp(want) == 0
}

func (m *manifest) paths(folder string) []string {
	out := make([]string, len(m.Files))
	for i, f := range m.Files {
		out[i] = filepath.Join(folder, f.File)
	}
	return out
}

func fileNumber(name string) int {
	sub := fileName.FindStringSubmatch(name)
	if sub == nil {
		return 0
	}
	n, _ := strconv.Atoi(sub[1])
	return n
}

// loadDay reads a day's manifest and adopts a calls-<n>.parquet that the
// manifest does not list (a crash between its rename and the manifest's):
// readers of the folder see it, so it must count. record writes the
// manifest with the files adopted (the archive run; not a restore).
func loadDay(ctx context.Context, st *analytics.Store, folder, server, date string, record bool) (*manifest, error) {
	m, err := readManifest(folder)
	if err != nil {
		return nil, err
	}
	if m == nil {
		m = &manifest{Server: server, Date: date}
	}
	entries, err := os.ReadDir(folder)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("list %s: %w", folder, err)
	}
	listed := map[string]bool{}
	for _, f := range m.Files {
		listed[f.File] = true
	}
	adopted := false
	for _, e := range entries {
		if e.IsDir() || listed[e.Name()] || fileNumber(e.Name()) == 0 {
			continue
		}
		rows, distinct, sum, err := st.ParquetRows(ctx, []string{filepath.Join(folder, e.Name())})
		if err != nil {
			return nil, err
		}
		if distinct != rows {
			return nil, fmt.Errorf("%s: unlisted file repeats ids: remove it", filepath.Join(folder, e.Name()))
		}
		now := time.Now().UTC()
		m.Files = append(m.Files, File{File: e.Name(), Rows: rows, Checksum: sum, ArchivedAt: now, VerifiedAt: now})
		adopted = true
	}
	sort.Slice(m.Files, func(i, j int) bool { return fileNumber(m.Files[i].File) < fileNumber(m.Files[j].File) })
	if adopted && record {
		if err := writeJSON(filepath.Join(folder, manifestName), m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func readManifest(folder string) (*manifest, error) {
	b, err := os.ReadFile(filepath.Join(folder, manifestName))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	var m manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("read manifest %s: %w", filepath.Join(folder, manifestName), err)
	}
	for _, f := range m.Files {
		if fileNumber(f.File) == 0 {
			return nil, fmt.Errorf("manifest %s lists %q, not a calls-<n>.parquet", filepath.Join(folder, manifestName), f.File)
		}
	}
	return &m, nil
}

// writeJSON writes v to path atomically: a temporary file in the same
// folder, synced, renamed over path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := syncFile(tmp); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncFile(filepath.Dir(path))
}

// makeFolder creates folder and the missing folders above it, each synced
// into its parent: a new server's or day's folder entry must be on disk
// before the day is recorded as archived and its calls deleted, or a crash
// could leave the record pointing at a folder that is gone.
func makeFolder(folder string) error {
	if _, err := os.Stat(folder); err == nil {
		return nil
	}
	parent := filepath.Dir(folder)
	if parent != folder {
		if err := makeFolder(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(folder, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create folder %s: %w", folder, err)
	}
	return syncFile(parent)
}

// syncFile flushes a file or folder to disk, so that a rename after it
// never exposes an empty file after a crash. A variable, so that a test
// can see what is synced.
var syncFile = func(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", path, err)
	}
	return nil
}
