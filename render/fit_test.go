package render

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestFitCutsWideLinesOnly(t *testing.T) {
	short := "a line that fits"
	long := strings.Repeat("x", 120)
	got := Fit(short+"\n"+long, 100)
	lines := strings.Split(got, "\n")
	assert.Equal(t, short, lines[0])
	assert.Equal(t, strings.Repeat("x", 99)+"…", lines[1])
	assert.Equal(t, 100, visibleWidth(lines[1]))
}

func TestFitCountsColumnsNotBytesAndResetsColour(t *testing.T) {
	// Colour codes take no columns; a wide rune takes two.
	coloured := "\x1b[31m" + strings.Repeat("é", 50) + strings.Repeat("界", 30) + "\x1b[0m"
	got := Fit(coloured, 60)
	// 50 é and 4 界 take 58 columns; a fifth 界 and the ellipsis would need 61.
	assert.Equal(t, 59, visibleWidth(got), got)
	assert.True(t, strings.HasSuffix(got, "…\x1b[0m"), "a colour cut off is reset: %q", got)
	assert.Equal(t, coloured[:5], got[:5])

	plain := "\x1b[1m" + strings.Repeat("y", 10) + "\x1b[0m"
	assert.Equal(t, plain, Fit(plain, 10), "a line exactly as wide as allowed is kept")
}

func TestWrapIndentsContinuations(t *testing.T) {
	s := "alpha beta gamma delta epsilon zeta"
	got := Wrap(s, 0, 16, "    ")
	assert.Equal(t, "alpha beta gamma\n    delta\n    epsilon zeta", got)
	for _, l := range strings.Split(got, "\n") {
		assert.LessOrEqual(t, visibleWidth(l), 16)
	}
	// After a 12-column prefix only "alpha" fits on the first line.
	assert.Equal(t, "alpha\n    beta gamma delta\n    epsilon zeta", Wrap(s, 12, 21, "    "))
}
