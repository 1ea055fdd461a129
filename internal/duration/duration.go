// Package duration parses the durations users write in flags and config:
// Go durations plus whole days (d) and weeks (w), e.g. 30d, 2w, 1d12h, 90s.
package duration

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Parse parses s. It accepts every time.ParseDuration form plus d and w units.
func Parse(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty duration")
	}
	var total time.Duration
	rest := s
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		j := i
		for j < len(rest) && !(rest[j] >= '0' && rest[j] <= '9' || rest[j] == '.') {
			j++
		}
		if i == 0 || j == i {
			return 0, fmt.Errorf("invalid duration %q: use e.g. 90s, 15m, 12h, 7d or 2w", s)
		}
		num, unit := rest[:i], rest[i:j]
		rest = rest[j:]
		switch unit {
		case "d", "w":
			n, err := strconv.ParseFloat(num, 64)
			if err != nil {
				return 0, fmt.Errorf("invalid duration %q: use e.g. 90s, 15m, 12h, 7d or 2w", s)
			}
			unitLen := 24 * time.Hour
			if unit == "w" {
				unitLen *= 7
			}
			total += time.Duration(n * float64(unitLen))
		default:
			d, err := time.ParseDuration(num + unit)
			if err != nil {
				return 0, fmt.Errorf("invalid duration %q: use e.g. 90s, 15m, 12h, 7d or 2w", s)
			}
			total += d
		}
	}
	return total, nil
}
