package render

import (
	"strings"
	"unicode/utf8"

	"github.com/mattn/go-runewidth"
)

// TextWidth is the width terminal summaries fit in: the full detail of
// every line is in the Markdown and JSON outputs.
const TextWidth = 100

// Wrap breaks s at spaces into lines of at most width columns, the first
// starting at column start (after what the caller printed before it), every
// line after the first indented by indent. A word longer than a line stays
// whole (Fit cuts it later). s must hold no escape sequences.
func Wrap(s string, start, width int, indent string) string {
	var b strings.Builder
	col := start
	for i, word := range strings.Fields(s) {
		w := runewidth.StringWidth(word)
		switch {
		case i == 0:
		case col+1+w > width:
			b.WriteString("\n" + indent)
			col = runewidth.StringWidth(indent)
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += w
	}
	return b.String()
}

// Fit cuts every line of s that is wider than width columns to width−1
// columns and an ellipsis. ANSI escape sequences (the renderers' own
// colours; untrusted text was made inert by Terminal before) take no
// columns, and a colour cut off is reset.
func Fit(s string, width int) string {
	lines := strings.Split(s, "\n")
	for i, line := range lines {
		lines[i] = fitLine(line, width)
	}
	return strings.Join(lines, "\n")
}

func fitLine(line string, width int) string {
	if visibleWidth(line) <= width {
		return line
	}
	var b strings.Builder
	col, colored := 0, false
	for i := 0; i < len(line); {
		if n := escapeLen(line[i:]); n > 0 {
			seq := line[i : i+n]
			colored = seq != "\x1b[0m"
			b.WriteString(seq)
			i += n
			continue
		}
		r, size := utf8.DecodeRuneInString(line[i:])
		w := runewidth.RuneWidth(r)
		if col+w > width-1 {
			break
		}
		b.WriteString(line[i : i+size])
		col += w
		i += size
	}
	b.WriteString("…")
	if colored {
		b.WriteString("\x1b[0m")
	}
	return b.String()
}

// visibleWidth is the columns a line takes on a terminal.
func visibleWidth(line string) int {
	col := 0
	for i := 0; i < len(line); {
		if n := escapeLen(line[i:]); n > 0 {
			i += n
			continue
		}
		r, size := utf8.DecodeRuneInString(line[i:])
		col += runewidth.RuneWidth(r)
		i += size
	}
	return col
}

// escapeLen is the length of the SGR sequence (ESC [ … m) s starts with, or 0.
func escapeLen(s string) int {
	if len(s) < 3 || s[0] != '\x1b' || s[1] != '[' {
		return 0
	}
	for j := 2; j < len(s); j++ {
		switch c := s[j]; {
		case c == 'm':
			return j + 1
		case c == ';' || (c >= '0' && c <= '9'):
		default:
			return 0
		}
	}
	return 0
}
