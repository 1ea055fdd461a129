package audit

// A small single-pass JSON scanner over a string. Decoding into map[string]any
// (or through reflection) is the ingest bottleneck, so the decoders walk the
// top-level object once, remember where each value is, and take strings as
// substrings of the one copy of the line. The scanner accepts exactly what
// encoding/json accepts (json.Valid), including its nesting limit; the fuzz
// targets hold it to that.

import (
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth is encoding/json's nesting limit (scanner.go maxNestingDepth).
const maxDepth = 10000

// field is one member of a JSON object: its (unescaped) key and the span of
// its raw value in the source string.
type field struct {
	key    string
	vs, ve int  // value span: src[vs:ve]
	esc    bool // the value is a string with escapes
}

// kind returns the JSON type of the field's value by its first byte.
func (f field) kind(src string) byte { return src[f.vs] }

// syntaxError is a malformed_json rejection at a byte offset.
func syntaxError(off int, msg string) *Rejection {
	return reject(ReasonMalformedJSON, "invalid JSON at byte %d: %s", off, msg)
}

// strStop marks the bytes that end the fast path of a string scan.
var strStop = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanString validates the string starting at s[i] == '"' and returns the
// index after its closing quote and whether it holds escapes.
func scanString(s string, i int) (end int, esc bool, err error) {
	j := i + 1
	for {
		for j < len(s) && !strStop[s[j]] {
			j++
		}
		if j >= len(s) {
			return 0, false, syntaxError(i, "unterminated string")
		}
		switch c := s[j]; {
		case c == '"':
			return j + 1, esc, nil
		case c == '\\':
			esc = true
			if j+1 >= len(s) {
				return 0, false, syntaxError(j, "unterminated escape")
			}
			switch s[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(s) || !isHex(s[j+2]) || !isHex(s[j+3]) || !isHex(s[j+4]) || !isHex(s[j+5]) {
					return 0, false, syntaxError(j, `invalid \u escape`)
				}
				j += 6
			default:
				// The escape is not quoted: it may be inside an argument's
				// value, which no message may hold (SPEC §1).
				return 0, false, syntaxError(j, "invalid escape")
			}
		default:
			return 0, false, syntaxError(j, "control character in string (escape it)")
		}
	}
}

// scanNumber validates a JSON number starting at s[i].
func scanNumber(s string, i int) (int, error) {
	start := i
	if i < len(s) && s[i] == '-' {
		i++
	}
	switch {
	case i < len(s) && s[i] == '0':
		i++
	case i < len(s) && '1' <= s[i] && s[i] <= '9':
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
	default:
		return 0, syntaxError(start, "invalid number")
	}
	if i < len(s) && s[i] == '.' {
		i++
		d := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == d {
			return 0, syntaxError(start, "invalid number")
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		d := i
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		if i == d {
			return 0, syntaxError(start, "invalid number")
		}
	}
	return i, nil
}

func scanLiteral(s string, i int, lit string) (int, error) {
	if len(s)-i < len(lit) || s[i:i+len(lit)] != lit {
		return 0, syntaxError(i, "invalid literal")
	}
	return i + len(lit), nil
}

// scanValue validates the value starting at s[i] (after white space) at
// nesting depth depth (of the container holding it) and returns its end.
func scanValue(s string, i, depth int) (int, error) {
	if i >= len(s) {
		return 0, syntaxError(i, "unexpected end of input")
	}
	switch c := s[i]; {
	case c == '"':
		end, _, err := scanString(s, i)
		return end, err
	case c == '{':
		_, end, err := scanObject(s, i, depth+1, nil, false)
		return end, err
	case c == '[':
		return scanArray(s, i, depth+1)
	case c == 't':
		return scanLiteral(s, i, "true")
	case c == 'f':
		return scanLiteral(s, i, "false")
	case c == 'n':
		return scanLiteral(s, i, "null")
	case c == '-' || '0' <= c && c <= '9':
		return scanNumber(s, i)
	}
	return 0, syntaxError(i, "unexpected character") // not quoted, as an invalid escape
}

func scanArray(s string, i, depth int) (int, error) {
	if depth > maxDepth {
		return 0, syntaxError(i, "nested too deeply")
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == ']' {
		return i + 1, nil
	}
	for {
		end, err := scanValue(s, i, depth)
		if err != nil {
			return 0, err
		}
		i = skipSpace(s, end)
		if i >= len(s) {
			return 0, syntaxError(i, "unterminated array")
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case ']':
			return i + 1, nil
		default:
			return 0, syntaxError(i, "expected , or ] in array")
		}
	}
}

// scanObject validates the object starting at s[i] == '{' at nesting depth
// depth. With collect, it appends each member to dst (keys unescaped).
func scanObject(s string, i, depth int, dst []field, collect bool) ([]field, int, error) {
	if depth > maxDepth {
		return dst, 0, syntaxError(i, "nested too deeply")
	}
	i = skipSpace(s, i+1)
	if i < len(s) && s[i] == '}' {
		return dst, i + 1, nil
	}
	for {
		if i >= len(s) || s[i] != '"' {
			return dst, 0, syntaxError(i, "expected a string key in object")
		}
		kend, kesc, err := scanString(s, i)
		if err != nil {
			return dst, 0, err
		}
		ks, ke := i+1, kend-1
		i = skipSpace(s, kend)
		if i >= len(s) || s[i] != ':' {
			return dst, 0, syntaxError(i, "expected : after object key")
		}
		i = skipSpace(s, i+1)
		vs := i
		var vesc bool
		if i < len(s) && s[i] == '"' {
			i, vesc, err = scanString(s, i)
		} else {
			i, err = scanValue(s, i, depth)
		}
		if err != nil {
			return dst, 0, err
		}
		if collect {
			key := s[ks:ke]
			if kesc {
				key = unquote(key)
			}
			dst = append(dst, field{key: key, vs: vs, ve: i, esc: vesc})
		}
		i = skipSpace(s, i)
		if i >= len(s) {
			return dst, 0, syntaxError(i, "unterminated object")
		}
		switch s[i] {
		case ',':
			i = skipSpace(s, i+1)
		case '}':
			return dst, i + 1, nil
		default:
			return dst, 0, syntaxError(i, "expected , or } in object")
		}
	}
}

// parseTop validates s as exactly one JSON object (surrounding white space
// allowed) and returns its members.
func parseTop(s string, dst []field) ([]field, error) {
	i := skipSpace(s, 0)
	if i >= len(s) {
		return dst, reject(ReasonMalformedJSON, "empty input: expected a JSON object")
	}
	if s[i] != '{' {
		if _, err := scanValue(s, i, 0); err != nil {
			return dst, err
		}
		return dst, reject(ReasonMalformedJSON, "expected a JSON object, got %s", kindName(s[i]))
	}
	dst, end, err := scanObject(s, i, 1, dst, true)
	if err != nil {
		return dst, err
	}
	if end = skipSpace(s, end); end != len(s) {
		if _, err := scanValue(s, end, 0); err != nil {
			return dst, err
		}
		return dst, syntaxError(end, "more than one JSON value on the line")
	}
	return dst, nil
}

// members collects the members of an object value already validated by
// parseTop (so it cannot fail on depth).
func members(s string, f field, dst []field) []field {
	dst, _, _ = scanObject(s, f.vs, 1, dst, true)
	return dst
}

// kindName names the JSON type of a value by its first byte, for messages.
func kindName(c byte) string {
	switch c {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// unquote decodes the contents of a JSON string (between the quotes) that was
// validated by scanString, exactly as encoding/json does: a lone or invalid
// surrogate becomes U+FFFD.
func unquote(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			b = append(b, c)
			i++
			continue
		}
		switch s[i+1] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r := getu4(s[i:])
			i += 6
			if utf16.IsSurrogate(r) {
				if r1 := getu4(s[i:]); r1 >= 0 {
					if dec := utf16.DecodeRune(r, r1); dec != utf8.RuneError {
						b = utf8.AppendRune(b, dec)
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			b = utf8.AppendRune(b, r)
			continue
		default: // " \ /
			b = append(b, s[i+1])
		}
		i += 2
	}
	return string(b)
}

// getu4 decodes \uXXXX at the start of s, or returns -1.
func getu4(s string) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range []byte(s[2:6]) {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return -1
		}
		r = r*16 + rune(c)
	}
	return r
}

// stringValue returns the decoded value of a string field.
func stringValue(src string, f field) string {
	v := src[f.vs+1 : f.ve-1]
	if f.esc {
		return unquote(v)
	}
	return v
}
