package audit

// Session sources: where a stored call's session came from (the
// session_source column, SPEC §3). The MCP specification of 2026-07-28
// removed protocol sessions, so an event may carry none; then the store
// takes its conversation or trace id (the attributes below), else derives a
// run of the same agent (SessionDerived), else leaves the gateway instance
// to stand in (SessionFromGateway). The event itself is never changed, so
// that it reads the same wherever it is sent on.
const (
	SessionFromEvent        = "event"
	SessionFromConversation = "conversation"
	SessionFromTrace        = "trace"
	SessionDerived          = "derived"
	SessionFromGateway      = "gateway"
)

// Attributes of an event that correlate calls when it has no session.
const (
	AttrConversationID = "gen_ai.conversation.id"
	AttrTraceID        = "trace_id"
)
