package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `replay --grant G` knows the policy recorded for G: the calls its gateway
// refused by a conditional rule, with no argument values stored, are refused
// again by the same rule, not counted as newly allowed; without --grant the
// recorded rules could name any grant's policy, and the replay cannot tell.
// recommend, which replays its proposal against the grant's current policy,
// reports no loosening for the rule it keeps.
func TestReplayKnowsTheGrantsRecordedPolicy(t *testing.T) {
	tmp := t.TempDir()
	env := []string{"MCPTRAIL_NOW=2026-11-30T00:00:00Z", "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}
	db := filepath.Join(tmp, "m.duckdb")
	var lines []string
	for i := range 5 {
		decision, rule := "allowed", ""
		if i < 3 {
			decision, rule = "denied", `,"rule":"/tools/refund/deny_if/0"`
		}
		lines = append(lines, fmt.Sprintf(`{"id":"e%d","ts":"2026-11-29T10:00:0%dZ","server":"srv","tool":"refund","decision":%q,"grant":"g","session":"s%d","args":{"amount":%d}%s}`,
			i, i, decision, i, 1000*(i+1), rule))
	}
	events := filepath.Join(tmp, "events.jsonl")
	require.NoError(t, os.WriteFile(events, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	pol := filepath.Join(tmp, "policy.json")
	require.NoError(t, os.WriteFile(pol, []byte(`{"version":"1","default":"deny","tools":{"refund":{
		"deny_if":[{"conditions":[{"path":"args.amount","op":"lte","value":3000}],"on_deny":"no"}]}}}`), 0o600))

	out, code, errOut := runCLI(t, tmp, env, []string{"ingest", events, "--db", db})
	require.Zero(t, code, "%s%s", out, errOut)
	// recommend --policy records the grant's current policy.
	out, code, errOut = runCLI(t, tmp, env, []string{"recommend", "--server", "srv", "--grant", "g", "--policy", pol, "--db", db})
	require.Zero(t, code, "%s%s", out, errOut)

	newly := func(args ...string) int64 {
		out, code, errOut := runCLI(t, tmp, env, append([]string{"replay", "--server", "srv", "--policy", pol, "--since", "7d",
			"--format", "json", "--db", db}, args...))
		require.Zero(t, code, "%s%s", out, errOut)
		var r struct {
			Replay struct {
				NewlyAllowed int64 `json:"newly_allowed"`
				Denied       int64 `json:"denied"`
			} `json:"replay"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		return r.Replay.NewlyAllowed
	}
	assert.Zero(t, newly("--grant", "g"), "the recorded policy refused them by the same conditions")
	assert.Equal(t, int64(3), newly(), "without --grant the replay cannot tell")

	// Nor does recommend report the rule it keeps as a widening.
	out, code, errOut = runCLI(t, tmp, env, []string{"recommend", "--server", "srv", "--grant", "g", "--fail-on", "widen",
		"--format", "json", "--db", db})
	assert.Zero(t, code, "%s%s", out, errOut)
	assert.NotContains(t, out, `"loosening"`)
}
