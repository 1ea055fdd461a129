package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/render"
)

func newFindingsCmd(a *app) *cobra.Command {
	req := &api.FindingsRequest{}
	cmd := &cobra.Command{
		Use:   "findings --server S",
		Short: "List the findings recommend recorded, with their state and when they were seen",
		Long: `List the findings that runs of recommend (and reports) recorded for a server:
when each was first and last seen and its state: open (proposed), accepted (the
current policy holds the proposed change), dismissed (suppressed) or resolved
(a later run of its server and grant no longer found it).`,
		Example: `  mcptrail findings --server proxmox-mcp --state open
  mcptrail findings --server proxmox-mcp --grant helpdesk --format json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFindings(req); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, true, func(ctx context.Context, store *analytics.Store) error {
				return a.runFindings(ctx, store, req)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&req.Server, "server", "", "MCP server whose findings to list (required)")
	fl.StringVar(&req.Grant, "grant", "", "only this grant's findings (default: every grant's)")
	fl.StringVar(&req.State, "state", "", "only findings in this state: "+strings.Join(recommend.FindingStates, ", "))
	fl.StringVar(&req.Format, "format", "table", "output: table, json or csv")
	return cmd
}

// checkFindings checks a findings request before it runs anywhere.
func checkFindings(req *api.FindingsRequest) error {
	if req.Server == "" {
		return usageErrorf("--server is required: the MCP server whose findings to list (e.g. proxmox-mcp)")
	}
	if req.State != "" && !slices.Contains(recommend.FindingStates, req.State) {
		return usageErrorf("unknown --state %q: allowed values are %s", req.State, strings.Join(recommend.FindingStates, ", "))
	}
	if _, err := render.ParseFormat(req.Format); err != nil {
		return usageErrorf("unknown --format %q: allowed values are table, json, csv", req.Format)
	}
	return nil
}

// runFindings prints the recorded findings of a server (and grant).
func (a *app) runFindings(ctx context.Context, store *analytics.Store, req *api.FindingsRequest) error {
	if err := checkFindings(req); err != nil {
		return err
	}
	f, _ := render.ParseFormat(req.Format)
	recs, err := store.Findings(ctx, analytics.FindingFilter{Server: req.Server, Grant: req.Grant, AnyGrant: req.Grant == "", State: req.State})
	if errors.Is(err, analytics.ErrNoRuns) {
		scope := req.Server
		if req.Grant != "" {
			scope += " and grant " + req.Grant
		}
		return fmt.Errorf("no recommend run recorded for server %s: run mcptrail recommend --server %s first (each run records its findings)",
			scope, req.Server)
	}
	if err != nil {
		return err
	}
	w := render.New(f, a.stdout)
	if err := w.Header([]string{"id", "kind", "tool", "state", "severity", "first_seen", "last_seen"}); err != nil {
		return fmt.Errorf("findings: %w", err)
	}
	for _, r := range recs {
		if err := w.Row([]any{r.ID, r.Kind, r.Tool, r.State, r.Severity, r.FirstSeen, r.LastSeen}); err != nil {
			return fmt.Errorf("findings: %w", err)
		}
	}
	return w.Close()
}
