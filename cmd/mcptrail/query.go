package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/queries"
	"github.com/mcptrail/mcptrail/render"
)

func newQueryCmd(a *app) *cobra.Command {
	var (
		sqlText string
		params  []string
		format  string
		// withArchive: calls spans the Parquet archive too
		withArchive bool
	)
	cmd := &cobra.Command{
		Use:   "query NAME | --sql \"SELECT ...\"",
		Short: "Run a named query or read-only ad-hoc SQL over the call history",
		Example: `  mcptrail query calls_by_tool --param server=proxmox-mcp --param since=7d
  mcptrail query --sql "SELECT tool, count(*) FROM calls GROUP BY ALL ORDER BY 2 DESC" --format csv`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := render.ParseFormat(format); err != nil {
				return usageErrorf("%v", err)
			}
			req := &api.QueryRequest{SQL: sqlText, Format: format, Archive: withArchive}
			switch {
			case sqlText != "" && len(args) > 0:
				return usageErrorf("give a query NAME or --sql, not both")
			case sqlText != "":
				if len(params) > 0 {
					return usageErrorf("--param binds the parameters of named queries; write values into --sql yourself")
				}
			case len(args) == 1:
				req.Name = args[0]
				if _, err := queries.Get(req.Name); err != nil {
					return usageErrorf("%v", err)
				}
				values, err := parseParams(params)
				if err != nil {
					return err
				}
				req.Params = values
			default:
				return usageErrorf("give a query NAME (see mcptrail queries) or --sql \"SELECT ...\"")
			}
			return a.dispatch(cmd.Context(), req, true, func(ctx context.Context, store *analytics.Store) error {
				return a.runQuery(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&sqlText, "sql", "", "ad-hoc read-only SQL (one SELECT statement)")
	cmd.Flags().StringArrayVar(&params, "param", nil, "parameter of a named query, as key=value (repeatable)")
	cmd.Flags().StringVar(&format, "format", "table", "output format: table, csv or json")
	cmd.Flags().BoolVar(&withArchive, "archive", false, "calls also holds the archived calls no longer in the database (storage.archive), each call once")
	return cmd
}

// runQuery runs a named query or read-only SQL and prints its rows. In the
// daemon the answer stops at query.max_rows rows or query.max_bytes of values,
// with a note; every query stops at query.timeout.
func (a *app) runQuery(ctx context.Context, store *analytics.Store, req *api.QueryRequest) error {
	f, err := render.ParseFormat(req.Format)
	if err != nil {
		return usageErrorf("%v", err)
	}
	text, bound := req.SQL, []any(nil)
	switch {
	case req.SQL != "" && req.Name != "":
		return usageErrorf("give a query NAME or --sql, not both")
	case req.SQL != "":
		if len(req.Params) > 0 {
			return usageErrorf("--param binds the parameters of named queries; write values into --sql yourself")
		}
	case req.Name != "":
		q, err := queries.Get(req.Name)
		if err != nil {
			return usageErrorf("%v", err)
		}
		if bound, err = q.Bind(req.Params, a.now); err != nil {
			return usageErrorf("%v", err)
		}
		text = q.SQL
	default:
		return usageErrorf("give a query NAME (see mcptrail queries) or --sql \"SELECT ...\"")
	}
	w := render.New(f, a.stdout)
	// On the file every row is printed; the daemon's answers are bounded.
	limits := analytics.QueryLimits{Timeout: a.cfg.Query.Timeout, Archive: req.Archive}
	if a.truncate != nil {
		limits.MaxRows, limits.MaxBytes = a.cfg.Query.MaxRows, a.cfg.Query.MaxBytes
	}
	cut, err := store.QueryLimited(ctx, text, bound, limits,
		func(cols []analytics.Column) error {
			names := make([]string, len(cols))
			for i, c := range cols {
				names[i] = c.Name
			}
			return w.Header(names)
		},
		w.Row)
	switch {
	case errors.Is(err, analytics.ErrNotReadOnly), errors.Is(err, analytics.ErrQueryTimeout):
		return err
	case errors.Is(err, analytics.ErrNoArchive):
		return usageErrorf("--archive: %v", err)
	case err != nil:
		return fmt.Errorf("query failed: %w", err)
	}
	if err := w.Close(); err != nil {
		return err
	}
	if cut != nil {
		fmt.Fprintf(a.stderr, "mcptrail: %s; or run it on the database file with the daemon stopped\n", cut.Note())
		a.truncate()
	}
	return nil
}

func parseParams(kvs []string) (map[string]string, error) {
	out := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usageErrorf("--param %q: want key=value", kv)
		}
		out[k] = v
	}
	return out, nil
}

func newQueriesCmd(a *app) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "queries",
		Short: "List the named queries with their parameters",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The list is built in: no database, no daemon.
			return a.runQueries(&api.QueriesRequest{Format: format})
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output format: table, csv or json")
	return cmd
}

// runQueries lists the named queries with their parameters.
func (a *app) runQueries(req *api.QueriesRequest) error {
	f, err := render.ParseFormat(req.Format)
	if err != nil {
		return usageErrorf("%v", err)
	}
	all, err := queries.All()
	if err != nil {
		return err
	}
	w := render.New(f, a.stdout)
	if err := w.Header([]string{"name", "description", "parameters"}); err != nil {
		return err
	}
	for _, q := range all {
		ps := make([]string, len(q.Params))
		for i, p := range q.Params {
			def := p.Default
			if def == "" {
				def = `""`
			}
			ps[i] = fmt.Sprintf("%s=%s", p.Name, def)
		}
		if err := w.Row([]any{q.Name, q.Description, strings.Join(ps, " ")}); err != nil {
			return err
		}
	}
	return w.Close()
}
