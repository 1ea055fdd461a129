package recommend_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/internal/mdcheck"
	"github.com/mcptrail/mcptrail/recommend"
)

const hostile = mdcheck.Hostile

func TestRenderedNamesCannotBreakOut(t *testing.T) {
	store := synthetic(t, map[string][]int{"list_vms": {1, 2, 3}, hostile: {2}})
	id := recommend.FindingID(recommend.KindUnusedTool, "srv", "", "get_"+hostile)
	r, err := recommend.Recommend(context.Background(), store.DB(), recommend.Options{Server: "srv", Now: now,
		Params: recommend.DefaultParams(), Catalog: classes("list_vms", hostile, "get_"+hostile, "get_other"+hostile),
		Suppressions: []analytics.Suppression{{FindingID: id, Reason: "reason |\n| x", Owner: "<b>mallory</b>", Until: now.Add(24 * time.Hour)}}})
	require.NoError(t, err)
	require.NotEmpty(t, findings(r, recommend.KindRiskyTool), "the hostile tool is a finding in the changes table")

	md := recommend.Markdown(r)
	assert.Empty(t, mdcheck.BrokenRows(md))
	assert.NotContains(t, md, "\x1b")
	assert.NotContains(t, md, "\u202e")
	assert.Contains(t, md, `\<script\>alert(1)\</script\>`, "raw HTML in text is escaped")
	assert.Contains(t, md, `\[a\](https://evil.example)`, "no link is formed")
	assert.NotContains(t, md, "<b>mallory</b>")
	assert.Contains(t, md, "```delete_vm</script><script>alert(1)</script>\\|x \\| pwned \\| [a]", "a code span fenced past the name's backticks")

	for _, color := range []bool{false, true} {
		text := recommend.Text(r, color)
		for _, code := range []string{"\x1b[0m", "\x1b[1m", "\x1b[2m", "\x1b[1;31m", "\x1b[31m", "\x1b[33m", "\x1b[36m"} {
			text = strings.ReplaceAll(text, code, "") // the renderer's own colours
		}
		assert.NotContains(t, text, "\x1b", "color %v", color)
		assert.NotContains(t, text, "\u202e")
		assert.NotContains(t, text, "\n| pwned")
		assert.Contains(t, text, `</script>|x\x0a| pwned`)
	}
}
