package render

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTerminal(t *testing.T) {
	for in, want := range map[string]string{
		"get_vm_status":              "get_vm_status",
		"proxmox-mcp ünïcode ✓":      "proxmox-mcp ünïcode ✓",
		"x\x1b[2J\x1b]0;pwned\x07":   `x\x1b[2J\x1b]0;pwned\x07`,
		"a\tb\nc\rd\x00e\x7f":        `a\x09b\x0ac\x0dd\x00e\x7f`,
		"csi\u009b31m":               `csi\u009b31m`,
		"bad\x9b\xffbyte":            `bad\x9b\xffbyte`,
		"evil\u202egnp.exe":          `evil\u202egnp.exe`,
		"iso\u2066late\u2069 \u200d": `iso\u2066late\u2069 ` + "\u200d",
	} {
		assert.Equal(t, want, Terminal(in), "%q", in)
	}
}

func TestMarkdownText(t *testing.T) {
	for in, want := range map[string]string{
		"vm_agent_exec polled 3 times":            "vm_agent_exec polled 3 times",
		"a|b\nc\r\nd":                             `a\|b c  d`,
		"## heading":                              `\## heading`,
		"x</script><script>alert(1)</script>":     `x\</script\>\<script\>alert(1)\</script\>`,
		"[click](https://evil.example) `code` \\": `\[click\](https://evil.example) \` + "`" + `code\` + "`" + ` \\`,
		"esc\x1b[31m":                             `esc\\x1b\[31m`,
	} {
		assert.Equal(t, want, MarkdownText(in), "%q", in)
	}
}

func TestMarkdownCode(t *testing.T) {
	for _, tc := range []struct{ in, code, cell string }{
		{"get_vm_status", "`get_vm_status`", "`get_vm_status`"},
		{"", "``", "``"},
		{"a|b", "`a|b`", "`a\\|b`"},
		{"a`b", "``a`b``", "``a`b``"},
		{"`x``", "``` `x`` ```", "``` `x`` ```"},
		{" x ", "`  x  `", "`  x  `"},
		{"x\n| y |\n", "`x | y | `", "`x \\| y \\| `"},
		{"<b>[a](b)</b>", "`<b>[a](b)</b>`", "`<b>[a](b)</b>`"},
		{"\x1b[2J", "`\\x1b[2J`", "`\\x1b[2J`"},
	} {
		assert.Equal(t, tc.code, MarkdownCode(tc.in), "%q", tc.in)
		assert.Equal(t, tc.cell, MarkdownCodeCell(tc.in), "%q", tc.in)
	}
}

// TestTableEscapesControls: the table prints one line per row whatever a
// value holds; CSV and JSON keep values exact.
func TestTableEscapesControls(t *testing.T) {
	hostile := "evil\x1b[2J\nfake row\u202e"
	out := renderAll(t, Table, []string{"tool\x1b[1m", "calls"}, [][]any{{hostile, int64(1)}})
	assert.NotContains(t, out, "\x1b")
	assert.NotContains(t, out, "\u202e")
	assert.Len(t, strings.Split(strings.TrimSuffix(out, "\n"), "\n"), 3, out)
	assert.Contains(t, out, `evil\x1b[2J\x0afake row\u202e`)
	assert.Contains(t, renderAll(t, CSV, []string{"tool"}, [][]any{{hostile}}), hostile)
	assert.Contains(t, renderAll(t, JSON, []string{"tool"}, [][]any{{hostile}}), `evil\u001b[2J\nfake row`+"\u202e")
}

func TestMarkdownBlockCannotBeClosedFromInside(t *testing.T) {
	got := MarkdownBlock("sql", "SELECT 1\n```\n# not a heading\x1b[31m")
	assert.True(t, strings.HasPrefix(got, "````sql\n"), got)
	assert.True(t, strings.HasSuffix(got, "\n````\n"), got)
	assert.Contains(t, got, "\n```\n", "the inner fence is shorter than the block's")
	assert.NotContains(t, got, "\x1b")
}
