package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/policywatch"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/server"
)

// startPolicyWatch makes the daemon watch for regressions after a policy
// version change (regression.*), once it is ready: a new one is recorded in
// the finding history by a recorded run of its scope (source "watch") and
// published on alerts.subject_prefix + server.
func (a *app) startPolicyWatch(store *analytics.Store, opts *server.Options) {
	if !a.cfg.Regression.Enabled {
		return
	}
	metrics := policywatch.NewMetrics()
	opts.Collectors = append(opts.Collectors, metrics.Collectors()...)
	w := &policywatch.Watch{Store: store, Log: a.log.With("component", "policywatch"), Metrics: metrics,
		Config: policywatch.Config{Interval: a.cfg.Regression.Interval, SubjectPrefix: a.cfg.Alerts.SubjectPrefix, Params: a.recommendParams()},
		Record: a.recordScope(store, "watch"),
		Policy: func(ctx context.Context, server, grant string) (*policy.Policy, error) {
			sp, err := scopePolicies(ctx, store, server, grant)
			return sp.current, err
		}}
	addBackground(opts, func(ctx context.Context, nc *nats.Conn) {
		w.Publish = natsPublish(nc)
		w.Run(ctx)
	})
}

// recordScope runs the recommender for one scope at now, as `recommend
// --server S --grant G` does, and records the run in the finding history
// as made by source; it returns the scope's findings.
func (a *app) recordScope(store *analytics.Store, source string) func(ctx context.Context, server, grant string, now time.Time) ([]recommend.Finding, error) {
	return func(ctx context.Context, server, grant string, now time.Time) ([]recommend.Finding, error) {
		o := a.grantsOptions(store, server, a.recommendParams(), "", source, nil)
		o.Grant, o.Now, o.GeneratedAt = grant, now, time.Time{}
		r, set, err := recommend.RecommendGrants(ctx, store.DB(), o)
		if err != nil {
			return nil, fmt.Errorf("recommend: %w", err)
		}
		if r == nil && set != nil {
			r = set.Policies[grant]
		}
		if r == nil {
			return nil, nil
		}
		return r.Findings, nil
	}
}
