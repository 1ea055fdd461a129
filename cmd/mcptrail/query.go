package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/queries"
	"github.com/mcptrail/mcptrail/render"
)

func newQueryCmd(a *app) *cobra.Command {
	var (
		sqlText string
		params  []string
		format  string
	)
	cmd := &cobra.Command{
		Use:   "query NAME | --sql \"SELECT ...\"",
		Short: "Run a named query or read-only ad-hoc SQL over the call history",
		Example: `  mcptrail query calls_by_tool --param server=proxmox-mcp --param since=7d
  mcptrail query --sql "SELECT tool, count(*) FROM calls GROUP BY ALL ORDER BY 2 DESC" --format csv`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f, err := render.ParseFormat(format)
			if err != nil {
				return usageErrorf("%v", err)
			}
			var text string
			var bound []any
			switch {
			case sqlText != "" && len(args) > 0:
				return usageErrorf("give a query NAME or --sql, not both")
			case sqlText != "":
				if len(params) > 0 {
					return usageErrorf("--param binds the parameters of named queries; write values into --sql yourself")
				}
				text = sqlText
			case len(args) == 1:
				q, err := queries.Get(args[0])
				if err != nil {
					return usageErrorf("%v", err)
				}
				values, err := parseParams(params)
				if err != nil {
					return err
				}
				bound, err = q.Bind(values, a.now)
				if err != nil {
					return usageErrorf("%v", err)
				}
				text = q.SQL
			default:
				return usageErrorf("give a query NAME (see mcptrail queries) or --sql \"SELECT ...\"")
			}
			store, closeStore, err := a.storeOrForward(cmd, true)
			if store == nil {
				return err // forwarded to the daemon, or the file did not open
			}
			defer closeStore()
			w := render.New(f, a.stdout)
			err = store.Query(cmd.Context(), text, bound,
				func(cols []analytics.Column) error {
					names := make([]string, len(cols))
					for i, c := range cols {
						names[i] = c.Name
					}
					return w.Header(names)
				},
				w.Row)
			if err != nil {
				if errors.Is(err, analytics.ErrNotReadOnly) {
					return err
				}
				return fmt.Errorf("query failed: %w", err)
			}
			return w.Close()
		},
	}
	cmd.Flags().StringVar(&sqlText, "sql", "", "ad-hoc read-only SQL (one SELECT statement)")
	cmd.Flags().StringArrayVar(&params, "param", nil, "parameter of a named query, as key=value (repeatable)")
	cmd.Flags().StringVar(&format, "format", "table", "output format: table, csv or json")
	return cmd
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
			f, err := render.ParseFormat(format)
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
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output format: table, csv or json")
	return cmd
}
