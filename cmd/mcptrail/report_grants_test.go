package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/report"
)

// The report of a server whose calls carry grants recommends one policy per
// grant, exactly as `mcptrail recommend` does: the same loosenings and both
// sides of each grant's replay, and the same PR folder (<grant>/policy.json
// and policy.diff, one PR.md and recommendations.json).
func TestReportRecommendsPerGrant(t *testing.T) {
	tmp, expand, env := loopsCase(t)
	db := expand("$DB")

	// The current policy, recorded as the server-wide one: the grants that
	// were refused tools it allows get loosenings.
	recOut := filepath.Join(tmp, "recommend-pr")
	stdout, code, stderr := runCLI(t, tmp, env, []string{"recommend", "--server", "proxmox-mcp", "--policy", expand("$SAMPLES/../policies/proxmox-current.json"),
		"--format", "json", "--out", recOut, "--db", db})
	require.Zero(t, code, stderr)
	var set recommend.Set
	require.NoError(t, json.Unmarshal([]byte(stdout), &set))
	require.Greater(t, len(set.Grants), 1, "the loops scenario has several grants")

	stdout, code, stderr = runCLI(t, tmp, env, []string{"report", "--server", "proxmox-mcp", "--since", "30d", "--format", "json", "--db", db})
	require.Zero(t, code, stderr)
	rep, err := report.ParseJSON([]byte(stdout))
	require.NoError(t, err)
	rec := rep.Recommendation
	require.Len(t, rec.Grants, len(set.Grants))

	widen := 0
	for i, g := range rec.Grants {
		want := set.Policies[set.Grants[i]]
		require.Equal(t, set.Grants[i], g.Grant)
		assert.Equal(t, want.Replay.Changed, g.Replay.Changed, "%s: allowed then, refused now", g.Grant)
		assert.Equal(t, want.Replay.NewlyAllowed, g.Replay.NewlyAllowed, "%s: refused then, allowed now", g.Grant)
		assert.Equal(t, want.Replay.ReplayTotals, g.Replay, g.Grant)
		assert.Equal(t, want.Confidence, g.Confidence, g.Grant)
		var loose []string
		for _, f := range want.Findings {
			if f.Kind == recommend.KindLoosening && f.Suppressed == nil {
				loose = append(loose, f.ID)
			}
		}
		var got []string
		for _, l := range g.Loosenings {
			got = append(got, l.ID)
		}
		assert.Equal(t, loose, got, "%s: the same loosenings", g.Grant)
		assert.Equal(t, len(loose), g.Counts.Widen, g.Grant)
		widen += len(loose)
		assert.Len(t, g.RuleChanges, len(want.RuleChanges), g.Grant)
	}
	require.Positive(t, widen, "the server-wide policy widens some grant's access")
	assert.Equal(t, widen, rec.Counts.Widen, "the summary counts every grant's loosenings")
	ids := map[string]bool{}
	for _, f := range rec.Findings {
		ids[f.ID] = true
	}
	for _, g := range set.Grants {
		for _, f := range set.Policies[g].Findings {
			assert.True(t, ids[f.ID], "%s is in the report's findings", f.ID)
		}
	}

	// The Markdown report says so, loudly, per grant.
	md, code, stderr := runCLI(t, tmp, env, []string{"report", "--server", "proxmox-mcp", "--since", "30d", "--db", db})
	require.Zero(t, code, stderr)
	assert.Contains(t, md, "⚠️ **The proposals widen access for ")
	for _, g := range rec.Grants {
		assert.Contains(t, md, "### Grant `"+g.Grant+"`")
		if g.Counts.Widen > 0 {
			assert.Contains(t, md, "**⚠️ Access widened for ")
		}
	}

	// The report's PR folder is the one `recommend --out` writes.
	_, code, stderr = runCLI(t, tmp, env, []string{"report", "--server", "proxmox-mcp", "--since", "30d", "--format", "json", "--out", filepath.Join(tmp, "reports"), "--db", db})
	require.Zero(t, code, stderr)
	prs, err := filepath.Glob(filepath.Join(tmp, "reports", "proxmox-mcp", "*", report.PRDir))
	require.NoError(t, err)
	require.Len(t, prs, 1)
	want, got := folderFiles(t, recOut), folderFiles(t, prs[0])
	var names []string
	for name := range got {
		names = append(names, name)
	}
	sort.Strings(names)
	var wantNames []string
	for _, g := range set.Grants {
		wantNames = append(wantNames, g+"/policy.diff", g+"/policy.json")
	}
	wantNames = append(wantNames, "PR.md", "recommendations.json")
	sort.Strings(wantNames)
	assert.Equal(t, wantNames, names, "one folder per grant")
	for name, data := range want {
		if name == "PR.md" {
			// recommend --out ends PR.md with the latest backtest; the
			// report carries its own backtest section instead.
			rest, ok := strings.CutPrefix(string(data), string(got[name]))
			assert.True(t, ok, "PR.md is recommend --out's, up to its backtest")
			assert.True(t, strings.HasPrefix(rest, "\n## Backtest"), "recommend --out's PR.md ends with the backtest")
			continue
		}
		assert.Equal(t, data, got[name], "%s is the same as recommend --out's", name)
	}
}

// folderFiles reads every file under dir, by its slash-separated path.
func folderFiles(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		out[strings.ReplaceAll(rel, string(filepath.Separator), "/")] = string(data)
		return err
	}))
	return out
}
