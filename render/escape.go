package render

import (
	"strings"
	"unicode/utf8"
)

// Names in events (servers, tools, agents, sessions, grants, rules, reasons)
// are whatever a gateway sent. Printed as they are, they could move the
// cursor or recolour a terminal, reorder text with bidirectional controls,
// break out of a Markdown table or put raw HTML in a PR body. The functions
// here make any such value inert for where it is printed; CSV and JSON output
// stay exact (they are data formats).

// unsafeRune reports whether r is made visible by Terminal: a C0 control
// (tab and newline included: a cell or a line holds one value), DEL, a C1
// control, or a bidirectional embedding, override or isolate (U+202A–U+202E,
// U+2066–U+2069).
func unsafeRune(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

const hexDigits = "0123456789abcdef"

// appendEscape appends the visible escape of r: \xNN for an ASCII control
// or, with invalidByte, for a byte that is not valid UTF-8; \uNNNN for any
// other rune.
func appendEscape(b *strings.Builder, r rune, invalidByte bool) {
	if invalidByte || r < 0x80 {
		b.WriteString(`\x`)
		b.WriteByte(hexDigits[r>>4&0xf])
		b.WriteByte(hexDigits[r&0xf])
		return
	}
	b.WriteString(`\u`)
	for shift := 12; shift >= 0; shift -= 4 {
		b.WriteByte(hexDigits[r>>uint(shift)&0xf])
	}
}

// Terminal returns s safe to print on a terminal: each control character,
// bidirectional control (see unsafeRune) and byte that is not valid UTF-8
// becomes a visible escape: \x1b for ESC (and \xNN for any byte), \u202e
// for a rune. Everything else is kept.
func Terminal(s string) string {
	return escapeControls(s, false)
}

// escapeControls is Terminal; with spaces, tab, newline and carriage return
// become a space instead (Markdown keeps one value on one line).
func escapeControls(s string, spaces bool) string {
	clean := true
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if unsafeRune(r) || (r == utf8.RuneError && n == 1) {
			clean = false
			break
		}
		i += n
	}
	if clean {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			appendEscape(&b, rune(s[i]), true)
		case spaces && (r == '\t' || r == '\n' || r == '\r'):
			b.WriteByte(' ')
		case unsafeRune(r):
			appendEscape(&b, r, false)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// markdownSpecial are the characters MarkdownText escapes with a backslash:
// the backslash itself, a table's cell separator, code spans, links and
// images, and raw HTML (or autolinks).
var markdownSpecial = strings.NewReplacer(
	`\`, `\\`, "|", `\|`, "`", "\\`", "[", `\[`, "]", `\]`, "<", `\<`, ">", `\>`,
)

// MarkdownText returns s as Markdown text that stays one piece of plain text
// in a paragraph or a table cell: tab, newline and carriage return become a
// space, other control characters a visible escape (as Terminal), and
// \ | ` [ ] < > are escaped with a backslash, as is a leading #. Emphasis
// characters (* _ ~) are left alone: at worst they change the look.
func MarkdownText(s string) string {
	s = markdownSpecial.Replace(escapeControls(s, true))
	if strings.HasPrefix(s, "#") {
		s = `\` + s
	}
	return s
}

// MarkdownCode returns s as an inline code span for a paragraph or heading:
// controls as MarkdownText, fenced by one backtick more than the longest run
// of backticks in s (padded with a space where s starts or ends with one),
// so that nothing in s ends the span. Inside a span <, [ and # are literal.
// An empty s gives an empty pair of backticks.
func MarkdownCode(s string) string {
	s = escapeControls(s, true)
	fence := strings.Repeat("`", longestBackticks(s)+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") ||
		(len(s) > 1 && s[0] == ' ' && s[len(s)-1] == ' ' && strings.Trim(s, " ") != "") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// MarkdownCodeCell is MarkdownCode for a table cell: a | is escaped as \|,
// which GitHub-flavoured Markdown reads as | inside a code span in a table
// (and only there).
func MarkdownCodeCell(s string) string {
	return MarkdownCode(strings.ReplaceAll(s, "|", `\|`))
}

// MarkdownBlock returns s as a fenced code block in language lang: each
// line made safe as Terminal does, fenced by at least three backticks and
// one more than the longest run of backticks in s, so that no line of s
// closes the block.
func MarkdownBlock(lang, s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = escapeControls(l, false)
	}
	fence := strings.Repeat("`", max(3, longestBackticks(s)+1))
	return fence + lang + "\n" + strings.Join(lines, "\n") + "\n" + fence + "\n"
}

// longestBackticks is the length of the longest run of backticks in s.
func longestBackticks(s string) int {
	run, longest := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}
