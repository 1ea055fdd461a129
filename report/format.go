package report

import (
	"fmt"
	"strconv"
	"time"

	"github.com/mcptrail/mcptrail/recommend"
)

// num writes 212400 as 212,400.
func num(n int64) string { return recommend.GroupDigits(n) }

// trim writes a float without trailing zeros.
func trim(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// pct writes a share as a percentage with one decimal ("2.3%"), or with two
// when it is below 1 % and not zero.
func pct(f float64) string {
	switch {
	case f == 0:
		return "0%"
	case f < 0.01:
		return strconv.FormatFloat(f*100, 'f', 2, 64) + "%"
	}
	return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
}

// ms writes a latency in milliseconds, "–" when unknown.
func ms(f *float64) string {
	if f == nil {
		return "–"
	}
	switch {
	case *f >= 1000:
		return strconv.FormatFloat(*f/1000, 'f', 2, 64) + " s"
	case *f >= 100:
		return strconv.FormatFloat(*f, 'f', 0, 64) + " ms"
	}
	return strconv.FormatFloat(*f, 'f', 1, 64) + " ms"
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return num(n) + " " + many
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }

func minute(t time.Time) string { return t.UTC().Format("2006-01-02 15:04") + " UTC" }

// days writes a window length: "7 days", "36 hours".
func daysText(d float64) string {
	if d == float64(int64(d)) {
		return plural(int64(d), "day", "days")
	}
	return fmt.Sprintf("%s hours", trim(d*24))
}
