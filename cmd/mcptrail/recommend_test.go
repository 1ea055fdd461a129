package main

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/policy"
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
