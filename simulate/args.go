package simulate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
)

// argSet is one set of call arguments with what an event carries about it.
// It is shared (read-only) by every call that uses the same arguments, which
// is what makes a polling loop's args_hash identical on every poll.
type argSet struct {
	json []byte   // exactly json.Marshal of the arguments as a map
	hash string   // "sha256:" + hex(sha256(json))
	keys []string // top-level keys, sorted
}

// arg is one key/value pair; exactly one of the value kinds is set.
type arg struct {
	key  string
	kind byte // 's' string, 'i' integer, 'b' boolean
	s    string
	i    int64
}

func str(k, v string) arg     { return arg{key: k, kind: 's', s: v} }
func num(k string, v int) arg { return arg{key: k, kind: 'i', i: int64(v)} }
func boolean(k string, v bool) arg {
	a := arg{key: k, kind: 'b'}
	if v {
		a.i = 1
	}
	return a
}

// argCache interns argument sets: most calls repeat a small set of arguments
// (a node, a hot VM), so hashing each distinct set once saves most of the work.
// It is cleared when full, which keeps memory bounded and output unchanged.
type argCache struct {
	m   map[string]*argSet
	buf []byte
}

const argCacheMax = 8192

func newArgCache() *argCache { return &argCache{m: make(map[string]*argSet, 256)} }

// get returns the interned argument set for kv. It writes the bytes
// encoding/json would write for the equivalent map[string]any: keys sorted,
// no spaces, HTML-escaped strings (the tests hold the two equal).
func (c *argCache) get(kv ...arg) *argSet {
	// Insertion sort: call sites pass a handful of keys, usually sorted already.
	for i := 1; i < len(kv); i++ {
		for j := i; j > 0 && kv[j].key < kv[j-1].key; j-- {
			kv[j], kv[j-1] = kv[j-1], kv[j]
		}
	}
	b := append(c.buf[:0], '{')
	for i, a := range kv {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, a.key)
		b = append(b, ':')
		switch a.kind {
		case 's':
			b = appendJSONString(b, a.s)
		case 'i':
			b = strconv.AppendInt(b, a.i, 10)
		case 'b':
			b = strconv.AppendBool(b, a.i != 0)
		}
	}
	b = append(b, '}')
	c.buf = b
	if s, ok := c.m[string(b)]; ok {
		return s
	}
	if len(c.m) >= argCacheMax {
		clear(c.m)
	}
	sum := sha256.Sum256(b)
	s := &argSet{json: append([]byte(nil), b...), hash: "sha256:" + hex.EncodeToString(sum[:])}
	if len(kv) > 0 {
		s.keys = make([]string, len(kv))
		for i, a := range kv {
			s.keys[i] = a.key
		}
	}
	c.m[string(s.json)] = s
	return s
}

// appendJSONString appends s as a JSON string. Plain printable ASCII (all the
// simulator writes) is copied; anything else goes through encoding/json so that
// the bytes stay exactly what json.Marshal gives.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
