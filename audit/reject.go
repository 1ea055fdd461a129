package audit

import (
	"errors"
	"fmt"
)

// Reason codes of a Rejection. They are stored in dead_letters.reason and
// counted in metrics, so they are part of the public contract: never rename one.
const (
	ReasonTooLarge      = "too_large"      // the payload is over Options.MaxEventBytes
	ReasonNotUTF8       = "not_utf8"       // the payload is not valid UTF-8
	ReasonMalformedJSON = "malformed_json" // not one well-formed JSON object
	ReasonUnknownFormat = "unknown_format" // auto-detection found no known format
	ReasonMissingTS     = "missing_ts"     // no timestamp
	ReasonBadTS         = "bad_ts"         // a timestamp that is not RFC 3339
	ReasonMissingServer = "missing_server" // no server name (and no --server)
	ReasonMissingTool   = "missing_tool"   // method tools/call without a tool
	ReasonBadDecision   = "bad_decision"   // missing or unknown decision
	ReasonFieldTooLong  = "field_too_long" // a string over Options.MaxFieldBytes (id: 128)
	ReasonBadField      = "bad_field"      // a field of the wrong JSON type or with an invalid value
	// ReasonSubjectMismatch: a NATS message whose event names another server
	// than its subject (mcp.audit.<server>): a publisher allowed one server's
	// subject may not write events for another.
	ReasonSubjectMismatch = "subject_mismatch"
)

// Reasons lists every reason code in a stable order.
var Reasons = []string{
	ReasonTooLarge, ReasonNotUTF8, ReasonMalformedJSON, ReasonUnknownFormat,
	ReasonMissingTS, ReasonBadTS, ReasonMissingServer, ReasonMissingTool,
	ReasonBadDecision, ReasonFieldTooLong, ReasonBadField, ReasonSubjectMismatch,
}

// KnownReason reports whether r is one of Reasons.
func KnownReason(r string) bool {
	for _, k := range Reasons {
		if k == r {
			return true
		}
	}
	return false
}

// Rejection is the error of a payload that cannot be stored as an event. It
// goes to dead_letters with its raw bytes: Reason is the machine-readable code,
// Detail says what was wrong and, where possible, how to fix it.
type Rejection struct {
	Reason string
	Detail string
}

func (r *Rejection) Error() string {
	if r.Detail == "" {
		return r.Reason
	}
	return r.Reason + ": " + r.Detail
}

// reject builds a Rejection with a formatted detail.
func reject(reason, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// ReasonOf returns the reason code of a *Rejection anywhere in err's chain, or
// "" when err is nil or not a rejection.
func ReasonOf(err error) string {
	var r *Rejection
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}
