package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
)

// writeHistoryEvents writes the calls of TestFindingsLifecycle: t_gone
// only on Nov 1 (out of a window that ends Dec 4), three tools on three
// days in between, and t_new only on Dec 2 (after a window that ends Nov 30).
func writeHistoryEvents(t *testing.T, path string) {
	t.Helper()
	var b strings.Builder
	n := 0
	add := func(tool, day string) {
		for i := range 3 {
			n++
			fmt.Fprintf(&b, `{"id":"h-%04d","ts":"2026-%sT10:00:%02dZ","server":"hist-mcp","tool":%q,"decision":"allowed","status":"ok","gateway":"gw","grant":"g1","agent":"a1","session":"s-%s","request_id":"%d","args":{}}`+"\n",
				n, day, i, tool, day, n)
		}
	}
	add("t_gone", "11-01")
	for _, day := range []string{"11-10", "11-12", "11-14"} {
		for _, tool := range []string{"t_kept", "t_muted", "t_taken"} {
			add(tool, day)
		}
	}
	add("t_new", "12-02")
	require.NoError(t, os.WriteFile(path, []byte(b.String()), 0o600))
}

// TestFindingsLifecycle records two runs of recommend on a DuckDB file:
// between them one finding leaves the window (resolved), one appears (new),
// one is suppressed (dismissed) and the current policy takes one's limit
// (accepted). The second run's text marks the new finding, the transitions
// are logged, and findings --state open lists the open ones.
func TestFindingsLifecycle(t *testing.T) {
	tmp := t.TempDir()
	db := filepath.Join(tmp, "mcptrail.duckdb")
	env := []string{"MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}
	cli := func(args ...string) string {
		t.Helper()
		out, code, errOut := runCLI(t, tmp, env, append(args, "--db", db))
		require.Zero(t, code, "%v: %s%s", args, out, errOut)
		return out
	}
	writeHistoryEvents(t, filepath.Join(tmp, "calls.jsonl"))
	cli("ingest", filepath.Join(tmp, "calls.jsonl"))

	out := cli("recommend", "--server", "hist-mcp", "--grant", "g1", "--now", "2026-11-30T00:00:00Z", "--format", "json")
	var run1 recommend.Report
	require.NoError(t, json.Unmarshal([]byte(out), &run1))
	require.Len(t, run1.Findings, 4)
	for _, f := range run1.Findings {
		require.NotNil(t, f.History, f.ID)
		assert.Equal(t, recommend.StateOpen, f.History.State, f.ID)
		assert.False(t, f.History.New, "the first run marks nothing new: %s", f.ID)
	}

	cli("suppress", "rate_limit:hist-mcp:g1:t_muted", "--reason", "known burst", "--until", "2027-01-15", "--now", "2026-12-01T00:00:00Z")
	policy := `{"version": "1", "default": "allow", "tools": {"t_taken": {"limits": [{"counter": "c", "window": "minute", "max": 5, "scope": "session"}]}}}`
	require.NoError(t, os.WriteFile(filepath.Join(tmp, "policy.json"), []byte(policy), 0o600))
	text := cli("recommend", "--server", "hist-mcp", "--grant", "g1", "--now", "2026-12-04T00:00:00Z", "--policy", filepath.Join(tmp, "policy.json"))
	assert.Contains(t, text, "1 new")
	assert.Regexp(t, `t_new .*\]  NEW\n`, text)
	assert.NotRegexp(t, `t_kept .*(NEW|CHANGED)`, text)

	var recs []analytics.FindingRecord
	require.NoError(t, json.Unmarshal([]byte(cli("findings", "--server", "hist-mcp", "--format", "json")), &recs))
	states := map[string]string{}
	for _, r := range recs {
		states[short(r.ID)] = r.State
	}
	assert.Equal(t, map[string]string{"t_gone": "resolved", "t_kept": "open", "t_muted": "dismissed", "t_taken": "accepted", "t_new": "open",
		"unused_tool:hist-mcp:g1:t_gone": "open"}, states, "t_gone, out of the window, is now unused")

	open := cli("findings", "--server", "hist-mcp", "--state", "open")
	assert.Contains(t, open, "rate_limit:hist-mcp:g1:t_kept")
	assert.Contains(t, open, "rate_limit:hist-mcp:g1:t_new")
	assert.NotContains(t, open, "rate_limit:hist-mcp:g1:t_gone")
	assert.NotContains(t, open, "t_muted")

	store, err := analytics.Open(context.Background(), db, analytics.Options{ReadOnly: true})
	require.NoError(t, err)
	defer store.Close()
	log, err := store.FindingLog(context.Background(), "hist-mcp")
	require.NoError(t, err)
	var moves []string
	for _, e := range log[4:] {
		moves = append(moves, short(e.FindingID)+":"+e.From+">"+e.To)
	}
	assert.ElementsMatch(t, []string{"unused_tool:hist-mcp:g1:t_gone:>open", "t_muted:open>dismissed", "t_taken:open>accepted", "t_new:>open", "t_gone:open>resolved"}, moves)
}

// short is a rate limit finding's id without its kind and scope.
func short(id string) string { return strings.TrimPrefix(id, "rate_limit:hist-mcp:g1:") }

// TestFindingsRecordedInDaemon: while the daemon holds the database, a
// recommend sent to it is recorded there, and findings reads it there.
func TestFindingsRecordedInDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a daemon")
	}
	tmp := t.TempDir()
	db := filepath.Join(tmp, "mcptrail.duckdb")
	samples, err := filepath.Abs("../../testdata/samples")
	require.NoError(t, err)
	env := []string{"MCPTRAIL_NOW=2026-11-30T00:00:00Z", "MCPTRAIL_HTTP_LISTEN=127.0.0.1:1"}
	_, code, errOut := runCLI(t, tmp, env, []string{"ingest", filepath.Join(samples, "native.jsonl"), "--db", db})
	require.Zero(t, code, errOut)
	env = append(env, "MCPTRAIL_HTTP_LISTEN="+startDaemon(t, tmp, db))

	_, code, errOut = runCLI(t, tmp, env, []string{"recommend", "--server", "proxmox-mcp", "--db", db})
	require.Zero(t, code, errOut)
	assert.NotContains(t, errOut, "not recorded")
	out, code, errOut := runCLI(t, tmp, env, []string{"findings", "--server", "proxmox-mcp", "--state", "open", "--db", db})
	require.Zero(t, code, errOut)
	assert.Contains(t, out, "risky_tool:proxmox-mcp:ops-bot:vm_agent_exec")
}
