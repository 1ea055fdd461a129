// Package mdcheck supports the tests of the Markdown renderers: a name that
// tries every way out of a document, and a check that every table kept its
// shape.
package mdcheck

import (
	"regexp"
	"strings"
)

// Hostile is a name that tries every way out of a Markdown table, an HTML
// page and a terminal: pipes and a newline starting a row of its own, raw
// HTML, a link, backticks, escape sequences and a right-to-left override.
const Hostile = "delete_vm</script><script>alert(1)</script>|x\n| pwned | [a](https://evil.example) `` \x1b[2J\x1b]0;t\x07 \u202egnp"

var cellSeparator = regexp.MustCompile(`(^|[^\\])\|`)

// BrokenRows returns the rows of md's tables whose number of cell
// separators (unescaped pipes) differs from their table's header row, and
// any line that starts a row from a name (a line starting with "| pwned").
func BrokenRows(md string) []string {
	var bad []string
	want := -1
	for _, line := range strings.Split(md, "\n") {
		if !strings.HasPrefix(line, "|") {
			want = -1
			continue
		}
		n := len(cellSeparator.FindAllString(line, -1))
		switch {
		case strings.HasPrefix(line, "| pwned"):
			bad = append(bad, line)
		case want < 0:
			want = n
		case n != want:
			bad = append(bad, line)
		}
	}
	return bad
}
