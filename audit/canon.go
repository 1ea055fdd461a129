package audit

// Canonical arguments. args_hash must equal Intercept's, which is
// "sha256:" + hex(sha256(json.Marshal(arguments))) in Go: object keys sorted,
// no white space, <, > and & escaped as \u003c, \u003e, \u0026, U+2028 and
// U+2029 escaped. We produce exactly the bytes that encoding/json Marshal gives
// for the value decoded with UseNumber (numbers re-encode as written; a
// duplicate key keeps its last value), without building the map: the fuzz
// targets compare the two.

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// htmlSafe marks the ASCII bytes encoding/json writes unescaped (htmlSafeSet).
var htmlSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		t[c] = true
	}
	t['"'], t['\\'], t['<'], t['>'], t['&'] = false, false, false, false, false
	return t
}()

const hexDigits = "0123456789abcdef"

// appendGoString appends s as encoding/json encodes a string with HTML escaping.
func appendGoString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if htmlSafe[c] {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '\\', '"':
				dst = append(dst, '\\', c)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// plainString reports whether a raw string without escapes re-encodes to
// itself (no HTML-sensitive bytes, no U+2028/U+2029), the common case.
func plainString(raw string) bool {
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c < utf8.RuneSelf {
			if !htmlSafe[c] {
				return false
			}
		} else if c == 0xE2 && i+2 < len(raw) && raw[i+1] == 0x80 && (raw[i+2] == 0xA8 || raw[i+2] == 0xA9) {
			return false
		}
	}
	return true
}

// appendCanonicalString appends the canonical form of the string value src[vs:ve].
func appendCanonicalString(dst []byte, src string, vs, ve int, esc bool) []byte {
	inner := src[vs+1 : ve-1]
	if !esc && plainString(inner) {
		return append(dst, src[vs:ve]...)
	}
	if esc {
		inner = unquote(inner)
	}
	return appendGoString(dst, inner)
}

// canonicalizer writes the canonical form of validated JSON in one pass: an
// object's members are written in input order and moved only when their keys
// are out of order or repeated. Moving a member moves everything nested in
// it, so adversarial input (deep objects with unsorted keys, which agents
// control through tool arguments) could make that quadratic: past a budget
// of moved bytes the canonicalizer gives up and the caller falls back to
// encoding/json, which is the reference anyway.
type canonicalizer struct {
	src     string
	out     []byte
	members []member // a stack: the members of the objects being written
	scratch []byte   // the body of an object being reordered
	moved   int      // bytes moved by reordering so far
	budget  int
	over    bool // the budget ran out: out is incomplete
	high    int  // high-water mark of members, cleared before reuse
}

// member is an object member written to out: its key and the range of its
// "key":value text.
type member struct {
	key        string
	start, end int
}

var canonicalizers = sync.Pool{New: func() any {
	return &canonicalizer{out: make([]byte, 0, 512), members: make([]member, 0, 16)}
}}

func getCanonicalizer(src string) *canonicalizer {
	c := canonicalizers.Get().(*canonicalizer)
	c.src, c.out, c.moved, c.over, c.high = src, c.out[:0], 0, false, 0
	c.budget = 4*len(src) + 4096
	return c
}

func (c *canonicalizer) release() {
	clear(c.members[:c.high]) // drop references to the source string
	c.src, c.members = "", c.members[:0]
	if cap(c.out) > 64<<10 || cap(c.scratch) > 64<<10 {
		return // keep no large buffer around for small events
	}
	canonicalizers.Put(c)
}

// value writes the value starting at src[i] and returns the index after it.
func (c *canonicalizer) value(i int) int {
	src := c.src
	switch src[i] {
	case '{':
		return c.object(i, nil)
	case '[':
		c.out = append(c.out, '[')
		i = skipSpace(src, i+1)
		if src[i] == ']' {
			c.out = append(c.out, ']')
			return i + 1
		}
		for {
			if i = c.value(i); c.over {
				return i
			}
			if i = skipSpace(src, i); src[i] == ']' {
				c.out = append(c.out, ']')
				return i + 1
			}
			c.out = append(c.out, ',')
			i = skipSpace(src, i+1)
		}
	case '"':
		end, esc, _ := scanString(src, i)
		c.out = appendCanonicalString(c.out, src, i, end, esc)
		return end
	case 't':
		c.out = append(c.out, "true"...)
		return i + 4
	case 'f':
		c.out = append(c.out, "false"...)
		return i + 5
	case 'n':
		c.out = append(c.out, "null"...)
		return i + 4
	}
	// a number, re-encoded as written (json.Number)
	end, _ := scanNumber(src, i)
	c.out = append(c.out, src[i:end]...)
	return end
}

