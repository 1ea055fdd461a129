package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
)

// batchOf publishes events from..to-1 as one batched message, with a bad
// line in the middle when bad.
func publishBatch(t *testing.T, js jetstream.JetStream, from, to int, bad bool) *jetstream.PubAck {
	t.Helper()
	var events []audit.Event
	for i := from; i < to; i++ {
		e, err := audit.Decode(jsEvent(i, "pve"), audit.Options{})
		require.NoError(t, err)
		events = append(events, e.Event)
	}
	m, err := BatchMsg("mcp.audit.", events)
	require.NoError(t, err)
	if bad {
		m.Data = append(m.Data, []byte("{\"id\":\"broken\",\"server\":\"pve\"}\n\n")...)
	}
	ack, err := js.PublishMsg(context.Background(), m)
	require.NoError(t, err)
	return ack
}

// TestJetStreamBatchedMessages: a message of many events is stored event by
// event; a bad line is dead-lettered alone, with its line number; the same
// batch published again is dropped by the stream, and its events, if
// redelivered, by their ids.
func TestJetStreamBatchedMessages(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Minute)
	publishBatch(t, js, 0, 64, false)
	publishBatch(t, js, 64, 128, true)
	jsPublish(t, js, 128, 130) // single events mix with batches
	again := publishBatch(t, js, 0, 64, false)
	assert.True(t, again.Duplicate, "the same batch again is a duplicate of its Nats-Msg-Id")

	sink := &memSink{}
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, CheckpointKey: "MCP_AUDIT/mcptrail", BatchSize: 100, MaxWait: 100 * time.Millisecond})
	require.Eventually(t, func() bool { e, d := sink.count(); return e == 130 && d == 1 }, 10*time.Second, 20*time.Millisecond)
	waitDrained(t, c)
	cp, err := sink.Checkpoint(context.Background(), "MCP_AUDIT/mcptrail")
	require.NoError(t, err)
	assert.Equal(t, uint64(4), cp, "the checkpoint is the last message's stream sequence (two batches, two single events)")
	seen := sink.storedOnce(t)
	sink.mu.Lock()
	assert.LessOrEqual(t, sink.largest, 100, "a batch takes the messages whose events fit BatchSize")
	defer sink.mu.Unlock()
	for i := range 130 {
		assert.True(t, seen[fmt.Sprintf("e%06d", i)], "e%06d", i)
	}
	d := sink.dead[0]
	assert.Equal(t, audit.ReasonMissingTS, d.Reason)
	assert.Equal(t, int64(65), d.Line, "the bad line is the 65th of its message")
	assert.Equal(t, uint64(2), d.Seq, "and its message is the second")
}

func TestBatchMsgKeepsOneSubject(t *testing.T) {
	_, err := BatchMsg("mcp.audit.", []audit.Event{{ID: "a", Server: "pve"}, {ID: "b", Server: "other"}})
	require.Error(t, err)
	m, err := BatchMsg("mcp.audit.", []audit.Event{{ID: "a", Server: "pve"}, {ID: "b", Server: "pve"}})
	require.NoError(t, err)
	assert.Equal(t, 2, EventsIn(m))
	assert.Equal(t, 1, EventsIn(&nats.Msg{Data: []byte("{}")}))
	assert.Equal(t, "mcp.audit.pve", m.Subject)
	other, err := BatchMsg("mcp.audit.", []audit.Event{{ID: "a", Server: "pve"}, {ID: "c", Server: "pve"}})
	require.NoError(t, err)
	assert.NotEqual(t, m.Header.Get(jetstream.MsgIDHeader), other.Header.Get(jetstream.MsgIDHeader))
}

// TestBatcherSplits: a batch closes at its event count, at its byte size
// (an event larger than that goes alone) and where the server changes.
func TestBatcherSplits(t *testing.T) {
	b := Batcher{Prefix: "mcp.audit.", MaxEvents: 3, MaxBytes: 400}
	var msgs []*nats.Msg
	add := func(id, server string, argBytes int) {
		e := audit.Event{ID: id, Server: server, Tool: strings.Repeat("t", argBytes)}
		m, err := b.Add(&e)
		require.NoError(t, err)
		if m != nil {
			msgs = append(msgs, m)
		}
	}
	for i := range 4 {
		add(fmt.Sprint("a", i), "pve", 1)
	}
	add("b0", "other", 1)
	add("c0", "other", 500) // over MaxBytes: closes the open batch and goes alone
	add("c1", "other", 1)
	if m := b.Flush(); m != nil {
		msgs = append(msgs, m)
	}
	var got []string
	for _, m := range msgs {
		got = append(got, fmt.Sprintf("%s:%d", m.Subject, EventsIn(m)))
		assert.LessOrEqual(t, len(m.Data), 400+600, "only a lone large event passes MaxBytes")
	}
	assert.Equal(t, []string{"mcp.audit.pve:3", "mcp.audit.pve:1", "mcp.audit.other:1", "mcp.audit.other:1", "mcp.audit.other:1"}, got)
	assert.Nil(t, b.Flush(), "nothing is left open")
}

