package report

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/mdcheck"
	"github.com/mcptrail/mcptrail/recommend"
)

const hostileTool = mdcheck.Hostile

// hostileEvents are calls of server to list_vms and to hostileTool by an
// agent named to break out too.
func hostileEvents(server string) []audit.Event {
	var events []audit.Event
	for i := range 40 {
		tool := hostileTool
		if i%2 == 0 {
			tool = "list_vms"
		}
		events = append(events, audit.Event{ID: fmt.Sprintf("h%d", i), TS: fixedNow.Add(-time.Duration(i+1) * time.Hour),
			Server: server, Tool: tool, Method: audit.DefaultMethod, Decision: audit.Allowed, Status: "ok",
			Agent: "<img src=x onerror=alert(1)>|\n| a", Session: fmt.Sprintf("s%d", i%5)})
	}
	return events
}

func runHostile(t *testing.T, server, out string) *Result {
	t.Helper()
	store := emptyStore(t)
	appendEvents(t, store, hostileEvents(server)...)
	res, err := Run(context.Background(), store, RunOptions{Options: Options{Server: server, Window: week, Now: fixedNow, GeneratedAt: fixedNow,
		Recommend: recommend.GrantsOptions{Params: recommend.DefaultParams()}}, OutDir: out, Formats: Formats})
	require.NoError(t, err)
	return res
}

// TestHostileNamesStayInert: tools, agents and a server named to break out
// of a Markdown table, an HTML page or a terminal stay inert in the
// Markdown report, the PR body and the HTML page with its inline SVG charts.
func TestHostileNamesStayInert(t *testing.T) {
	res := runHostile(t, "srv|<b>x</b>", t.TempDir())
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(res.Dir, name))
		require.NoError(t, err)
		return string(b)
	}
	for _, name := range []string{MarkdownFile, filepath.Join(PRDir, "PR.md")} {
		md := read(name)
		assert.Empty(t, mdcheck.BrokenRows(md), name)
		assert.NotContains(t, md, "\x1b", name)
		assert.NotContains(t, md, "\u202e", name)
		assert.Equal(t, strings.Count(md, "`<img"), strings.Count(md, "<img"), "%s: raw HTML only inside code spans", name)
		// Code spans, and SQL string literals inside fenced evidence blocks.
		assert.Equal(t, strings.Count(md, "`srv|<b>x")+strings.Count(md, "`mcptrail recommend --server srv|<b>x")+strings.Count(md, "server = 'srv|<b>x"),
			strings.Count(md, "<b>x"), "%s: the server only inside code", name)
	}
	assert.Contains(t, read(MarkdownFile), "# mcptrail report: `srv|<b>x</b>`")

	page := read(HTMLFile)
	assert.NotContains(t, page, "\x1b", "no control character in the page (nor in XML, where it is invalid)")
	assert.NotContains(t, page, "\u202e")
	assert.NotContains(t, page, "<script")
	assert.NotContains(t, page, "<img")
	assert.NotContains(t, page, "<b>x")
	assert.Contains(t, page, "delete_vm&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;")
	for _, f := range res.Files {
		if strings.HasSuffix(f, ".svg") {
			assert.NotContains(t, read(f), "<script", f)
			assert.NotContains(t, read(f), "\x1b", f)
		}
	}
}

// TestServerFolderStaysInside: a database that already holds a server named
// ".." (stored before decoding refused such names): report --out DIR writes
// inside DIR, and every server name is one folder of its own.
func TestServerFolderStaysInside(t *testing.T) {
	base := t.TempDir()
	out := filepath.Join(base, "out")
	res := runHostile(t, "..", out)
	assert.Equal(t, filepath.Join(out, "%2E.", Stamp(fixedNow)), res.Dir)
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	require.Len(t, entries, 1, "nothing is written beside DIR")
	assert.FileExists(t, filepath.Join(res.Dir, JSONFile))
	assert.FileExists(t, filepath.Join(res.Dir, PRDir, "PR.md"))

	for name, folder := range map[string]string{
		"proxmox-mcp": "proxmox-mcp", "github.com": "github.com", ".": "%2E", "..": "%2E.", ".hidden": "%2Ehidden",
		"../../etc": "%2E.%2F..%2Fetc", `a\b`: "a%5Cb", "a/b": "a%2Fb", "a_b": "a_b", "a%2Fb": "a%252Fb", "a b": "a%20b", "": "%",
	} {
		assert.Equal(t, folder, serverFolder(name), "%q", name)
		dir := ServerDir(out, name)
		assert.Equal(t, out, filepath.Dir(dir), "%q", name)
	}
}

// TestScheduleDefaultFolderStaysInside: a report named ".." writes under
// ./mcptrail-reports, not beside it.
func TestScheduleDefaultFolderStaysInside(t *testing.T) {
	s, err := ParseSchedules([]map[string]any{{"name": "..", "schedule": "@daily"}, {"name": ".x/y", "schedule": "@daily"}})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join("mcptrail-reports", "_."), s[0].OutDir)
	assert.Equal(t, filepath.Join("mcptrail-reports", "_x_y"), s[1].OutDir)
}

// TestHostileGrantStaysInert: a grant named to break out of a Markdown
// table, an HTML attribute or a folder stays inert in the per-grant
// recommendation, and its PR folder is one folder inside pr/.
func TestHostileGrantStaysInert(t *testing.T) {
	const grant = "../<img src=x onerror=alert(1)>|\n| `g`\x1b[31m"
	store := emptyStore(t)
	events := hostileEvents("srv")
	for i := range events {
		events[i].Grant = "ops"
		if i%4 < 2 {
			events[i].Grant = grant
		}
		if i%8 == 0 { // refused calls the proposal allows: a widening, named by grant
			events[i].Decision, events[i].Status = audit.Denied, ""
		}
	}
	appendEvents(t, store, events...)
	out := t.TempDir()
	res, err := Run(context.Background(), store, RunOptions{Options: Options{Server: "srv", Window: week, Now: fixedNow, GeneratedAt: fixedNow,
		Recommend: recommend.GrantsOptions{Params: recommend.DefaultParams()}}, OutDir: out, Formats: Formats})
	require.NoError(t, err)
	require.Len(t, res.Report.Recommendation.Grants, 2)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(res.Dir, name))
		require.NoError(t, err)
		return string(b)
	}
	md := read(MarkdownFile)
	assert.Empty(t, mdcheck.BrokenRows(md))
	assert.NotContains(t, md, "\x1b")
	assert.Equal(t, strings.Count(md, "`<img")+strings.Count(md, "``../<img"), strings.Count(md, "<img"), "raw HTML only inside code spans")
	assert.Contains(t, md, "### Grant ")
	assert.Contains(t, md, "The proposals widen access")
	page := read(HTMLFile)
	assert.NotContains(t, page, "<img")
	assert.NotContains(t, page, "\x1b")
	assert.Contains(t, page, `data-grant="../&lt;img src=x onerror=alert(1)&gt;|`)
	seg := recommend.PathSegment(grant)
	assert.NotContains(t, seg, "/")
	assert.FileExists(t, filepath.Join(res.Dir, PRDir, seg, "policy.json"))
	assert.FileExists(t, filepath.Join(res.Dir, PRDir, "ops", "policy.json"))
	for _, g := range res.Report.Recommendation.Grants {
		assert.Equal(t, PRDir+"/"+recommend.PathSegment(g.Grant), g.PRFolder)
	}
	entries, err := os.ReadDir(filepath.Join(res.Dir, PRDir))
	require.NoError(t, err)
	assert.Len(t, entries, 4, "two grant folders, PR.md and recommendations.json")
}
