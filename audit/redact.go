package audit

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"unicode/utf8"
)

// Redacted replaces every argument value in a dead letter kept without
// arguments (ingest.store_args false): the keys stay, the values go.
const Redacted = "[redacted]"

// argumentKeys are the members whose values are tool arguments, at any depth
// of a payload: "args" of the v1 event (and so of CloudEvents data), and
// "arguments", MCP's own name (params.arguments), under which a gateway of
// another shape would carry them. The accepted formats keep arguments
// nowhere else: Intercept and docker/mcp-gateway log no argument values.
var argumentKeys = map[string]bool{"args": true, "arguments": true}

// RedactArgs returns payload with the value of every argument member (see
// argumentKeys) replaced: each scalar inside it by the string Redacted,
// objects keeping their keys and arrays their length. The rest of the
// payload keeps its bytes. A CloudEvents data member that is a string or
// data_base64 holding a JSON object is redacted inside and encoded back;
// one holding anything else is Redacted whole. A payload that is not an
// object keeps no value at all (RedactValues).
// ok is false when payload is not one valid UTF-8 JSON value: then nothing
// can be kept but a hash (see PayloadDigest).
func RedactArgs(payload []byte) (redacted []byte, ok bool) {
	s, i, ok := oneValue(payload)
	if !ok {
		return nil, false
	}
	if s[i] != '{' {
		// Not an object, so of no format: a line of an event printed over
		// several lines, or a value sent alone, may be an argument itself.
		red, _ := redactValue(nil, s, i)
		return red, true
	}
	r := redactor{src: s}
	r.walk(i, 0)
	if len(r.out) == 0 && r.last == 0 {
		return payload, true
	}
	return append(r.out, s[r.last:]...), true
}

// RedactValues returns payload with every scalar value replaced by the
// string Redacted, objects keeping their keys and arrays their length: for
// a payload of no known format, whose arguments could be anywhere. ok is
// false when payload is not one valid UTF-8 JSON value.
func RedactValues(payload []byte) (redacted []byte, ok bool) {
	s, i, ok := oneValue(payload)
	if !ok {
		return nil, false
	}
	red, _ := redactValue(nil, s, i)
	return red, true
}

// oneValue is payload as a string and where its value starts, when it is
// one valid UTF-8 JSON value.
func oneValue(payload []byte) (s string, start int, ok bool) {
	if !utf8.Valid(payload) {
		return "", 0, false
	}
	s = string(payload)
	start = skipSpace(s, 0)
	end, err := scanValue(s, start, 0)
	if err != nil || skipSpace(s, end) != len(s) {
		return "", 0, false
	}
	return s, start, true
}

// isObject reports whether the valid JSON value s is an object.
func isObject(s string) bool {
	i := skipSpace(s, 0)
	return i < len(s) && s[i] == '{'
}

// PayloadDigest is what a dead letter keeps of a payload that cannot be
// redacted: "sha256:<hex> (<n> bytes)", the hash and size of all of it.
func PayloadDigest(sum [sha256.Size]byte, size int) []byte {
	return []byte("sha256:" + hex.EncodeToString(sum[:]) + " (" + strconv.Itoa(size) + " bytes)")
}

// redactor copies src to out, splicing redacted values in place of the
// argument members it meets.
type redactor struct {
	src  string
	out  []byte
	last int // src[last:] is not copied yet
}

func (r *redactor) splice(vs, ve int, with []byte) {
	r.out = append(r.out, r.src[r.last:vs]...)
	r.out = append(r.out, with...)
	r.last = ve
}

