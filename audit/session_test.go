package audit

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestResolveSessionOrder(t *testing.T) {
	both := map[string]string{AttrConversationID: "conv-17", AttrTraceID: "4bf92f35"}
	for name, tc := range map[string]struct {
		in            Event
		session, from string
	}{
		"a protocol session wins":        {Event{Session: "mcp-1", Attrs: both}, "mcp-1", SessionFromEvent},
		"then the conversation":          {Event{Attrs: both}, "conversation:conv-17", SessionFromConversation},
		"then the trace":                 {Event{Attrs: map[string]string{AttrTraceID: "4bf92f35"}}, "trace:4bf92f35", SessionFromTrace},
		"else left to the store":         {Event{Agent: "bot"}, "", ""},
		"a source a decoder set is kept": {Event{Session: "x", SessionSource: SessionFromTrace}, "x", SessionFromTrace},
	} {
		t.Run(name, func(t *testing.T) {
			e := tc.in
			e.ResolveSession()
			assert.Equal(t, tc.session, e.Session)
			assert.Equal(t, tc.from, e.SessionSource)
		})
	}
}
