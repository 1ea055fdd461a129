// Package redact hides credentials before a value is logged or put in an
// error.
package redact

import "strings"

// Mask stands for a hidden credential.
const Mask = "xxxxx"

// URL hides the credentials of a NATS URL, or of each URL in a
// comma-separated list: user:password@ becomes user:xxxxx@, and a bare
// user@ (which NATS takes as a token) becomes xxxxx@. It works on text, so
// that a URL too malformed to parse is hidden all the same.
func URL(raw string) string {
	if !strings.Contains(raw, "@") {
		return raw
	}
	parts := strings.Split(raw, ",")
	for i, p := range parts {
		parts[i] = one(p)
	}
	return strings.Join(parts, ",")
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

func one(s string) string {
	prefix, rest := "", s
	if i := strings.Index(s, "://"); i >= 0 {
		prefix, rest = s[:i+3], s[i+3:]
	}
	authority, tail := rest, ""
	if j := strings.IndexAny(rest, "/?#"); j >= 0 {
		authority, tail = rest[:j], rest[j:]
	}
	at := strings.LastIndexByte(authority, '@')
	if at < 0 {
		return s
	}
	cred := Mask
	if user, _, ok := strings.Cut(authority[:at], ":"); ok {
		cred = user + ":" + Mask
	}
	return prefix + cred + authority[at:] + tail
}
