package ingest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/otlp"
)

// A rejected record sent through the stream (RejectedMsg) becomes a dead
// letter with its publisher's reason and detail, never an event, and
// without argument values however its publisher sent it: the ingester
// redacts the OTLP record again. A reason that is no reason code is not
// taken as given.
func TestRejectedMessagesAreDeadLetters(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Minute)
	span := `{"traceId":"abababababababababababababababab","spanId":"0000000000000001","name":"tools/call","attributes":[` +
		`{"key":"gen_ai.tool.name","value":{"stringValue":"x"}},` +
		`{"key":"gen_ai.tool.call.arguments","value":{"stringValue":"{\"password\":\"hunter2\"}"}},` +
		`{"key":"policy.decision","value":{"stringValue":"maybe"}}]}`
	publish := func(r Rejected, raw string) {
		_, err := js.PublishMsg(context.Background(), RejectedMsg("mcp.audit.", "pve", r, []byte(raw), 0))
		require.NoError(t, err)
	}
	publish(Rejected{Reason: audit.ReasonBadDecision, Detail: "decision \"maybe\"\nsecond line", Signal: otlp.Traces}, span)
	publish(Rejected{Reason: "made_up", Detail: "d", Signal: otlp.Logs}, `{"body":{"stringValue":"hunter2"}}`)
	publish(Rejected{Reason: audit.ReasonTooLarge, Detail: "big"},
		`{"id":"e000001","ts":"2026-01-02T03:04:05Z","server":"pve","tool":"vm_list","decision":"allowed","args":{"password":"hunter2"}}`)
	publish(Rejected{Reason: audit.ReasonBadField, Detail: "d", Signal: otlp.Traces}, `not a span hunter2`)

	sink := &memSink{}
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, CheckpointKey: "MCP_AUDIT/mcptrail", BatchSize: 100, MaxWait: 100 * time.Millisecond})
	require.Eventually(t, func() bool { _, d := sink.count(); return d == 4 }, 10*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	sink.mu.Lock()
	defer sink.mu.Unlock()
	dead := sink.dead
	assert.Empty(t, sink.events, "a rejected record is never stored as an event")
	for _, d := range dead {
		assert.Equal(t, FormatOTLP, d.Format)
		assert.Equal(t, "mcp.audit.pve", d.Source)
		assert.NotContains(t, string(d.Raw), "hunter2", "%s: no argument value at rest", d.Reason)
	}
	assert.Equal(t, audit.ReasonBadDecision, dead[0].Reason)
	assert.Equal(t, `decision "maybe" second line`, dead[0].Detail, "the detail kept on one header line")
	assert.Contains(t, string(dead[0].Raw), `"stringValue":"x"`, "the record kept but for its arguments")
	assert.Equal(t, audit.ReasonUnknownFormat, dead[1].Reason)
	assert.Contains(t, dead[1].Detail, `"made_up"`)
	assert.Contains(t, string(dead[1].Raw), `"[redacted]"`, "a log body may hold arguments")
	assert.Equal(t, audit.ReasonTooLarge, dead[2].Reason)
	assert.Contains(t, string(dead[2].Raw), `"e000001"`, "a v1 event keeps its bytes but for arguments")
	assert.True(t, strings.HasPrefix(string(dead[3].Raw), "sha256:"), "what does not parse keeps its digest: %s", dead[3].Raw)
}
