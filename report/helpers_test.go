package report

import (
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/simulate"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixedNow is the end of the simulated traffic in these tests.
var fixedNow = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

const server = "proxmox-mcp"

const week = 7 * 24 * time.Hour

var (
	templateOnce sync.Once
	templateDir  string
	templateErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if templateDir != "" {
		_ = os.RemoveAll(templateDir)
	}
	os.Exit(code)
}

// proxmoxStore is a fresh copy of a database holding the "proxmox"
// scenario (seed 1, 14 days ending at fixedNow): generated once, copied
// per test.
func proxmoxStore(t testing.TB) *analytics.Store {
	t.Helper()
	templateOnce.Do(func() {
		templateDir, templateErr = os.MkdirTemp("", "mcptrail-report-test")
		if templateErr != nil {
			return
		}
		ctx := context.Background()
		s, err := analytics.Open(ctx, filepath.Join(templateDir, "proxmox.duckdb"), analytics.Options{})
		if err != nil {
			templateErr = err
			return
		}
		if templateErr = appendScenario(s, "proxmox", 1, fixedNow, 0); templateErr != nil {
			_ = s.Close()
			return
		}
		templateErr = s.Close()
	})
	require.NoError(t, templateErr)
	dst := filepath.Join(t.TempDir(), "r.duckdb")
	copyFile(t, filepath.Join(templateDir, "proxmox.duckdb"), dst)
	store, err := analytics.Open(context.Background(), dst, analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.Create(dst)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// emptyStore opens a fresh, empty database file.
func emptyStore(t testing.TB) *analytics.Store {
	t.Helper()
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "e.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// appendScenario stores a simulated scenario ending at now.
func appendScenario(store *analytics.Store, scenario string, seed int64, now time.Time, dur time.Duration) error {
	var batch []audit.Event
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := store.Append(context.Background(), ingest.Batch{Events: batch})
		batch = batch[:0]
		return err
	}
	_, err := simulate.Generate(context.Background(), simulate.Options{Scenario: scenario, Seed: seed, Now: now, Duration: dur},
		func(e audit.Event) error {
			batch = append(batch, e)
			if len(batch) == 20000 {
				return flush()
			}
			return nil
		})
	if err != nil {
		return err
	}
	return flush()
}

// appendEvents stores hand-made events.
func appendEvents(t testing.TB, store *analytics.Store, events ...audit.Event) {
	t.Helper()
	_, err := store.Append(context.Background(), ingest.Batch{Events: events})
	require.NoError(t, err)
}

// importCatalog records the Proxmox catalog at the given time.
func importCatalog(t testing.TB, store *analytics.Store, at time.Time) {
	t.Helper()
	c, err := catalog.Parse(catalog.ProxmoxToolsJSON(), "proxmox-mcp.tools.json")
	require.NoError(t, err)
	var recs []analytics.ToolRecord
	for _, cl := range c.Classify(nil) {
		recs = append(recs, analytics.ToolRecord{Server: server, Tool: cl.Tool, Category: string(cl.Category),
			Severity: string(cl.Severity), RiskSource: string(cl.Source), Why: cl.Why})
	}
	_, err = store.ImportCatalog(context.Background(), server, "proxmox-mcp.tools.json", at, recs)
	require.NoError(t, err)
}

// inputs selects the recommendation the way the CLI does, every grant with
// the same inputs (no current policy).
func inputs(t testing.TB, store *analytics.Store) recommend.GrantsOptions {
	t.Helper()
	opts := grantInputs(t, store)
	return recommend.GrantsOptions{Params: opts.Params,
		Inputs: func(context.Context, string) (recommend.Options, error) { return opts, nil }}
}

// grantInputs gathers the recommender's inputs the way the CLI does.
func grantInputs(t testing.TB, store *analytics.Store) recommend.Options {
	t.Helper()
	ctx := context.Background()
	tools, err := store.Tools(ctx, server)
	require.NoError(t, err)
	opts := recommend.Options{Params: recommend.DefaultParams()}
	for _, tl := range tools {
		opts.Catalog = append(opts.Catalog, catalog.Classification{Tool: tl.Tool, Category: catalog.Category(tl.Category),
			Severity: catalog.Severity(tl.Severity), Source: catalog.Source(tl.RiskSource), Why: tl.Why})
	}
	opts.Suppressions, err = store.Suppressions(ctx)
	require.NoError(t, err)
	return opts
}

// golden compares got with testdata/golden/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "no golden file: run go test ./report -run %s -update", t.Name())
	require.Equal(t, string(want), string(got), "golden file %s differs: rerun with -update and review the diff", path)
}
