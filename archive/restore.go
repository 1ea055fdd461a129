package archive

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
)

// Restored is one day put back into the hot store.
type Restored struct {
	Server   string
	Date     string
	Files    int
	Archived int64 // rows in the day's files
	Inserted int64 // rows that were not in the store yet
}

// Restore inserts the archived days from `from` on (a UTC date; the
// days' files as their manifests list them, verified against the manifest
// first, and the files a manifest does not list yet) into the store, each
// day in one transaction, skipping ids it already holds, and marks them as
// in the hot store again.
func Restore(ctx context.Context, st *analytics.Store, from time.Time) ([]Restored, error) {
	dir := st.ArchiveDir()
	if err := checkDir(dir); err != nil {
		return nil, err
	}
	folders, err := filepath.Glob(filepath.Join(dir, "server=*", "date=*"))
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	sort.Strings(folders)
	first := from.UTC().Truncate(day)
	var out []Restored
	for _, folder := range folders {
		date := strings.TrimPrefix(filepath.Base(folder), "date=")
		d, err := time.Parse(time.DateOnly, date)
		if err != nil || d.Before(first) {
			continue
		}
		server, err := url.PathUnescape(strings.TrimPrefix(filepath.Base(filepath.Dir(folder)), "server="))
		if err != nil {
			return out, fmt.Errorf("restore %s: not a server folder: %w", folder, err)
		}
		// The files as the archive run knows them: a file the manifest
		// does not list yet (a crash between its two renames) is read back
		// and taken, as the run adopts it, but the manifest is left as it
		// is (the archive may be a read-only copy).
		m, err := loadDay(ctx, st, folder, server, date, false)
		if err != nil {
			return out, fmt.Errorf("restore %s %s: %w", server, date, err)
		}
		if len(m.Files) == 0 {
			continue
		}
		if m.Server != server || m.Date != date {
			return out, fmt.Errorf("restore %s: its manifest is for %s %s", folder, m.Server, m.Date)
		}
		files := m.paths(folder)
		r := Restored{Server: server, Date: date, Files: len(files)}
		for i, f := range m.Files {
			n, _, sum, err := st.ParquetRows(ctx, files[i:i+1])
			if err != nil {
				return out, fmt.Errorf("restore %s %s: %w", server, date, err)
			}
			if n != f.Rows || sum != f.Checksum {
				return out, fmt.Errorf("restore %s %s: %s holds %d rows (checksum %s), its manifest says %d (checksum %s): not restored",
					server, date, files[i], n, sum, f.Rows, f.Checksum)
			}
			r.Archived += n
		}
		if r.Inserted, err = st.RestoreDay(ctx, server, d, files); err != nil {
			return out, fmt.Errorf("restore %s %s: %w", server, date, err)
		}
		rel, _ := filepath.Rel(dir, folder)
		for _, f := range m.Files {
			if err := st.RecordArchiveFile(ctx, analytics.ArchiveFile{Server: server, Day: d, File: filepath.Join(rel, f.File),
				Rows: f.Rows, Checksum: f.Checksum, ArchivedAt: f.ArchivedAt, VerifiedAt: f.VerifiedAt}); err != nil {
				return out, err
			}
		}
		out = append(out, r)
		if err := ctx.Err(); err != nil {
			return out, err
		}
	}
	return out, nil
}

// HasFiles reports whether the archive holds any Parquet file, for readers
// (read_parquet fails on a glob that matches nothing).
func HasFiles(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "server=*", "date=*", "calls-*.parquet"))
	return len(m) > 0
}
