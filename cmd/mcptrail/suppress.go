package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
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
			if strings.TrimSpace(reason) == "" {
				return usageErrorf("--reason is required: say why the finding is accepted")
			}
			if until == "" {
				return usageErrorf("--until is required: suppressions expire (e.g. 2027-03-01 or 90d)")
			}
			end, err := parseUntil(until, a.now)
			if err != nil {
				return usageErrorf("--until %q: %v", until, err)
			}
			if !end.After(a.now) {
				return usageErrorf("--until %s is not in the future", end.Format(time.RFC3339))
			}
			if err := checkFindingID(args[0]); err != nil {
				return usageErrorf("%v", err)
			}
			if by == "" {
				by = os.Getenv("USER")
			}
			store, closeStore, err := a.storeOrForward(cmd, false)
			if store == nil {
				return err // forwarded to the daemon, or the file did not open
			}
			defer closeStore()
			action, err := store.Suppress(cmd.Context(), analytics.Suppression{FindingID: args[0], Reason: reason, Owner: by, Until: end, CreatedAt: a.now})
			if err != nil {
				return err
			}
			verb := "suppressed"
			if action == "update" {
				verb = "updated the suppression of"
			}
			fmt.Fprintf(a.stdout, "%s %s until %s\n", verb, args[0], end.Format("2006-01-02"))
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why the finding is accepted (required)")
	cmd.Flags().StringVar(&until, "until", "", "when the suppression expires: YYYY-MM-DD, RFC 3339 or a duration like 90d (required)")
	cmd.Flags().StringVar(&by, "by", "", "who decided (default $USER)")
	return cmd
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
			store, closeStore, err := a.storeOrForward(cmd, false)
			if store == nil {
				return err // forwarded to the daemon, or the file did not open
			}
			defer closeStore()
			if err := store.Unsuppress(cmd.Context(), args[0], by, a.now); err != nil {
				if errors.Is(err, analytics.ErrNoSuppression) {
					return fmt.Errorf("%s is not suppressed (mcptrail suppressions lists them)", args[0])
				}
				return err
			}
			fmt.Fprintf(a.stdout, "unsuppressed %s\n", args[0])
			return nil
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
			f, err := render.ParseFormat(format)
			if err != nil || f == render.CSV {
				return usageErrorf("unknown --format %q: allowed values are table, json", format)
			}
			store, closeStore, err := a.storeOrForward(cmd, true)
			if store == nil {
				return err // forwarded to the daemon, or the file did not open
			}
			defer closeStore()
			sups, err := store.Suppressions(cmd.Context())
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
		},
	}
	cmd.Flags().StringVar(&format, "format", "table", "output: table or json")
	return cmd
}
