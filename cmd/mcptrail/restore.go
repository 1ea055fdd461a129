package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/archive"
)

func newRestoreCmd(a *app) *cobra.Command {
	var since string
	cmd := &cobra.Command{
		Use:   "restore --since 30d",
		Short: "Put archived days back into the database",
		Long: `Insert the archived days of the window (from the UTC day --since ago to today) from
the Parquet archive in storage.archive into the database, one transaction per day,
skipping calls already stored (by id). Each file is first checked against its day's
manifest. A new daemon with an empty database restores its window this way, then
serve takes the stream on from its consumer's checkpoint. Run it with the daemon
stopped.`,
		Example: `  mcptrail restore --since 30d`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := parseSince(since, 0, "30d or 2w")
			if err != nil {
				return err
			}
			if d == 0 {
				return usageErrorf("--since is required: how far back to restore, such as 30d")
			}
			ctx := cmd.Context()
			store, done, err := a.openArchiveStore(ctx)
			if err != nil {
				return err
			}
			defer done()
			days, err := archive.Restore(ctx, store, a.now.Add(-d))
			var inserted int64
			for _, r := range days {
				inserted += r.Inserted
				fmt.Fprintf(a.stdout, "%s %s: %d calls restored (%d archived in %d files)\n", r.Server, r.Date, r.Inserted, r.Archived, r.Files)
			}
			fmt.Fprintf(a.stdout, "restored %d calls in %d days\n", inserted, len(days))
			return err
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "restore the archived days from this long ago on, such as 30d (required)")
	return cmd
}