// BatchBytes keeps a batch and its headers under the server's max_payload,
// which NATS counts together: at the default 1 MiB of both, a full batch
// would be refused.
func TestBatchBytes(t *testing.T) {
	for _, c := range []struct {
		configured int
		maxPayload int64
		want       int
	}{
		{0, 0, DefaultMaxMessageBytes},
		{0, 1 << 20, 1<<20 - batchHeaderBytes},
		{256 << 10, 1 << 20, 256 << 10},
		{4 << 20, 64 << 10, 64<<10 - batchHeaderBytes},
		{4 << 20, 0, 4 << 20},
	} {
		if got := BatchBytes(c.configured, c.maxPayload); got != c.want {
			t.Errorf("BatchBytes(%d, %d) = %d, want %d", c.configured, c.maxPayload, got, c.want)
		}
	}
}

// A batch's Content-Type is read as HTTP reads it: its name and media type
// in any case, with parameters. Anything else is one event.
func TestIsBatchReadsContentTypeAsHTTPDoes(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        bool
	}{
		{"Content-Type", "application/x-ndjson", true},
		{"content-type", "application/x-ndjson", true},
		{"CONTENT-TYPE", "Application/X-NDJSON", true},
		{"Content-Type", "application/x-ndjson; charset=utf-8", true},
		{"Content-Type", " application/x-ndjson ;charset=UTF-8", true},
		{"Content-Type", "application/json", false},
		{"Content-Type", "application/x-ndjson-ish", false},
		{"Content-Type", "application/x-ndjson; charset", false}, // malformed parameter
		{"Content-Kind", "application/x-ndjson", false},
	} {
		assert.Equal(t, tc.want, isBatch(nats.Header{tc.name: {tc.value}}), "%s: %s", tc.name, tc.value)
	}
	assert.False(t, isBatch(nil))
	assert.False(t, isBatch(nats.Header{"Nats-Msg-Id": {"x"}}))
}

// A batched message whose publisher spells its Content-Type another way
// (lower-case name, a charset) is stored event by event through JetStream,
// not dead-lettered whole as one event.
func TestJetStreamBatchWithContentTypeSpelledOtherwise(t *testing.T) {
	_, js := jsServer(t)
	c := jsSetup(t, js, time.Minute)
	var events []audit.Event
	for i := range 10 {
		e, err := audit.Decode(jsEvent(i, "pve"), audit.Options{})
		require.NoError(t, err)
		events = append(events, e.Event)
	}
	m, err := BatchMsg("mcp.audit.", events)
	require.NoError(t, err)
	m.Header.Del(contentTypeHeader)
	m.Header["content-type"] = []string{"application/x-ndjson; charset=utf-8"}
	_, err = js.PublishMsg(context.Background(), m)
	require.NoError(t, err)

	sink := &memSink{}
	runSource(t, &JetStreamSource{Consumer: c, JS: js, Sink: sink, CheckpointKey: "MCP_AUDIT/mcptrail", BatchSize: 100, MaxWait: 100 * time.Millisecond})
	require.Eventually(t, func() bool { e, _ := sink.count(); return e == 10 }, 10*time.Second, 20*time.Millisecond)
	_, dead := sink.count()
	assert.Zero(t, dead)
}

// A batch's blank lines are JSON white space alone: a line of other white
// space (a no-break space) is a line to dead-letter, not a blank one.
func TestBatchLinesBlankAsJSONIsBlank(t *testing.T) {
	h := nats.Header{"Content-Type": []string{BatchContentType}}
	msgs := appendMessages(nil, []byte("\n{}\n\u00a0\n \t\r\n\f\n"), "mcp.audit.pve", 7, h)
	var lines []int64
	for _, m := range msgs {
		lines = append(lines, m.Line)
	}
	assert.Equal(t, []int64{2, 3, 5}, lines)
}
