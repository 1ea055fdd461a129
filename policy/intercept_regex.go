package policy

import (
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Intercept has no "not contains" and no "not regex", and Go's RE2 has no
// negative lookahead. The strings that do not contain a word are a regular
// language all the same: notContaining builds its expression from the
// word's Knuth–Morris–Pratt automaton (every state but "found" accepting)
// by state elimination. That is how a deny_if over contains, or over a
// regex that is a few literal alternatives, becomes an Intercept rule.

// Bounds on what is written: longer words or larger expressions are reported
// as not carried over rather than written as unreadable YAML.
const (
	maxWordRunes    = 64
	maxRegexBytes   = 16 << 10
	maxLiteralWords = 16
)

// notContaining returns an anchored RE2 expression that matches exactly the
// strings in which word does not occur (case-insensitively when fold).
func notContaining(word string, fold bool) (string, bool) {
	w := []rune(word)
	if len(w) == 0 || len(w) > maxWordRunes {
		return "", false
	}
	if fold {
		for i, r := range w {
			w[i] = foldKey(r)
		}
	}
	m := len(w)
	// fail[i] is the length of the longest proper border of w[:i+1].
	fail := make([]int, m)
	for i, k := 1, 0; i < m; i++ {
		for k > 0 && w[i] != w[k] {
			k = fail[k-1]
		}
		if w[i] == w[k] {
			k++
		}
		fail[i] = k
	}
	step := func(state int, r rune) int {
		for state > 0 && r != w[state] {
			state = fail[state-1]
		}
		if r == w[state] {
			state++
		}
		return state
	}
	alphabet := slices.Compact(slices.Sorted(slices.Values(w)))

	// Nodes 0..m-1 are the automaton's states, m the start and m+1 the end.
	start, end := m, m+1
	edge := make([][]rx, m+2)
	for i := range edge {
		edge[i] = make([]rx, m+2)
	}
	edge[start][0] = epsilon
	for i := range m {
		edge[i][end] = epsilon
		byTarget := map[int][]rune{}
		var leaves []rune // runes of the word that leave state 0's class
		for _, r := range alphabet {
			t := step(i, r)
			if t != 0 {
				leaves = append(leaves, r)
			}
			if t != 0 && t < m {
				byTarget[t] = append(byTarget[t], r)
			}
		}
		edge[i][0] = rx{s: runeClass(leaves, true, fold), ok: true}
		for t, rs := range byTarget {
			edge[i][t] = rx{s: runeClass(rs, false, fold), ok: true, atom: true}
		}
		edge[i][0].atom = true
	}
	for k := m - 1; k >= 0; k-- {
		loop := edge[k][k].star()
		for i := range m + 2 {
			if i == k || !edge[i][k].ok {
				continue
			}
			for j := range m + 2 {
				if j == k || !edge[k][j].ok {
					continue
				}
				edge[i][j] = edge[i][j].or(edge[i][k].then(loop).then(edge[k][j]))
			}
		}
		if len(edge[start][end].s) > maxRegexBytes {
			return "", false
		}
	}
	expr := `\A` + edge[start][end].s + `\z`
	if len(expr) > maxRegexBytes {
		return "", false
	}
	if _, err := regexp.Compile(expr); err != nil {
		return "", false
	}
	return expr, true
}

// rx is a regular expression under construction: ok false is the empty
// language, s "" with ok the empty string; atom marks one that needs no group.
type rx struct {
	s    string
	ok   bool
	atom bool
}

var epsilon = rx{ok: true, atom: true}

func (a rx) or(b rx) rx {
	switch {
	case !a.ok:
		return b
	case !b.ok, a.s == b.s:
		return a
	case a.s == "":
		return b.opt()
	case b.s == "":
		return a.opt()
	}
	return rx{s: "(?:" + a.s + "|" + b.s + ")", ok: true, atom: true}
}

func (a rx) then(b rx) rx {
	if !a.ok || !b.ok {
		return rx{}
	}
	if a.s == "" {
		return b
	}
	if b.s == "" {
		return a
	}
	return rx{s: a.s + b.s, ok: true}
}

func (a rx) star() rx {
	if !a.ok || a.s == "" {
		return epsilon
	}
	return rx{s: a.group() + "*", ok: true}
}

func (a rx) opt() rx { return rx{s: a.group() + "?", ok: true} }

func (a rx) group() string {
	if a.atom {
		return a.s
	}
	return "(?:" + a.s + ")"
}

// runeClass writes a character class of rs (and, when fold, every rune that
// folds to one of them), negated when not; letters and digits stay readable.
func runeClass(rs []rune, negated, fold bool) string {
	var all []rune
	for _, r := range rs {
		all = append(all, r)
		if fold {
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				all = append(all, f)
			}
		}
	}
	slices.Sort(all)
	all = slices.Compact(all)
	var b strings.Builder
	for _, r := range all {
		if r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r)) {
			b.WriteRune(r)
		} else {
			b.WriteString(`\x{` + strconv.FormatInt(int64(r), 16) + `}`)
		}
	}
	if len(all) == 1 && !negated {
		return b.String() // one rune needs no class
	}
	if negated {
		return "[^" + b.String() + "]"
	}
	return "[" + b.String() + "]"
}

// foldKey is the smallest rune of r's case-folding orbit.
func foldKey(r rune) rune {
	key := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		key = min(key, f)
	}
	return key
}

// literalWords reports whether a regex matches exactly when one of a few
// literal words occurs (no anchors, repetition or other operators), and
// which words, and whether they match case-insensitively.
func literalWords(expr string) (words []string, fold bool, ok bool) {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return nil, false, false
	}
	folds := map[bool]bool{}
	words, ok = expand(re, folds)
	if !ok || len(folds) > 1 || len(words) == 0 || len(words) > maxLiteralWords {
		return nil, false, false
	}
	for _, w := range words {
		if w == "" {
			return nil, false, false
		}
	}
	return words, folds[true], true
}

// expand lists the strings a finite regex matches; folds records whether
// its literals fold case.
func expand(re *syntax.Regexp, folds map[bool]bool) ([]string, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		fold := re.Flags&syntax.FoldCase != 0
		if fold && len(re.Rune) == 1 { // [Tt] parses as a folding T: spell both
			r := re.Rune[0]
			out := []string{string(r)}
			for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
				out = append(out, string(f))
			}
			return out, true
		}
		folds[fold] = true
		return []string{string(re.Rune)}, true
	case syntax.OpCharClass:
		var out []string
		for i := 0; i+1 < len(re.Rune); i += 2 {
			for r := re.Rune[i]; r <= re.Rune[i+1]; r++ {
				if len(out) >= maxLiteralWords {
					return nil, false
				}
				out = append(out, string(r))
			}
		}
		folds[false] = true
		return out, true
	case syntax.OpCapture:
		return expand(re.Sub[0], folds)
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			s, ok := expand(sub, folds)
			if !ok {
				return nil, false
			}
			out = append(out, s...)
		}
		return out, len(out) <= maxLiteralWords
	case syntax.OpConcat:
		out := []string{""}
		for _, sub := range re.Sub {
			s, ok := expand(sub, folds)
			if !ok || len(out)*len(s) > maxLiteralWords {
				return nil, false
			}
			var next []string
			for _, a := range out {
				for _, b := range s {
					next = append(next, a+b)
				}
			}
			out = next
		}
		return out, true
	}
	return nil, false
}
