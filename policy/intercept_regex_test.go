package policy

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// notContaining must match exactly the strings without the word: checked on
// random strings over the word's runes, a neighbour and a newline.
func TestNotContaining(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		word string
		fold bool
	}{
		{"rm -rf", false}, {"aaa", false}, {"abab", false}, {"aabaaab", false}, {"x", false},
		{"DROP TABLE", true}, {"urgent", true}, {"k", true}, {"ünïcödé", false}, {"a]b^c\\d-e", false},
	} {
		expr, ok := notContaining(tc.word, tc.fold)
		require.True(t, ok, tc.word)
		re := regexp.MustCompile(expr)
		letters := []rune(tc.word + "zZ\n" + strings.ToUpper(tc.word) + "\u212a")
		contains := func(s string) bool {
			if tc.fold {
				return regexp.MustCompile("(?i)" + regexp.QuoteMeta(tc.word)).MatchString(s)
			}
			return strings.Contains(s, tc.word)
		}
		for range 20000 {
			n := rng.IntN(3 * len([]rune(tc.word)))
			b := make([]rune, n)
			for i := range b {
				b[i] = letters[rng.IntN(len(letters))]
			}
			s := string(b)
			if rng.IntN(4) == 0 { // plant the word often enough
				at := rng.IntN(len(b) + 1)
				s = string(b[:at]) + tc.word + string(b[at:])
			}
			require.Equal(t, !contains(s), re.MatchString(s), "%q against %q: %s", tc.word, s, expr)
		}
	}
	_, ok := notContaining("", false)
	assert.False(t, ok, "an empty word occurs everywhere")
	_, ok = notContaining(strings.Repeat("a", maxWordRunes+1), false)
	assert.False(t, ok)
}

func TestLiteralWords(t *testing.T) {
	for expr, want := range map[string][]string{
		"rm -rf":        {"rm -rf"},
		"rm -rf|mkfs":   {"rm -rf", "mkfs"},
		"rm -(rf|fr)":   {"rm -rf", "rm -fr"},
		`shutdown\.exe`: {"shutdown.exe"},
		"drop [Tt]able": {"drop Table", "drop table"},
	} {
		words, fold, ok := literalWords(expr)
		require.True(t, ok, expr)
		assert.False(t, fold, expr)
		assert.ElementsMatch(t, want, words, expr)
	}
	words, fold, ok := literalWords("(?i)urgent")
	require.True(t, ok)
	assert.True(t, fold)
	require.Len(t, words, 1)
	assert.True(t, strings.EqualFold("urgent", words[0]), words[0])
	words, fold, ok = literalWords("(?i)a|[bc]") // a folding single letter is spelt out
	require.True(t, ok)
	assert.False(t, fold)
	assert.ElementsMatch(t, []string{"A", "a", "B", "b", "C", "c"}, words)
	for _, expr := range []string{"^rm", "rm$", "rm.*rf", "a+", "", "a|", `\bword`, "[a-z]", "(?i:ab)|cd"} {
		_, _, ok := literalWords(expr)
		assert.False(t, ok, expr)
	}
}
