package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
)

func newConvertCmd(a *app) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "convert --out FILE",
		Short: "Copy the database into a new file in the current storage format",
		Long: `Copy every table of the database (--db, storage.path) into a new file created in
DuckDB's storage format ` + analytics.StorageVersion + `, which this build creates and stores calls
into with less CPU and space than the older default format (v1.0.0) that a file
created before keeps. The database's contents stay as they are (an older schema is
migrated and its write-ahead log folded into the file first); FILE must not exist.
Run it with the daemon stopped, then put FILE in place of the database. DuckDB 1.5
or newer reads the copy.`,
		Example: `  mcptrail convert --db mcptrail.duckdb --out mcptrail-new.duckdb && mv mcptrail-new.duckdb mcptrail.duckdb`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return usageErrorf("--out is required: the new file to write, which must not exist")
			}
			res, err := analytics.ConvertStorage(cmd.Context(), a.cfg.Storage.Path, out)
			if err != nil {
				if errors.Is(err, analytics.ErrLocked) {
					return fmt.Errorf("%w: stop mcptrail serve (or the ingest holding it) first", err)
				}
				return err
			}
			fmt.Fprintf(a.stdout, "copied %d rows of %d tables (%d calls) from storage format %s to %s in %s\n",
				res.Rows, res.Tables, res.Calls, res.From, res.To, out)
			return nil
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "the new database file (must not exist)")
	return cmd
}
