package audit

// Session sources: where an event's session came from (the session_source
// column, SPEC §1). The MCP specification of 2026-07-28 removed protocol
// sessions, so an event may carry none; then a conversation or trace id
// stands in, and without those the store derives a run of the same agent
// (SessionDerived) or falls back to the gateway instance (SessionFromGateway).
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

// ResolveSession sets SessionSource, and Session where the event has none
// but carries a conversation or trace id: "conversation:<id>" or
// "trace:<id>", so that the key never collides with a protocol session. A
// source already set (by a decoder that knows better) is kept. Derived runs
// and the gateway fallback need the history: the store decides those.
func (e *Event) ResolveSession() {
	switch {
	case e.SessionSource != "":
	case e.Session != "":
		e.SessionSource = SessionFromEvent
	case e.Attrs[AttrConversationID] != "":
		e.Session, e.SessionSource = "conversation:"+e.Attrs[AttrConversationID], SessionFromConversation
	case e.Attrs[AttrTraceID] != "":
		e.Session, e.SessionSource = "trace:"+e.Attrs[AttrTraceID], SessionFromTrace
	}
}
