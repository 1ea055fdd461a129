package audit

import (
	"math"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Validate checks e against the rules of SPEC §1 with the limits of opts (the
// defaults when zero) and returns a *Rejection for the first rule it breaks.
// Every event Decode returns passes it, except that an Intercept event has no
// server until InterceptServers.Apply resolved it.
func (e *Event) Validate(opts Options) error {
	return e.validate(opts.withDefaults(), true)
}

func (e *Event) validate(opts Options, requireServer bool) error {
	if err := e.checkLengths(opts.MaxFieldBytes); err != nil {
		return err
	}
	if e.ID == "" {
		return reject(ReasonBadField, "event has no id")
	}
	if e.TS.IsZero() {
		return reject(ReasonMissingTS, `no "ts": every event needs an RFC 3339 time such as "2026-11-03T14:05:09.123456789Z"`)
	}
	if requireServer && e.Server == "" {
		return reject(ReasonMissingServer, `no "server": name the MCP server in the event or pass --server NAME`)
	}
	if e.Server != "" {
		if why := badServerName(e.Server); why != "" {
			return reject(ReasonBadField, `"server" is %q: %s`, clip(e.Server), why)
		}
	}
	if why := badToolName(e.Tool); why != "" {
		return reject(ReasonBadField, `"tool" is %q: %s`, clip(e.Tool), why)
	}
	if (e.Method == "" || e.Method == DefaultMethod) && e.Tool == "" {
		return reject(ReasonMissingTool, `method %s without "tool": a tool call must name its tool`, DefaultMethod)
	}
	if !e.Decision.Valid() {
		if e.Decision == "" {
			return reject(ReasonBadDecision, "no decision: want one of %s", decisionList())
		}
		return reject(ReasonBadDecision, "unknown decision %q: want one of %s", clip(string(e.Decision)), decisionList())
	}
	switch e.Status {
	case "", "ok", "error":
	default:
		return reject(ReasonBadField, `"status" is %q: want "ok", "error" or empty`, clip(e.Status))
	}
	if e.LatencyMS != nil && (*e.LatencyMS < 0 || math.IsNaN(*e.LatencyMS) || math.IsInf(*e.LatencyMS, 0)) {
		return reject(ReasonBadField, `"latency_ms" is %v: want a non-negative number of milliseconds`, *e.LatencyMS)
	}
	return nil
}

// checkLengths enforces the string limits: id at most MaxIDBytes, every other
// string at most max bytes.
func (e *Event) checkLengths(max int) error {
	if len(e.ID) > MaxIDBytes {
		return tooLong("id", len(e.ID), MaxIDBytes)
	}
	for _, f := range [...]struct {
		name string
		v    string
	}{
		{"server", e.Server}, {"tool", e.Tool}, {"method", e.Method}, {"decision", string(e.Decision)},
		{"status", e.Status}, {"gateway", e.Gateway}, {"grant", e.Grant}, {"agent", e.Agent},
		{"session", e.Session}, {"request_id", e.RequestID}, {"rule", e.Rule}, {"reason", e.Reason},
		{"args_hash", e.ArgsHash}, {"policy_version", e.PolicyVersion},
	} {
		if len(f.v) > max {
			return tooLong(f.name, len(f.v), max)
		}
	}
	for _, k := range e.ArgKeys {
		if len(k) > max {
			return tooLong("arg_keys", len(k), max)
		}
	}
	// Report the smallest offending key, so that the message is deterministic.
	bad, found := "", false
	for k, v := range e.Attrs {
		if (len(k) > max || len(v) > max) && (!found || k < bad) {
			bad, found = k, true
		}
	}
	if found {
		if len(bad) > max {
			return tooLong("attrs key "+clip(bad), len(bad), max)
		}
		return tooLong("attrs."+clip(bad), len(e.Attrs[bad]), max)
	}
	return nil
}

func tooLong(name string, n, max int) *Rejection {
	return reject(ReasonFieldTooLong, "%q is %d bytes, over the limit of %d", name, n, max)
}

// clip shortens a value quoted in a message.
func clip(s string) string {
	const n = 64
	if len(s) <= n {
		return s
	}
	return CutAt(s, n) + "…"
}

// CutAt is s cut to at most n bytes at the start of a character.
func CutAt(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

func decisionList() string {
	names := make([]string, len(Decisions))
	for i, d := range Decisions {
		names[i] = string(d)
	}
	return strings.Join(names, ", ")
}

// controlRune reports whether r is a control character that no name needs:
// C0 (NUL, tab and newline included), DEL, C1, or a bidirectional
// embedding, override or isolate (U+202A–U+202E, U+2066–U+2069), which
// would reorder a name's text where it is shown.
func controlRune(r rune) bool {
	return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) ||
		(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// BadServerName says why s cannot name a server, or returns "": for
// settings that name a server (otlp.server).
func BadServerName(s string) string { return badServerName(s) }

// badServerName says why s cannot name a server, or returns "". A server
// name is a NATS subject's last tokens (mcp.audit.<server>) and a folder
// name (report --out DIR/<server>/), so it is made of dot-separated
// non-empty parts (github.com is fine; ".", "..", ".x", "x." and "a..b" are
// not) without a path separator, a subject wildcard, white space or a
// control character.
func badServerName(s string) string {
	if s == "." || s == ".." {
		return "a relative path cannot name a server"
	}
	if s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return "a server name cannot start or end with a dot or hold two in a row"
	}
	for _, r := range s {
		switch {
		case r == '/' || r == '\\':
			return "a server name cannot hold a path separator (/ or \\)"
		case r == '*' || r == '>':
			return "a server name cannot hold a NATS subject wildcard (* or >)"
		case controlRune(r):
			return "a server name cannot hold a control character"
		case unicode.IsSpace(r):
			return "a server name cannot hold white space"
		}
	}
	return ""
}

// badToolName says why s cannot name a tool, or returns "": a tool name
// holds no control character (see controlRune).
func badToolName(s string) string {
	for _, r := range s {
		if controlRune(r) {
			return "a tool name cannot hold a control character"
		}
	}
	return ""
}