// walk visits the valid value at src[i] (at object depth depth) and returns
// its end. It reads each byte once, so that a deeply nested payload costs no
// more than a flat one.
func (r *redactor) walk(i, depth int) int {
	s := r.src
	switch s[i] {
	case '{':
		return eachMember(s, i, func(key string, vs int, esc bool) int {
			switch {
			case argumentKeys[key]:
				red, ve := redactValue(nil, s, vs)
				r.splice(vs, ve, red)
				return ve
			case depth == 0 && s[vs] == '"' && (key == "data" || key == "data_base64"):
				ve, _, _ := scanString(s, vs)
				r.embedded(field{key: key, vs: vs, ve: ve, esc: esc}, key == "data_base64")
				return ve
			}
			return r.walk(vs, depth+1)
		})
	case '[':
		return eachElement(s, i, func(j int) int { return r.walk(j, depth+1) })
	}
	end, _ := scanValue(s, i, 0)
	return end
}

// eachMember calls member for each member of the valid object at s[i] with its
// unescaped key and the start of its value (and whether a string value holds
// escapes); member returns the value's end. It returns the object's end.
func eachMember(s string, i int, member func(key string, vs int, esc bool) int) int {
	j := skipSpace(s, i+1)
	for s[j] != '}' {
		kend, kesc, _ := scanString(s, j)
		key := s[j+1 : kend-1]
		if kesc {
			key = unquote(key)
		}
		vs := skipSpace(s, skipSpace(s, kend)+1) // past the colon
		esc := false
		if s[vs] == '"' {
			_, esc, _ = scanString(s, vs)
		}
		j = skipSpace(s, member(key, vs, esc))
		if s[j] == ',' {
			j = skipSpace(s, j+1)
		}
	}
	return j + 1
}

// eachElement calls elem for the start of each element of the valid array at
// s[i]; elem returns the element's end. It returns the array's end.
func eachElement(s string, i int, elem func(j int) int) int {
	j := skipSpace(s, i+1)
	for s[j] != ']' {
		j = skipSpace(s, elem(j))
		if s[j] == ',' {
			j = skipSpace(s, j+1)
		}
	}
	return j + 1
}

// embedded redacts a JSON document carried in a string member (CloudEvents
// data as a string, or data_base64) and encodes it back. A string that does
// not decode to one JSON object is Redacted whole: it may be the arguments
// of an event cut short or mangled, and what it holds cannot be told.
func (r *redactor) embedded(f field, b64 bool) {
	inner := stringValue(r.src, f)
	whole := func() { r.splice(f.vs, f.ve, []byte(`"`+Redacted+`"`)) }
	if b64 {
		raw, err := base64.StdEncoding.DecodeString(inner)
		if err != nil {
			whole()
			return
		}
		inner = string(raw)
	}
	red, ok := RedactArgs([]byte(inner))
	if !ok || !isObject(inner) {
		whole()
		return
	}
	if string(red) == inner {
		return
	}
	if b64 {
		red = []byte(base64.StdEncoding.EncodeToString(red))
	}
	r.splice(f.vs, f.ve, appendGoString(nil, string(red)))
}

// redactValue appends the redacted form of the valid value at src[i] (an
// object with the same keys, an array of the same length, every scalar,
// null included, the string Redacted) and returns the value's end.
func redactValue(dst []byte, src string, i int) ([]byte, int) {
	switch src[i] {
	case '{':
		dst = append(dst, '{')
		n := 0
		end := eachMember(src, i, func(key string, vs int, _ bool) int {
			if n++; n > 1 {
				dst = append(dst, ',')
			}
			dst = appendGoString(dst, key)
			dst = append(dst, ':')
			var ve int
			dst, ve = redactValue(dst, src, vs)
			return ve
		})
		return append(dst, '}'), end
	case '[':
		dst = append(dst, '[')
		n := 0
		end := eachElement(src, i, func(j int) int {
			if n++; n > 1 {
				dst = append(dst, ',')
			}
			var ve int
			dst, ve = redactValue(dst, src, j)
			return ve
		})
		return append(dst, ']'), end
	}
	end, _ := scanValue(src, i, 0)
	return append(dst, `"`+Redacted+`"`...), end
}
