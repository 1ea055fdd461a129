// Package audit defines the v1 audit event that mcptrail stores, and decodes and
// validates every accepted input format (native v1, CloudEvents structured mode,
// PolicyLayer Intercept JSONL, docker/mcp-gateway audit events). It does no I/O.
//
// Ingest calls Decode on every line or message, in parallel, and then, in input
// order, InterceptServers.Apply on each Result (Intercept names the server of a
// tool call only in its instance's startup line). A payload that cannot be
// stored comes back as a *Rejection whose Reason (one of the Reason* codes) and
// Detail go to dead_letters.
//
// Decoding is the ingest bottleneck, so it avoids reflection and maps: one
// validating pass over the top-level object (scan.go), field values taken as
// substrings of one copy of the line, and args_hash computed from the raw
// arguments without building them (canon.go). The scanner accepts exactly what
// encoding/json accepts and the canonical arguments equal encoding/json's
// output; the fuzz targets hold both.
package audit

import (
	"encoding/json"
	"time"
)

// Decision is the gateway's decision on a call.
type Decision string

// The decisions of SPEC §1.
const (
	Allowed          Decision = "allowed"
	Denied           Decision = "denied"
	RateLimited      Decision = "rate_limited"
	ApprovalRequired Decision = "approval_required"
	Hidden           Decision = "hidden"
)

// Decisions lists every valid decision in a stable order.
var Decisions = []Decision{Allowed, Denied, RateLimited, ApprovalRequired, Hidden}

// Valid reports whether d is one of the known decisions.
func (d Decision) Valid() bool {
	switch d {
	case Allowed, Denied, RateLimited, ApprovalRequired, Hidden:
		return true
	}
	return false
}

// DefaultMethod is the JSON-RPC method assumed when an event names none.
const DefaultMethod = "tools/call"

// Event is one tool call as decided by a gateway: the v1 wire format of SPEC §1.
// Optional numbers are pointers so that "absent" stays distinct from zero.
type Event struct {
	ID            string            `json:"id"`
	TS            time.Time         `json:"ts"`
	Server        string            `json:"server"`
	Tool          string            `json:"tool,omitempty"`
	Method        string            `json:"method,omitempty"`
	Decision      Decision          `json:"decision"`
	Status        string            `json:"status,omitempty"`
	Gateway       string            `json:"gateway,omitempty"`
	Grant         string            `json:"grant,omitempty"`
	Agent         string            `json:"agent,omitempty"`
	Session       string            `json:"session,omitempty"`
	RequestID     string            `json:"request_id,omitempty"`
	Rule          string            `json:"rule,omitempty"`
	Reason        string            `json:"reason,omitempty"`
	ErrorCode     *int64            `json:"error_code,omitempty"`
	LatencyMS     *float64          `json:"latency_ms,omitempty"`
	ArgsHash      string            `json:"args_hash,omitempty"`
	ArgKeys       []string          `json:"arg_keys,omitempty"`
	Args          json.RawMessage   `json:"args,omitempty"` // kept only when ingest.store_args is true
	PolicyVersion string            `json:"policy_version,omitempty"`
	Attrs         map[string]string `json:"attrs,omitempty"`
}
