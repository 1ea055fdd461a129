package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// overrides loads recommend.overrides, when set: the client's file as it
// sent it, or the file named in the configuration.
func (a *app) overrides() (catalog.Overrides, error) {
	doc := a.overridesDoc
	if doc == nil && a.cfg.Recommend.Overrides != "" {
		data, err := os.ReadFile(a.cfg.Recommend.Overrides)
		if err != nil {
			return nil, fmt.Errorf("recommend.overrides: %w", err)
		}
		doc = &api.File{Name: a.cfg.Recommend.Overrides, Content: data}
	}
	if doc == nil {
		return nil, nil
	}
	o, err := catalog.LoadOverrides(doc.Content, doc.Name)
	if err != nil {
		return nil, fmt.Errorf("recommend.overrides: %w", err)
	}
	return o, nil
}

// importCatalogData imports a tools/list document named file.
func (a *app) importCatalogData(ctx context.Context, store *analytics.Store, data []byte, file, server string) (string, int, int, error) {
	cat, err := catalog.Parse(data, file)
	if err != nil {
		return "", 0, 0, err
	}
	fromFlag := server != ""
	if server == "" {
		server = cat.Server
	}
	if server == "" {
		return "", 0, 0, usageErrorf("%s names no server: pass --server NAME", file)
	}
	if why := audit.BadServerName(server); why != "" {
		// The server names what is stored and printed: held to the rules
		// of an event's server (no control characters, no path
		// separators).
		if fromFlag {
			return "", 0, 0, usageErrorf("--server %q: %s", server, why)
		}
		return "", 0, 0, usageErrorf("%s names the server %q: %s: pass --server NAME", file, server, why)
	}
	ov, err := a.overrides()
	if err != nil {
		return "", 0, 0, err
	}
	if unknown := ov.UnknownTools(cat); len(unknown) > 0 {
		a.log.Warn("overrides name tools the catalog does not have", "tools", unknown)
	}
	recs := make([]analytics.ToolRecord, 0, len(cat.Tools))
	for _, t := range cat.Tools {
		c := catalog.Classify(t, ov)
		var ann json.RawMessage
		if t.Annotations != nil {
			ann, _ = json.Marshal(t.Annotations)
		}
		recs = append(recs, analytics.ToolRecord{Server: server, Tool: t.Name, Description: t.Description,
			Annotations: ann, InputSchema: t.InputSchema, Category: string(c.Category), Severity: string(c.Severity),
			RiskSource: string(c.Source), Why: c.Why})
	}
	added, err := store.ImportCatalog(ctx, server, file, a.now, recs)
	return server, len(recs), added, err
}

// givenPolicy is a policy given to this run (--policy), recorded for its
// scope (a grant, or "" for the server-wide policy): the current policy of
// that scope for the run whatever the recorded order (with --now pinned
// earlier than an earlier run's, its record sorts before that run's), with
// the one in force before it as its previous.
type givenPolicy struct {
	grant    string
	policy   *policy.Policy
	previous *policy.Policy
}

// recordGivenPolicy imports --catalog and --policy files for server (and
// grant), so that later runs know when each tool appeared, and returns the
// policy given, nil without one.
func (a *app) recordGivenPolicy(ctx context.Context, store *analytics.Store, server, grant string, catalogFile, policyFile *api.File) (*givenPolicy, error) {
	if catalogFile != nil {
		if _, _, _, err := a.importCatalogData(ctx, store, catalogFile.Content, catalogFile.Name, server); err != nil {
			return nil, err
		}
	}
	if policyFile == nil {
		return nil, nil
	}
	p, err := policy.Parse(policyFile.Content, policyFile.Name)
	if err != nil {
		return nil, err
	}
	doc, err := p.Canonical()
	if err != nil {
		return nil, err
	}
	before, err := scopePolicies(ctx, store, server, grant)
	if err != nil {
		return nil, err
	}
	inserted, err := store.ImportPolicy(ctx, analytics.PolicyRecord{Server: server, Grant: grant, Source: policyFile.Name, ImportedAt: a.now, Document: doc})
	if err != nil {
		return nil, err
	}
	previous := before.current
	if !inserted {
		// The same as the scope's latest (CI gives the same file every
		// run): that record is the current one, and its previous stays.
		previous = before.previous
	}
	return &givenPolicy{grant: grant, policy: p, previous: previous}, nil
}

// apply makes g the current policy of grant's recorded policies sp when g
// was given for that grant, or server-wide and grant has none of its own.
func (g *givenPolicy) apply(grant string, sp *recordedPolicies) {
	switch {
	case g == nil:
		return
	case g.grant == grant:
	case g.grant == "" && sp.serverWide:
	default:
		return
	}
	sp.current, sp.previous = g.policy, g.previous
}