// object writes the object at src[i] == '{' with its keys sorted as
// encoding/json sorts map keys, keeping only the last of repeated keys (the
// value a map decode keeps). With keys, it appends the sorted distinct keys.
func (c *canonicalizer) object(i int, keys *[]string) int {
	src := c.src
	base, mark := len(c.out), len(c.members)
	c.out = append(c.out, '{')
	sorted := true
	i = skipSpace(src, i+1)
	for src[i] != '}' {
		kend, kesc, _ := scanString(src, i)
		key := src[i+1 : kend-1]
		if kesc {
			key = unquote(key)
		}
		if len(c.members) > mark {
			c.out = append(c.out, ',')
			if key <= c.members[len(c.members)-1].key {
				sorted = false
			}
		}
		start := len(c.out)
		c.out = appendCanonicalString(c.out, src, i, kend, kesc)
		c.out = append(c.out, ':')
		if i = c.value(skipSpace(src, skipSpace(src, kend)+1)); c.over { // past the colon
			return i
		}
		// The value's own members are popped: ours stay contiguous.
		c.members = append(c.members, member{key: key, start: start, end: len(c.out)})
		c.high = max(c.high, len(c.members))
		if i = skipSpace(src, i); src[i] == ',' {
			i = skipSpace(src, i+1)
		}
	}
	if !sorted {
		if c.reorder(base, mark); c.over {
			return i
		}
	}
	if keys != nil && len(c.members) > mark {
		*keys = slices.Grow(*keys, len(c.members)-mark)
		for _, m := range c.members[mark:] {
			*keys = append(*keys, m.key)
		}
	}
	c.members = c.members[:mark]
	c.out = append(c.out, '}')
	return i + 1
}

// reorder sorts the members c.members[mark:] of the object written from
// c.out[base] (its '{') and rewrites its body in key order, without the
// repeated keys.
func (c *canonicalizer) reorder(base, mark int) {
	ms := c.members[mark:]
	body := c.out[base+1:]
	if c.moved += len(body); c.moved > c.budget {
		c.over = true
		return
	}
	slices.SortStableFunc(ms, func(a, b member) int { return strings.Compare(a.key, b.key) })
	n := 0
	for k := range ms {
		if k+1 < len(ms) && ms[k+1].key == ms[k].key {
			continue // a later member with the same key wins
		}
		ms[n] = ms[k]
		n++
	}
	c.members = c.members[:mark+n]
	c.scratch = append(c.scratch[:0], body...)
	c.out = c.out[:base+1]
	for k, m := range c.members[mark:] {
		if k > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, c.scratch[m.start-base-1:m.end-base-1]...)
	}
}

// canonicalObject returns the canonical encoding of the validated object
// src[vs:ve] and appends its sorted distinct top-level keys to *keys. The
// bytes are valid until c.release.
func canonicalObject(src string, vs, ve int, keys *[]string) (c *canonicalizer, b []byte, err error) {
	c = getCanonicalizer(src)
	if c.object(vs, keys); !c.over {
		return c, c.out, nil
	}
	// Fall back to encoding/json for adversarial input.
	*keys = (*keys)[:0]
	dec := json.NewDecoder(strings.NewReader(src[vs:ve]))
	dec.UseNumber()
	var m map[string]any
	if err = dec.Decode(&m); err == nil {
		b, err = json.Marshal(m)
	}
	if err != nil {
		c.release()
		return nil, nil, reject(ReasonBadField, "args cannot be encoded canonically: %v", err)
	}
	for k := range m {
		*keys = append(*keys, k)
	}
	slices.Sort(*keys)
	return c, b, nil
}

// hashString formats a sha256 sum as "sha256:<hex>".
func hashString(sum []byte) string {
	var b [7 + 2*sha256.Size]byte
	copy(b[:], "sha256:")
	n := hex.Encode(b[7:], sum)
	return string(b[:7+n])
}

// applyArgs derives args_hash, arg_keys and (with keep) Args from the args
// object src[f.vs:f.ve], which parseTop has validated.
// A repeat of a recent args text takes them from the cache (argscache.go).
func applyArgs(e *Event, src string, f field, keep bool) error {
	raw := src[f.vs:f.ve]
	e.Args = nil
	hit, h := cachedArgs(raw)
	if hit != nil {
		e.ArgsHash, e.ArgKeys = hit.hash, hit.keys
		if keep {
			e.Args = append([]byte(nil), hit.canonical...)
		}
		return nil
	}
	var keys []string
	c, b, err := canonicalObject(src, f.vs, f.ve, &keys)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	e.ArgsHash = hashString(sum[:])
	e.ArgKeys = nil
	if len(keys) > 0 {
		e.ArgKeys = keys
	}
	if keep {
		e.Args = append([]byte(nil), b...)
	}
	cacheArgs(h, raw, e.ArgsHash, e.ArgKeys, b)
	c.release()
	return nil
}

// CanonicalArgs returns the canonical encoding of a JSON object of arguments
// (what Go's json.Marshal gives for it decoded with UseNumber) and its
// args_hash, so that other packages (the simulator) hash arguments the same
// way. It fails with a *Rejection unless args is one UTF-8 JSON object.
func CanonicalArgs(args []byte) (canonical []byte, argsHash string, err error) {
	canonical, argsHash, _, err = CanonicalArgsKeys(args)
	return canonical, argsHash, err
}

// CanonicalArgsKeys is CanonicalArgs with the object's distinct top-level
// keys, sorted (nil for {}): an event's arg_keys.
func CanonicalArgsKeys(args []byte) (canonical []byte, argsHash string, keys []string, err error) {
	if !utf8.Valid(args) {
		return nil, "", nil, reject(ReasonNotUTF8, "arguments: invalid UTF-8 at byte %d", invalidUTF8At(args))
	}
	s := string(args)
	if _, err := parseTop(s, nil); err != nil {
		return nil, "", nil, err
	}
	vs := skipSpace(s, 0)
	c, b, err := canonicalObject(s, vs, vs+len(trimSpace(args)), &keys)
	if err != nil {
		return nil, "", nil, err
	}
	canonical = append([]byte(nil), b...)
	c.release()
	sum := sha256.Sum256(canonical)
	if len(keys) == 0 {
		keys = nil
	}
	return canonical, hashString(sum[:]), keys, nil
}
