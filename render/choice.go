package render

import (
	"fmt"
	"slices"
	"strings"
)

// Choice checks a --format value against the allowed ones, ignoring case and
// surrounding space; "" is the first allowed value.
func Choice(s string, allowed []string) (string, error) {
	f := strings.ToLower(strings.TrimSpace(s))
	if f == "" {
		return allowed[0], nil
	}
	if slices.Contains(allowed, f) {
		return f, nil
	}
	return "", fmt.Errorf("unknown --format %q: allowed values are %s", s, strings.Join(allowed, ", "))
}
