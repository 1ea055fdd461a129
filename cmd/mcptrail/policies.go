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
	cmd.AddCommand(newPoliciesForgetCmd(a))
	return cmd
}

func newPoliciesForgetCmd(a *app) *cobra.Command {
	req := &api.ForgetRequest{}
	cmd := &cobra.Command{
		Use:   "forget --server S [--grant G | --all-grants]",
		Short: "Remove the recorded policies of a server and grant",
		Long: `Remove the policy documents recorded for a server and grant (without --grant,
the server-wide one; with --all-grants, every grant's). recommend then compares
its proposal with the server-wide policy, or with none, until another is
recorded with --policy.`,
		Example: `  mcptrail policies forget --server proxmox-mcp --grant helpdesk`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkForget(req); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, false, func(ctx context.Context, store *analytics.Store) error {
				return a.runForget(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&req.Server, "server", "", "server whose policies to forget (required)")
	cmd.Flags().StringVar(&req.Grant, "grant", "", "the grant (default: the server-wide policy)")
	cmd.Flags().BoolVar(&req.AllGrants, "all-grants", false, "every grant of the server")
	return cmd
}

func checkForget(req *api.ForgetRequest) error {
	if req.Server == "" {
		return usageErrorf("--server is required")
	}
	if req.AllGrants && req.Grant != "" {
		return usageErrorf("give --grant G or --all-grants, not both")
	}
	return nil
}

// runForget removes recorded policies and says what went.
func (a *app) runForget(ctx context.Context, store *analytics.Store, req *api.ForgetRequest) error {
	if err := checkForget(req); err != nil {
		return err
	}
	n, err := store.ForgetPolicies(ctx, req.Server, req.Grant, req.AllGrants)
	if err != nil {
		return err
	}
	scope := "the server-wide policy"
	switch {
	case req.AllGrants:
		scope = "every grant"
	case req.Grant != "":
		scope = "grant " + req.Grant
	}
	if n == 0 {
		return fmt.Errorf("no policy recorded for %s of %s (mcptrail policies lists them)", scope, req.Server)
	}
	fmt.Fprintf(a.stdout, "forgot %d recorded policy document(s) of %s, %s\n", n, req.Server, scope)
	return nil
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
