// Package redact hides credentials before a value is logged or put in an
// error.
package redact

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Mask stands for a hidden credential.
const Mask = "xxxxx"

// URL hides the credentials of a NATS URL, or of each URL in a
// comma-separated list: user:password@ becomes user:xxxxx@, and a bare
// user@ (which NATS takes as a token) becomes xxxxx@. It works on text, so
// that a URL too malformed to parse is hidden all the same: a URL runs from
// its scheme to the comma before the next one's, and everything up to its
// last @ is its credentials, so that a password holding "/", "?", "#", ","
// or "@" is hidden whole (a list without schemes is hidden up to its last @).
func URL(raw string) string {
	if !strings.Contains(raw, "@") {
		return raw
	}
	var b strings.Builder
	for raw != "" {
		start := 0
		if i := strings.Index(raw, "://"); i >= 0 {
			start = i + len("://")
		}
		end := len(raw)
		if j := strings.Index(raw[start:], "://"); j >= 0 {
			if k := strings.LastIndexByte(raw[start:start+j], ','); k >= 0 {
				end = start + k + 1
			}
		}
		b.WriteString(raw[:start])
		b.WriteString(credentials(raw[start:end]))
		raw = raw[end:]
	}
	return b.String()
}

// credentials hides what comes before the last @ of a URL's rest (after
// its scheme).
func credentials(rest string) string {
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return rest
	}
	if user, _, ok := strings.Cut(rest[:at], ":"); ok {
		return user + ":" + Mask + rest[at:]
	}
	return Mask + rest[at:]
}

// Error is err without a URL it quotes, for an error of connecting to the
// NATS URL raw: a URL that does not parse comes back quoted whole in
// net/url's error (parse "nats://user:pass…": invalid URL escape "%zz",
// the escape itself a piece of the password), which is replaced by what
// is wrong with it.
func Error(err error, raw string) error {
	var u *url.Error
	if err == nil || !errors.As(err, &u) {
		return err
	}
	what := "not a valid URL"
	var esc url.EscapeError
	if errors.As(u.Err, &esc) {
		what = "an invalid % escape"
	}
	return fmt.Errorf("%s holds %s (not quoted: the URL may hold a password)", URL(raw), what)
}

// NKey stands for an NKey that is not a valid public key: it may be a
// pasted seed (the private key, which starts with S), so only its first
// character is kept, enough to tell a seed (S...) from a mistyped public key
// (U...).
func NKey(s string) string {
	for _, r := range s {
		return string(r) + "..." + Mask
	}
	return ""
}
