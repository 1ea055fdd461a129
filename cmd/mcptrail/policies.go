package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/render"
)

func newPoliciesCmd(a *app) *cobra.Command {
	var server, format string
	cmd := &cobra.Command{
		Use:   "policies [--server S]",
		Short: "List the current policy recorded for each server and grant",
		Long: `List the policy documents that recommend --policy recorded, the newest for each
server and grant: the current policy that recommend compares its proposal with
when no --policy is given.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if _, err := tableOrJSON(format); err != nil {
				return err
			}
			req := &api.PoliciesRequest{Server: server, Format: format}
			return a.dispatch(cmd.Context(), req, true, func(ctx context.Context, store *analytics.Store) error {
				return a.runPolicies(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "only this server's policies")
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	return cmd
}

// runPolicies prints the current policies with what they allow and hide.
func (a *app) runPolicies(ctx context.Context, store *analytics.Store, req *api.PoliciesRequest) error {
	f, err := tableOrJSON(req.Format)
	if err != nil {
		return err
	}
	recs, err := store.CurrentPolicies(ctx, req.Server)
	if err != nil {
		return err
	}
	if len(recs) == 0 {
		return fmt.Errorf("no policy recorded: mcptrail recommend --server S --policy FILE records one")
	}
	w := render.New(f, a.stdout)
	_ = w.Header([]string{"server", "grant", "imported_at", "source", "tools", "hidden", "default"})
	for _, r := range recs {
		var doc struct {
			Default string                     `json:"default"`
			Tools   map[string]json.RawMessage `json:"tools"`
			Hide    []string                   `json:"hide"`
		}
		_ = json.Unmarshal(r.Document, &doc)
		_ = w.Row([]any{r.Server, r.Grant, r.ImportedAt, r.Source, len(doc.Tools), len(doc.Hide), doc.Default})
	}
	return w.Close()
}
