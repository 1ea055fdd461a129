package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/policy"
	"github.com/mcptrail/mcptrail/recommend"
)

// Without --grant, a server whose calls carry grants gets one proposal per
// grant: --out writes <grant>/policy.json and policy.diff for each, and one
// PR.md (the markdown output) and recommendations.json for all. A grant is
// never allowed a tool it was only refused in the window, even when another
// grant uses it.
func TestRecommendPerGrantFolder(t *testing.T) {
	tmp, expand, env := loopsCase(t)
	out := filepath.Join(tmp, "pr")
	stdout, code, stderr := runCLI(t, tmp, env, []string{"recommend", "--server", "proxmox-mcp", "--format", "markdown",
		"--out", out, "--db", expand("$DB")})
	require.Zero(t, code, stderr)

	var files []string
	require.NoError(t, filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			rel, _ := filepath.Rel(out, p)
			files = append(files, rel)
		}
		return err
	}))
	sort.Strings(files)
	var want []string
	for _, g := range []string{"ci-runner", "helpdesk", "ops-bot", "readonly-dashboard"} {
		want = append(want, g+"/policy.diff", g+"/policy.json")
	}
	want = append(want, "PR.md", "recommendations.json")
	sort.Strings(want)
	assert.Equal(t, want, files)
	pr, err := os.ReadFile(filepath.Join(out, "PR.md"))
	require.NoError(t, err)
	// PR.md is the markdown output, then the latest backtest: the proposal
	// made a week ago, scored on the week since.
	require.True(t, strings.HasPrefix(string(pr), stdout), "PR.md starts with the markdown output")
	bt := strings.TrimPrefix(string(pr), stdout)
	assert.Contains(t, bt, "## Backtest of `proxmox-mcp` (all grants)")
	assert.Contains(t, bt, "| `ops-bot` |")
	assert.Contains(t, bt, "allowed, unused: `get_node_report`")

	doc, err := os.ReadFile(filepath.Join(out, "helpdesk", "policy.json"))
	require.NoError(t, err)
	help, err := policy.Parse(doc, "helpdesk/policy.json")
	require.NoError(t, err)
	ev := policy.NewEvaluator(help)
	// The helpdesk assistant's probe was refused; ops-bot calls vm_agent_exec.
	for _, tool := range []string{"vm_agent_exec", "create_user_token", "update_acl", "proxmox_api_raw", "vm_agent_set_password", "delete_storage_volume"} {
		assert.NotEqual(t, policy.Allowed, ev.Evaluate(policy.Call{Tool: tool, Grant: "helpdesk"}).Decision, tool)
	}
	doc, err = os.ReadFile(filepath.Join(out, "ops-bot", "policy.json"))
	require.NoError(t, err)
	ops, err := policy.Parse(doc, "ops-bot/policy.json")
	require.NoError(t, err)
	assert.Contains(t, ops.Tools, "vm_agent_exec", "the grant that uses it keeps it")
}

// loopsCase sets up, in a temporary folder, the database of the
// recommend/out-folder golden case: the loops scenario, several grants.
func loopsCase(t *testing.T) (tmp string, expand func(string) string, env []string) {
	t.Helper()
	tmp = t.TempDir()
	samples, err := filepath.Abs("../../testdata/samples")
	require.NoError(t, err)
	expand, env = setUpCase(t, "testdata/recommend/out-folder", tmp, samples)
	return tmp, expand, env
}

// TestRecommendPrintsNothingWhoseHistoryFailed: the output is rendered
// while the run's finding history commits, and written only once it has;
// when the history cannot be written (its transition log gone, the last
// table the transaction writes, after every report's history is set),
// recommend fails, naming it, and prints no recommendation nor writes the
// PR folder. With the table back it prints one, with the findings' history.
func TestRecommendPrintsNothingWhoseHistoryFailed(t *testing.T) {
	tmp, expand, env := loopsCase(t)
	db := expand("$DB")
	ddl := func(stmt string) {
		store, err := analytics.Open(context.Background(), db, analytics.Options{})
		require.NoError(t, err)
		_, err = store.DB().ExecContext(context.Background(), stmt)
		require.NoError(t, err)
		require.NoError(t, store.Close())
	}
	ddl(`ALTER TABLE finding_log RENAME TO finding_log_away`)
	out := filepath.Join(tmp, "pr")
	args := []string{"recommend", "--server", "proxmox-mcp", "--grant", "ops-bot", "--format", "json", "--out", out, "--db", db}
	stdout, code, stderr := runCLI(t, tmp, env, args)
	assert.Equal(t, 1, code, stderr)
	assert.Empty(t, stdout)
	assert.Contains(t, stderr, "finding history")
	assert.NoDirExists(t, out)

	ddl(`ALTER TABLE finding_log_away RENAME TO finding_log`)
	stdout, code, stderr = runCLI(t, tmp, env, args)
	require.Zero(t, code, stderr)
	var r recommend.Report
	require.NoError(t, json.Unmarshal([]byte(stdout), &r))
	require.NotEmpty(t, r.Findings)
	for _, f := range r.Findings {
		require.NotNil(t, f.History, f.ID)
		assert.Equal(t, recommend.StateOpen, f.History.State, f.ID)
	}
	assert.FileExists(t, filepath.Join(out, "policy.json"))
}
