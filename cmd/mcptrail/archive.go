package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/archive"
)

func newArchiveCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "archive",
		Short: "Write sealed days to the Parquet archive, verify them, apply storage.retention",
		Long: `Write each sealed UTC day (before today) of every server to the Parquet archive in
storage.archive (server=<s>/date=<yyyy-mm-dd>/calls-<n>.parquet), read each file back
to verify it, and delete from the database the archived, verified calls of days older
than storage.retention (0: none). Calls that reach a day after it was archived go to
a new file. serve does the same every day; run this with the daemon stopped.`,
		Example: `  mcptrail archive
  MCPTRAIL_STORAGE_ARCHIVE=/srv/mcptrail-archive MCPTRAIL_STORAGE_RETENTION=90d mcptrail archive`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			store, done, err := a.openArchiveStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			// Each failed day is in the returned error: no log line repeats it.
			res, err := archive.Run(ctx, store, archive.Options{Retention: a.cfg.Storage.Retention, Now: a.now})
			for _, d := range res.Days {
				wrote := "nothing new"
				if d.File != "" {
					wrote = fmt.Sprintf("wrote %d calls to %s", d.Written, d.File)
				}
				if d.Err != nil && d.File == "" {
					wrote = "nothing written"
				}
				if d.Err != nil {
					fmt.Fprintf(a.stdout, "%s %s: %s, FAILED, %d deleted\n", d.Server, d.Date, wrote, d.Deleted)
					continue
				}
				if d.Late > 0 {
					fmt.Fprintf(a.stdout, "%s %s: %s, %d calls stored meanwhile (the next run archives them), %d deleted\n",
						d.Server, d.Date, wrote, d.Late, d.Deleted)
					continue
				}
				fmt.Fprintf(a.stdout, "%s %s: %s, verified, %d deleted\n", d.Server, d.Date, wrote, d.Deleted)
			}
			if err == nil || len(res.Days) > 0 { // a run that failed before any day has no summary
				fmt.Fprintf(a.stdout, "archived %d calls, deleted %d, %d days failed\n", res.Written, res.Deleted, res.Failed)
			}
			if errors.Is(err, analytics.ErrNoArchive) {
				return usageErrorf("%v", err)
			}
			return err
		},
	}
}

// openArchiveStore opens the database for archive and restore, which need
// storage.archive and write the file.
func (a *app) openArchiveStore(ctx context.Context) (*analytics.Store, func(), error) {
	if a.cfg.Storage.Archive == "" {
		return nil, nil, usageErrorf("storage.archive is empty: set it to the archive folder (config file or MCPTRAIL_STORAGE_ARCHIVE)")
	}
	return a.openStore(ctx, false)
}

// callsDB is the pool that recommend and report read the calls from: the
// store's, or, when their window (ending at now) reaches further back
// than storage.retention kept or holds a day the retention deleted (a
// window in the past, a retention raised since), one whose calls holds the
// archived calls too (analytics.Store.ArchiveDB). done closes it.
func (a *app) callsDB(ctx context.Context, store *analytics.Store, now time.Time, window time.Duration) (*sql.DB, func(), error) {
	if store.ArchiveDir() == "" {
		return store.DB(), func() {}, nil
	}
	if keep := a.cfg.Storage.Retention; keep <= 0 || window <= keep {
		deleted, err := store.DeletedDays(ctx, now.Add(-window), now)
		if err != nil {
			return nil, nil, err
		}
		if !deleted {
			return store.DB(), func() {}, nil
		}
	}
	db, err := store.ArchiveDB(ctx)
	if err != nil {
		return nil, nil, err
	}
	return db, func() { _ = db.Close() }, nil
}
