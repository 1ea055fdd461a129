package recommend_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mattn/go-runewidth"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/recommend"
)

// coreEvidence are, per kind, the numbers a finding's evidence.sql must
// reproduce (more columns are compared where both have them).
var coreEvidence = map[string][]string{
	recommend.KindUnusedTool:     {"last_called", "denied_attempts", "days_covered"},
	recommend.KindRiskyTool:      {"allowed_calls", "allowed_days", "sessions", "scope_sessions", "session_share"},
	recommend.KindPollingLoop:    {"loops", "sessions", "median_polls", "p95_polls", "median_interval_s", "interval_cv", "wasted_calls", "runaway_loops"},
	recommend.KindRateLimit:      {"p50", "p90", "p99", "max", "scopes", "sessions", "recommended"},
	recommend.KindRetryStorm:     {"storms", "calls", "sessions", "max_repeats", "first", "last"},
	recommend.KindDeniedProbe:    {"sessions", "bursts", "calls", "tools", "first", "last"},
	recommend.KindUnknownTool:    {"calls", "allowed", "refused", "sessions"},
	recommend.KindAllowCandidate: {"refused", "sessions", "agents", "first", "last"},
}

// TestEvidenceSQLReproducesTheNumbers runs every finding's evidence.sql
// through the sandbox that `mcptrail query --sql` uses and compares its one
// row with the finding's evidence, on scenarios that raise every kind.
func TestEvidenceSQLReproducesTheNumbers(t *testing.T) {
	seen := map[string]int{}
	check := func(t *testing.T, store *analytics.Store, r *recommend.Report) {
		for _, f := range r.Findings {
			sqlText, ok := f.Evidence["sql"].(string)
			require.True(t, ok, "%s has no evidence.sql", f.ID)
			cols, row := queryOne(t, store, sqlText)
			compared := map[string]bool{}
			for i, c := range cols {
				want, ok := f.Evidence[c]
				if !ok {
					continue
				}
				assertSame(t, want, row[i], fmt.Sprintf("%s: %s\n%s", f.ID, c, sqlText))
				compared[c] = true
			}
			for _, k := range coreEvidence[f.Kind] {
				if _, inEvidence := f.Evidence[k]; inEvidence {
					assert.True(t, compared[k], "%s: evidence.sql gives no %s", f.ID, k)
				}
			}
			if f.Kind == recommend.KindPollingLoop && f.Action.Limit != nil {
				for _, k := range []string{"p50", "p90", "p99", "max"} {
					assert.True(t, compared[k], "%s: evidence.sql gives no %s", f.ID, k)
				}
				if f.Evidence["runaway_loops"] != 0 {
					assert.True(t, compared["runaway_polls_refused"], f.ID)
				}
			}
			if f.Kind == recommend.KindLoosening {
				i := slices.Index(cols, "refused_then")
				require.GreaterOrEqual(t, i, 0)
				assert.LessOrEqual(t, toFloat(f.Evidence["newly_allowed"]), toFloat(row[i]), f.ID)
			}
			seen[f.Kind]++
		}
	}

	t.Run("loops", func(t *testing.T) {
		store := loadScenario(t, "loops", 1)
		r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "proxmox-mcp", Now: now,
			Params: recommend.DefaultParams(), Catalog: proxmoxCatalog(t)})
		require.NoError(t, err)
		check(t, store, r)
	})
	t.Run("tour, per grant", func(t *testing.T) {
		store := tourStore(t, 60000)
		for _, r := range tourSet(t, store).Reports() {
			check(t, store, r)
		}
	})
	t.Run("unknown tools and allow candidates", func(t *testing.T) {
		// A hostile name (quotes, newlines, escapes) is named exactly by the SQL.
		store := synthetic(t, map[string][]int{"list_vms": {1, 2, 3, 4, 5, 6}, "made_up_tool": {2, 3}, hostile: {1}, "it's": {4}})
		r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now,
			Params: recommend.DefaultParams(), Catalog: classes("list_vms", "get_vm_status")})
		require.NoError(t, err)
		check(t, store, r)
	})
	for _, kind := range []string{recommend.KindUnusedTool, recommend.KindRiskyTool, recommend.KindPollingLoop, recommend.KindRateLimit,
		recommend.KindRetryStorm, recommend.KindDeniedProbe, recommend.KindUnknownTool, recommend.KindLoosening} {
		assert.Positive(t, seen[kind], "no %s finding was checked", kind)
	}
}

// queryOne runs text as `mcptrail query --sql` does and returns its one row.
func queryOne(t *testing.T, store *analytics.Store, text string) ([]string, []any) {
	t.Helper()
	var cols []string
	var rows [][]any
	_, err := store.QueryLimited(context.Background(), text, nil, analytics.DefaultQueryLimits,
		func(c []analytics.Column) error {
			for _, col := range c {
				cols = append(cols, col.Name)
			}
			return nil
		},
		func(row []any) error {
			rows = append(rows, slices.Clone(row))
			return nil
		})
	require.NoError(t, err, text)
	require.Len(t, rows, 1, text)
	return cols, rows[0]
}

