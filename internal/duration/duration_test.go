package duration

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"90s", 90 * time.Second}, {"15m", 15 * time.Minute}, {"30d", 30 * day}, {"2w", 14 * day},
		{"1d12h", 36 * time.Hour}, {"1.5d", 36 * time.Hour}, {" 7d ", 7 * day}, {"250ms", 250 * time.Millisecond},
	} {
		got, err := Parse(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
	for _, bad := range []string{"", "d", "30", "30x", "abc", "1..2d", "-5d"} {
		_, err := Parse(bad)
		assert.Error(t, err, bad)
	}
}
