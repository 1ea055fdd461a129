package main

import (
	"encoding/json"
	"fmt"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/recommend"
)

// baseline is what a previous recommendations.json found: severity by
// finding id, and for a loosening the kinds of its changes. CI that
// adopts --fail-on on a server with findings already accepted gates only on
// what is new or worse since: a loosening of the same tool that widens
// something else (another current rule, another proposed one) is new.
type baseline struct {
	file     string
	severity map[string]catalog.Severity
	widening map[string][]string // loosening id → recommend.WideningKinds
}

// parseBaseline reads a recommendations.json of server: the single-object
// shape, or one with a "policies" object of per-grant recommendations.
func parseBaseline(f *api.File, server string) (*baseline, error) {
	type findings struct {
		Server   string `json:"server"`
		Findings []struct {
			ID       string         `json:"id"`
			Kind     string         `json:"kind"`
			Severity string         `json:"severity"`
			Evidence map[string]any `json:"evidence"`
		} `json:"findings"`
	}
	var doc struct {
		findings
		Policies map[string]findings `json:"policies"`
	}
	if err := json.Unmarshal(f.Content, &doc); err != nil {
		return nil, usageErrorf("--baseline %s: not a recommendations.json (%v): pass the file recommend --out wrote, or --format json's output", f.Name, err)
	}
	if doc.Server == "" && doc.Findings == nil && doc.Policies == nil {
		return nil, usageErrorf("--baseline %s: no server or findings in it: pass the recommendations.json that recommend --out wrote", f.Name)
	}
	b := &baseline{file: f.Name, severity: map[string]catalog.Severity{}, widening: map[string][]string{}}
	parts := append([]findings{doc.findings}, mapValues(doc.Policies)...)
	for _, p := range parts {
		if p.Server != "" && p.Server != server {
			return nil, usageErrorf("--baseline %s is the recommendation of server %q, not %q: pass this server's recommendations.json", f.Name, p.Server, server)
		}
		for _, x := range p.Findings {
			sev, err := catalog.ParseSeverity(x.Severity)
			if err != nil {
				return nil, usageErrorf("--baseline %s: finding %s: %v", f.Name, x.ID, err)
			}
			b.severity[x.ID] = sev
			if x.Kind == recommend.KindLoosening {
				b.widening[x.ID] = recommend.WideningKinds(x.Evidence)
			}
		}
	}
	return b, nil
}

func mapValues[V any](m map[string]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// newOrWorse keeps the findings that the baseline lacks or rates lower,
// and the loosenings that widen in a way the baseline's did not (fewer ways
// than the baseline's is no news).
func (b *baseline) newOrWorse(findings []recommend.Finding) []recommend.Finding {
	if b == nil {
		return findings
	}
	var out []recommend.Finding
	for _, f := range findings {
		old, ok := b.severity[f.ID]
		changed := f.Kind == recommend.KindLoosening && !recommend.WideningCovered(recommend.WideningKinds(f.Evidence), b.widening[f.ID])
		if !ok || catalog.Severity(f.Severity).Rank() > old.Rank() || changed {
			out = append(out, f)
		}
	}
	return out
}

// describe says what --fail-on counted, for its message.
func (b *baseline) describe() string {
	if b == nil {
		return ""
	}
	return fmt.Sprintf(", new or worse than --baseline %s", b.file)
}
