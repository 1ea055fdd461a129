package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/internal/duration"
	"github.com/mcptrail/mcptrail/render"
)

func newSuppressCmd(a *app) *cobra.Command {
	var reason, until, by string
	cmd := &cobra.Command{
		Use:   "suppress FINDING_ID --reason R --until DATE",
		Short: "Accept or dismiss a finding until a date",
		Long: `Keep a finding out of future proposals until DATE (YYYY-MM-DD, an RFC 3339
time, or a duration from now such as 30d). The finding is still listed, marked
suppressed; after DATE it applies again. Every change is recorded and shown in
recommendations and reports.`,
		Example: `  mcptrail suppress unused_tool:proxmox-mcp:*:create_vm --reason "DR drills" --until 2027-03-01 --by alice`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				by = os.Getenv("USER")
			}
			req := &api.SuppressRequest{FindingID: args[0], Reason: reason, Until: until, By: by}
			if _, err := a.checkSuppress(req); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, false, func(ctx context.Context, store *analytics.Store) error {
				return a.runSuppress(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the finding is accepted (required)")
	cmd.Flags().StringVar(&until, "until", "", "when the suppression expires: YYYY-MM-DD, RFC 3339 or a duration like 90d (required)")
	cmd.Flags().StringVar(&by, "by", "", "who decided (default $USER)")
	return cmd
}

// checkSuppress validates a suppression and returns when it ends.
func (a *app) checkSuppress(req *api.SuppressRequest) (time.Time, error) {
	if strings.TrimSpace(req.Reason) == "" {
		return time.Time{}, usageErrorf("--reason is required: say why the finding is accepted")
	}
	if req.Until == "" {
		return time.Time{}, usageErrorf("--until is required: suppressions expire (e.g. 2027-03-01 or 90d)")
	}
	end, err := parseUntil(req.Until, a.now)
	if err != nil {
		return time.Time{}, usageErrorf("--until %q: %v", req.Until, err)
	}
	if !end.After(a.now) {
		return time.Time{}, usageErrorf("--until %s is not in the future", end.Format(time.RFC3339))
	}
	if err := checkFindingID(req.FindingID); err != nil {
		return time.Time{}, usageErrorf("%v", err)
	}
	return end, nil
}

// runSuppress records a suppression.
func (a *app) runSuppress(ctx context.Context, store *analytics.Store, req *api.SuppressRequest) error {
	end, err := a.checkSuppress(req)
	if err != nil {
		return err
	}
	action, err := store.Suppress(ctx, analytics.Suppression{FindingID: req.FindingID, Reason: req.Reason, Owner: req.By, Until: end, CreatedAt: a.now})
	if err != nil {
		return err
	}
	verb := "suppressed"
	if action == "update" {
		verb = "updated the suppression of"
	}
	fmt.Fprintf(a.stdout, "%s %s until %s\n", verb, req.FindingID, end.Format("2006-01-02"))
	return nil
}

// checkFindingID accepts ids as recommend prints them: kind:server:grant:subject.
func checkFindingID(id string) error {
	if parts := strings.SplitN(id, ":", 4); len(parts) != 4 || parts[0] == "" || parts[3] == "" {
		return fmt.Errorf("%q is not a finding id: copy one from mcptrail recommend (kind:server:grant:tool)", id)
	}
	return nil
}

func parseUntil(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse("2006-01-02", s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC(), nil
	}
	if d, err := duration.Parse(s); err == nil && d > 0 {
		return now.Add(d), nil
	}
	return time.Time{}, errors.New("want YYYY-MM-DD, an RFC 3339 time or a duration such as 90d")
}

func newUnsuppressCmd(a *app) *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "unsuppress FINDING_ID",
		Short: "Remove a suppression: the finding applies again",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if by == "" {
				by = os.Getenv("USER")
			}
			req := &api.UnsuppressRequest{FindingID: args[0], By: by}
			return a.dispatch(cmd.Context(), req, false, func(ctx context.Context, store *analytics.Store) error {
				return a.runUnsuppress(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&by, "by", "", "who decided (default $USER)")
	return cmd
}

func newSuppressionsCmd(a *app) *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "suppressions",
		Short: "List suppressions, active and expired",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &api.SuppressionsRequest{Format: format}
			if _, err := tableOrJSON(format); err != nil {
				return err
			}
			return a.dispatch(cmd.Context(), req, true, func(ctx context.Context, store *analytics.Store) error {
				return a.runSuppressions(ctx, store, req)
			})
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	return cmd
}

// runUnsuppress removes a suppression.
func (a *app) runUnsuppress(ctx context.Context, store *analytics.Store, req *api.UnsuppressRequest) error {
	if err := store.Unsuppress(ctx, req.FindingID, req.By, a.now); err != nil {
		if errors.Is(err, analytics.ErrNoSuppression) {
			return fmt.Errorf("%s is not suppressed (mcptrail suppressions lists them)", req.FindingID)
		}
		return err
	}
	fmt.Fprintf(a.stdout, "unsuppressed %s\n", req.FindingID)
	return nil
}

// tableOrJSON reads a --format that takes table or json.
func tableOrJSON(format string) (render.Format, error) {
	f, err := render.ParseFormat(format)
	if err != nil || f == render.CSV {
		return f, usageErrorf("unknown --format %q: allowed values are table, json", format)
	}
	return f, nil
}

// runSuppressions lists suppressions, active and expired.
func (a *app) runSuppressions(ctx context.Context, store *analytics.Store, req *api.SuppressionsRequest) error {
	f, err := tableOrJSON(req.Format)
	if err != nil {
		return err
	}
	sups, err := store.Suppressions(ctx)
	if err != nil {
		return err
	}
	w := render.New(f, a.stdout)
	_ = w.Header([]string{"finding_id", "status", "until", "by", "reason", "created_at"})
	for _, s := range sups {
		status := "active"
		if !s.Until.After(a.now) {
			status = "expired"
		}
		_ = w.Row([]any{s.FindingID, status, s.Until, s.Owner, s.Reason, s.CreatedAt})
	}
	return w.Close()
}