// recommendInputs gathers the catalog, current policy and suppressions for a
// server and grant; given, when this run was given a policy (--policy,
// recordGivenPolicy), is the current policy of the scope it was given for.
func (a *app) recommendInputs(ctx context.Context, store *analytics.Store, server, grant string, given *givenPolicy) (recommend.Options, error) {
	opts := recommend.Options{Server: server, Grant: grant, Now: a.now}
	tools, err := store.Tools(ctx, server)
	if err != nil {
		return opts, err
	}
	sp, err := scopePolicies(ctx, store, server, grant)
	if err != nil {
		return opts, err
	}
	given.apply(grant, &sp)
	opts.Current, opts.Previous, opts.CurrentServerWide = sp.current, sp.previous, sp.serverWide
	for _, t := range tools {
		opts.Catalog = append(opts.Catalog, catalog.Classification{Tool: t.Tool, Category: catalog.Category(t.Category),
			Severity: catalog.Severity(t.Severity), Source: catalog.Source(t.RiskSource), Why: t.Why})
	}
	opts.ToolAdded = toolAdded(tools, sp.history)
	if opts.Suppressions, err = store.Suppressions(ctx); err != nil {
		return opts, err
	}
	if opts.SuppressionLog, err = store.SuppressionLog(ctx, opts.Server, a.now.Add(-a.cfg.Recommend.Window)); err != nil {
		return opts, err
	}
	return opts, nil
}

// toolAdded maps each tool to when a catalog or policy import first listed
// it. Tools of the server's first import get no entry: the first import
// gives no grace (there is nothing to compare with).
func toolAdded(tools []analytics.ToolRecord, history []analytics.PolicyRecord) map[string]time.Time {
	first := map[string]time.Time{}
	note := func(tool string, at time.Time) {
		if t, ok := first[tool]; !ok || at.Before(t) {
			first[tool] = at
		}
	}
	for _, t := range tools {
		note(t.Tool, t.FirstSeen)
	}
	for _, h := range history {
		var doc struct {
			Tools map[string]json.RawMessage `json:"tools"`
			Hide  []string                   `json:"hide"`
		}
		if json.Unmarshal(h.Document, &doc) != nil {
			continue
		}
		for t := range doc.Tools {
			note(t, h.ImportedAt)
		}
		for _, t := range doc.Hide {
			note(t, h.ImportedAt)
		}
	}
	var origin time.Time
	for _, at := range first {
		if origin.IsZero() || at.Before(origin) {
			origin = at
		}
	}
	out := map[string]time.Time{}
	for tool, at := range first {
		if at.After(origin) {
			out[tool] = at
		}
	}
	return out
}

// recordedPolicies are a scope's recorded policies: its own, else (for a
// grant without any) the server-wide ones.
type recordedPolicies struct {
	history    []analytics.PolicyRecord
	current    *policy.Policy // the latest, nil when none is recorded
	previous   *policy.Policy // the one before it (for a grant's first own, the server-wide one then in force): a regression's revert restores its rule
	serverWide bool           // a grant's current policy is the server-wide one
}

// scopePolicies reads the recorded policies that apply to server and grant.
func scopePolicies(ctx context.Context, store *analytics.Store, server, grant string) (recordedPolicies, error) {
	var sp recordedPolicies
	history, err := store.PolicyHistory(ctx, server, grant)
	if err != nil {
		return sp, err
	}
	if len(history) == 0 && grant != "" {
		if history, err = store.PolicyHistory(ctx, server, ""); err != nil {
			return sp, err
		}
		sp.serverWide = len(history) > 0
	}
	sp.history = history
	if len(history) > 0 {
		latest := history[len(history)-1]
		if sp.current, err = policy.Parse(latest.Document, "recorded policy of "+server); err != nil {
			return sp, err
		}
	}
	switch {
	case len(history) > 1:
		before := history[len(history)-2]
		if sp.previous, err = policy.Parse(before.Document, "earlier recorded policy of "+server); err != nil {
			return sp, err
		}
	case len(history) == 1 && grant != "" && !sp.serverWide:
		// A grant's first own policy followed the server-wide one in
		// force for it then: a regression's revert restores that rule.
		wide, err := store.PolicyHistory(ctx, server, "")
		if err != nil {
			return sp, err
		}
		var before *analytics.PolicyRecord
		for i := range wide {
			if !wide[i].ImportedAt.After(history[0].ImportedAt) {
				before = &wide[i]
			}
		}
		if before != nil {
			if sp.previous, err = policy.Parse(before.Document, "server-wide policy of "+server+" before the grant's own"); err != nil {
				return sp, err
			}
		}
	}
	return sp, nil
}
