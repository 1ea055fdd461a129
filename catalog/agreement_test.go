package catalog

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// agreementThreshold is the share of the reviewed Proxmox categories the
// classifier must reproduce without overrides. It sits just under what the
// word lists achieve, so that a change that costs agreement fails here.
const agreementThreshold = 0.99

func loadProxmox(t *testing.T) (*Catalog, Overrides) {
	t.Helper()
	c, err := Parse(ProxmoxToolsJSON(), "proxmox-mcp.tools.json")
	require.NoError(t, err)
	path := filepath.Join("..", "testdata", "proxmox-mcp.risk-hints.json")
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	hints, err := LoadOverrides(data, path)
	require.NoError(t, err)
	return c, hints
}

// agreement classifies every tool and compares with the reviewed hints.
func agreement(t *testing.T, c *Catalog, hints, overrides Overrides) (float64, map[Category]map[Category]int, []string) {
	t.Helper()
	confusion := map[Category]map[Category]int{}
	var misses []string
	agree := 0
	for _, cl := range c.Classify(overrides) {
		want, ok := hints[cl.Tool]
		require.True(t, ok, "no reviewed category for %s", cl.Tool)
		if confusion[want.Category] == nil {
			confusion[want.Category] = map[Category]int{}
		}
		confusion[want.Category][cl.Category]++
		if cl.Category == want.Category {
			agree++
		} else {
			misses = append(misses, fmt.Sprintf("%s: reviewed %s, got %s by %s (%s)", cl.Tool, want.Category, cl.Category, cl.Source, cl.Why))
		}
	}
	return float64(agree) / float64(len(c.Tools)), confusion, misses
}

func confusionTable(m map[Category]map[Category]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-12s", "reviewed\\got")
	for _, g := range Categories() {
		fmt.Fprintf(&b, "%12s", g)
	}
	b.WriteString("\n")
	for _, w := range Categories() {
		fmt.Fprintf(&b, "%-12s", w)
		for _, g := range Categories() {
			fmt.Fprintf(&b, "%12d", m[w][g])
		}
		b.WriteString("\n")
	}
	return b.String()
}

func TestProxmoxAgreement(t *testing.T) {
	c, hints := loadProxmox(t)
	require.Len(t, c.Tools, 286)
	require.Len(t, hints, 286)

	got, confusion, misses := agreement(t, c, hints, nil)
	t.Logf("agreement without overrides: %.2f%% (%d/%d)", 100*got, len(c.Tools)-len(misses), len(c.Tools))
	t.Logf("confusion matrix (rows reviewed, columns classified):\n%s", confusionTable(confusion))
	slices.Sort(misses)
	for _, m := range misses {
		t.Log("miss:", m)
	}
	require.GreaterOrEqual(t, got, agreementThreshold)

	withHints, _, misses := agreement(t, c, hints, hints)
	require.Empty(t, misses)
	require.Equal(t, 1.0, withHints)
	for _, cl := range c.Classify(hints) {
		require.Equal(t, SourceOverride, cl.Source, cl.Tool)
	}
}