// assertSame compares an evidence value with the value SQL gave for it.
func assertSame(t *testing.T, want, got any, msg string) {
	t.Helper()
	switch w := want.(type) {
	case *time.Time:
		if w == nil {
			assert.Nil(t, got, msg)
			return
		}
		assertSame(t, *w, got, msg)
	case time.Time:
		g, ok := got.(time.Time)
		require.True(t, ok, msg)
		assert.True(t, w.Equal(g) || w.Equal(time.Date(g.Year(), g.Month(), g.Day(), g.Hour(), g.Minute(), g.Second(), g.Nanosecond(), time.UTC)),
			"%v vs %v: %s", w, g, fmt.Sprint(msg))
	case []string:
		var g []string
		list, ok := got.([]any)
		require.True(t, ok, msg)
		for _, v := range list {
			g = append(g, fmt.Sprint(v))
		}
		assert.Equal(t, w, g, msg)
	case string, bool:
		assert.Equal(t, fmt.Sprint(w), fmt.Sprint(got), msg)
	default:
		if got == nil {
			assert.Zero(t, toFloat(want), msg)
			return
		}
		assert.InDelta(t, toFloat(want), toFloat(got), 1e-9*math.Max(1, math.Abs(toFloat(want))), msg)
	}
}

func toFloat(v any) float64 {
	switch x := v.(type) {
	case int:
		return float64(x)
	case int32:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	case float64:
		return x
	case float32:
		return float64(x)
	}
	var f float64
	if _, err := fmt.Sscan(fmt.Sprint(v), &f); err != nil {
		panic(fmt.Sprintf("not a number: %T %v", v, v))
	}
	return f
}

// TestTextFitsOneHundredColumns checks every line of the terminal summary,
// for one grant and for a set of grants.
func TestTextFitsOneHundredColumns(t *testing.T) {
	set := tourSet(t, tourStore(t, 60000))
	text := recommend.SetText(set, false)
	long := 0
	for _, line := range strings.Split(text, "\n") {
		assert.LessOrEqual(t, runewidth.StringWidth(line), 100, "%q", line)
		if strings.HasSuffix(line, "…") {
			long++
		}
	}
	// Finding ids are never cut: suppress needs them whole.
	for _, r := range set.Reports() {
		for _, f := range r.Findings {
			if f.Kind != recommend.KindUnusedTool && f.Kind != recommend.KindRateLimit {
				assert.Contains(t, text, f.ID)
			}
		}
	}
	t.Logf("%d lines cut", long)
}

// TestOptionalGatesReadMissing: without a catalog or a current policy the
// gates say what is missing, and only a failed required gate reads FAIL.
func TestOptionalGatesReadMissing(t *testing.T) {
	store := synthetic(t, map[string][]int{"list_vms": {1, 2, 3}})
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now, Params: recommend.DefaultParams()})
	require.NoError(t, err)
	text := recommend.Text(r, false)
	assert.Regexp(t, `missing +catalog_present`, text)
	assert.Regexp(t, `missing +current_policy`, text)
	assert.Regexp(t, `FAIL +min_sessions`, text)
	assert.NotRegexp(t, `FAIL +(catalog_present|current_policy)`, text)
	md := recommend.Markdown(r)
	assert.Contains(t, md, "| catalog_present | missing |")
}

// TestUnusedSaysTheDaysCovered: a history younger than the window does not
// claim the window's days.
func TestUnusedSaysTheDaysCovered(t *testing.T) {
	store := synthetic(t, map[string][]int{"list_vms": {1, 2, 3}})
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now,
		Params: recommend.DefaultParams(), Catalog: classes("list_vms", "get_vm_status")})
	require.NoError(t, err)
	require.Less(t, r.Window.HistoryDays, r.Window.Days)
	f := findings(r, recommend.KindUnusedTool)["get_vm_status"]
	require.NotEmpty(t, f.ID)
	assert.Equal(t, r.Window.HistoryDays, f.Evidence["days_covered"])
	assert.Contains(t, f.Summary, fmt.Sprintf("not used in the last %d days of history (the window is %d days)", r.Window.HistoryDays, r.Window.Days))
	assert.NotContains(t, recommend.Text(r, false), fmt.Sprintf("Unused in %d days", r.Window.Days))
}

// tourSet is the README tour's recommendation: one per grant, with the
// Proxmox catalog.
func tourSet(t *testing.T, store *analytics.Store) *recommend.Set {
	t.Helper()
	cat := proxmoxCatalog(t)
	_, set, err := recommend.RecommendGrants(context.Background(), store.DB(), recommend.GrantsOptions{
		Server: "proxmox-mcp", Now: now, Params: recommend.DefaultParams(),
		Inputs: func(context.Context, string) (recommend.Options, error) {
			return recommend.Options{Catalog: cat}, nil
		}})
	require.NoError(t, err)
	require.NotNil(t, set, "the tour has several grants")
	return set
}
