package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/render"
)

func newReplayCmd(a *app) *cobra.Command {
	var server, policyFile, grant, since, format string
	cmd := &cobra.Command{
		Use:   "replay --server S --policy F",
		Short: "Show what a policy would have done to a server's past calls",
		Long: `Replay the window's calls of a server under a policy.json, with the same
evaluator the recommender uses: counts by decision, the calls, sessions and
agents it would have affected, per tool, and the first affected calls.`,
		Example: `  mcptrail replay --server proxmox-mcp --policy proposed/policy.json --since 7d`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if server == "" || policyFile == "" {
				return usageErrorf("--server and --policy are required")
			}
			if format != "text" && format != "json" {
				return usageErrorf("unknown --format %q: allowed values are text, json", format)
			}
			if _, err := parseSince(since, 0, "30d, 2w or 72h"); err != nil {
				return err
			}
			doc, err := readInput("policy", policyFile)
			if err != nil {
				return err
			}
			if _, err := policy.Parse(doc.Content, doc.Name); err != nil {
				return err
			}
			req := &api.ReplayRequest{Server: server, Grant: grant, Since: since, Policy: *doc, Format: format}
			if req.Settings, err = a.settings(); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, true, func(ctx context.Context, store *analytics.Store) error {
				return a.runReplay(ctx, store, req)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&server, "server", "", "MCP server whose calls to replay (required)")
	fl.StringVar(&policyFile, "policy", "", "policy.json to replay (required)")
	fl.StringVar(&grant, "grant", "", "only this grant's calls")
	fl.StringVar(&since, "since", "", "window of history (default recommend.window, 30d)")
	fl.StringVar(&format, "format", "text", "output: text or json")
	return cmd
}

// runReplay replays the request's policy over the window and prints the
// outcome.
func (a *app) runReplay(ctx context.Context, store *analytics.Store, req *api.ReplayRequest) error {
	if req.Server == "" {
		return usageErrorf("--server and --policy are required")
	}
	if req.Format != "" && req.Format != "text" && req.Format != "json" {
		return usageErrorf("unknown --format %q: allowed values are text, json", req.Format)
	}
	window, err := parseSince(req.Since, a.cfg.Recommend.Window, "30d, 2w or 72h")
	if err != nil {
		return err
	}
	p, err := policy.Parse(req.Policy.Content, req.Policy.Name)
	if err != nil {
		return err
	}
	server, grant, policyFile := req.Server, req.Grant, req.Policy.Name
	from := a.now.Add(-window)
	calls, done, err := a.callsDB(ctx, store, a.now, window)
	if err != nil {
		return err
	}
	defer done()
	// A grant's recorded policy (its own, else the server's, as recommend
	// takes it) is what the gateway enforced on its calls: the replay then
	// knows the conditions behind the calls it refused by a conditional rule.
	// Across grants the recorded rules name different policies.
	var current *policy.Policy
	if grant != "" {
		sp, err := scopePolicies(ctx, store, server, grant)
		if err != nil {
			return err
		}
		current = sp.current
	}
	r, err := recommend.Run(ctx, calls, recommend.ReplayOptions{Server: server, Grant: grant, From: from, To: a.now, Policy: p, Current: current})
	if err != nil {
		return err
	}
	if r.Calls == 0 {
		return fmt.Errorf("no calls for server %q between %s and %s: check the name or widen --since",
			server, from.Format(time.RFC3339), a.now.Format(time.RFC3339))
	}
	if req.Format == "json" {
		out := struct {
			Server string            `json:"server"`
			Grant  string            `json:"grant"`
			Policy string            `json:"policy"`
			From   time.Time         `json:"from"`
			To     time.Time         `json:"to"`
			Replay *recommend.Replay `json:"replay"`
		}{server, grant, policyFile, from, a.now, r}
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return writeReplayText(a, server, grant, policyFile, from, r)
}

func writeReplayText(a *app, server, grant, policyFile string, from time.Time, r *recommend.Replay) error {
	w := a.stdout
	scope := "all grants"
	if grant != "" {
		scope = "grant " + grant
	}
	fmt.Fprintf(w, "replay of %s over %s (%s), %s → %s\n", render.Terminal(policyFile), render.Terminal(server), render.Terminal(scope),
		from.Format("2006-01-02 15:04"), a.now.Format("2006-01-02 15:04"))
	fmt.Fprintf(w, "the policy %s\n\n", recommend.ReplaySentence(r))
	tools := make([]string, 0, len(r.ByTool))
	for t := range r.ByTool {
		tools = append(tools, t)
	}
	sort.Slice(tools, func(i, j int) bool {
		a, b := r.ByTool[tools[i]], r.ByTool[tools[j]]
		if a.Changed+a.NewlyAllowed != b.Changed+b.NewlyAllowed {
			return a.Changed+a.NewlyAllowed > b.Changed+b.NewlyAllowed
		}
		if a.Calls != b.Calls {
			return a.Calls > b.Calls
		}
		return tools[i] < tools[j]
	})
	tw := render.New(render.Table, w)
	_ = tw.Header([]string{"tool", "calls", "allowed", "rate_limited", "approval_required", "hidden", "denied", "changed", "newly_allowed", "sessions_affected"})
	for _, t := range tools {
		c := r.ByTool[t]
		_ = tw.Row([]any{t, c.Calls, c.Allowed, c.RateLimited, c.ApprovalRequired, c.Hidden, c.Denied, c.Changed, c.NewlyAllowed, c.SessionsAffected})
	}
	_ = tw.Row([]any{"total", r.Calls, r.Allowed, r.RateLimited, r.ApprovalRequired, r.Hidden, r.Denied, r.Changed, r.NewlyAllowed, r.SessionsAffected})
	if err := tw.Close(); err != nil {
		return err
	}
	if len(r.FirstAffected) > 0 {
		fmt.Fprintf(w, "\nfirst affected calls:\n")
		fw := render.New(render.Table, w)
		_ = fw.Header([]string{"ts", "tool", "session", "agent", "decision", "rule"})
		for _, c := range r.FirstAffected {
			_ = fw.Row([]any{c.TS, c.Tool, c.Session, c.Agent, c.Recorded + " → " + c.Replayed, strings.TrimSpace(c.Rule)})
		}
		return fw.Close()
	}
	return nil
}
