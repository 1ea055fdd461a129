package otlpreceiver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/otlp"
)

const token = "receiver-test-token-0123456789"

// jetStream is a real embedded NATS server with JetStream and no stream yet.
func jetStream(t *testing.T) jetstream.JetStream { return jetStreamMax(t, 0) }

// jetStreamMax is jetStream with the server's max_payload (its default
// when 0).
func jetStreamMax(t *testing.T, maxPayload int32) jetstream.JetStream {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true,
		MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// auditStream creates the stream the receiver publishes to.
func auditStream(t *testing.T, js jetstream.JetStream) jetstream.Stream {
	t.Helper()
	stream, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}})
	if err != nil {
		t.Fatal(err)
	}
	return stream
}

func batch(t *testing.T) []byte {
	t.Helper()
	s := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	req := &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{
		TraceId: bytes.Repeat([]byte{1}, 16), SpanId: bytes.Repeat([]byte{2}, 8), StartTimeUnixNano: 1_800_000_000_000_000_000,
		Attributes: []*commonpb.KeyValue{s("mcp.method.name", "tools/call"), s("gen_ai.tool.name", "t"), s("mcp.server.name", "srv")},
	}}}}}}}
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func send(t *testing.T, h http.Handler, body []byte) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, PathTraces, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// TestStreamUnavailable: with no stream to take the events, nothing is
// acknowledged: 503 with Retry-After and a google.rpc.Status body; once the
// stream exists the same request is taken.
func TestStreamUnavailable(t *testing.T) {
	js := jetStream(t)
	rc, err := New(Options{Token: token, JS: js, Subject: "mcp.audit."})
	if err != nil {
		t.Fatal(err)
	}
	w := send(t, rc, batch(t))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("code %d, Retry-After %q: %s", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	var st rpcstatus.Status
	if err := proto.Unmarshal(w.Body.Bytes(), &st); err != nil || st.Code != 14 {
		t.Errorf("status body %v (%v)", &st, err)
	}

	ctx := context.Background()
	stream := auditStream(t, js)
	if w := send(t, rc, batch(t)); w.Code != http.StatusOK {
		t.Fatalf("with a stream: %d %s", w.Code, w.Body)
	}
	msg, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "mcp.audit.srv" || msg.Header.Get(jetstream.MsgIDHeader) != "otlp:01010101010101010101010101010101:0202020202020202" {
		t.Errorf("published %s %v", msg.Subject, msg.Header)
	}
}

func TestNotReady(t *testing.T) {
	rc, err := New(Options{Token: token, JS: jetStream(t), Ready: func() bool { return false }})
	if err != nil {
		t.Fatal(err)
	}
	if w := send(t, rc, batch(t)); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Fatalf("code %d, Retry-After %q", w.Code, w.Header().Get("Retry-After"))
	}
}

// spans is a request of n tool-call spans of srv, the k-th with an
// argument value of size[k] bytes when given.
func spans(t *testing.T, n int, size map[int]int) []byte {
	t.Helper()
	s := func(k, v string) *commonpb.KeyValue {
		return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
	}
	var sps []*tracepb.Span
	for k := range n {
		attrs := []*commonpb.KeyValue{s("mcp.method.name", "tools/call"), s("gen_ai.tool.name", "t"), s("mcp.server.name", "srv")}
		if size[k] > 0 {
			attrs = append(attrs, s("gen_ai.tool.call.arguments", `{"a":"`+strings.Repeat("x", size[k])+`"}`))
		}
		sps = append(sps, &tracepb.Span{TraceId: bytes.Repeat([]byte{1}, 16), SpanId: []byte{2, 2, 2, 2, 2, 2, byte(k >> 8), byte(k)},
			StartTimeUnixNano: 1_800_000_000_000_000_000 + uint64(k), Attributes: attrs})
	}
	b, err := proto.Marshal(&coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: sps}}}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestEventsArePublishedInBatches: a request's events reach the stream as
// batched messages (SPEC §2) of at most 64 events and max_message_bytes,
// every event once and in order; an event over max_event_bytes is rejected
// and left out, sent as a rejected record instead; the same request sent again is dropped by the stream
// (each batch's Nats-Msg-Id comes from its events' ids).
func TestEventsArePublishedInBatches(t *testing.T) {
	js := jetStream(t)
	ctx := context.Background()
	stream := auditStream(t, js)
	rc, err := New(Options{Token: token, JS: js, Subject: "mcp.audit.", Convert: otlp.Options{StoreArgs: true},
		MaxEventBytes: 4 << 10, MaxMessageBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	// 200 events: span 7 too large to be an event; spans 100-129 with 2 KiB
	// of arguments, so that 30 of them fill a message by its bytes.
	size := map[int]int{7: 8 << 10}
	for k := 100; k < 130; k++ {
		size[k] = 2 << 10
	}
	body := spans(t, 201, size)
	for range 2 {
		if w := send(t, rc, body); w.Code != http.StatusOK {
			t.Fatalf("code %d: %s", w.Code, w.Body)
		}
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	rejected := 0
	for seq := uint64(1); seq <= info.State.LastSeq; seq++ {
		msg, err := stream.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if r := msg.Header.Get(ingest.RejectedHeader); r != "" {
			// Span 7, for the dead letters: its event, once.
			rejected++
			if r != audit.ReasonTooLarge || !strings.Contains(string(msg.Data), `"otlp:01010101010101010101010101010101:0202020202020007"`) {
				t.Errorf("rejected message %d: %s %.80s", seq, r, msg.Data)
			}
			continue
		}
		if msg.Header.Get("Content-Type") != ingest.BatchContentType || !strings.HasPrefix(msg.Header.Get(jetstream.MsgIDHeader), "batch:") {
			t.Fatalf("message %d: headers %v", seq, msg.Header)
		}
		lines := strings.Split(strings.TrimSuffix(string(msg.Data), "\n"), "\n")
		if len(lines) > 64 || len(msg.Data) > 64<<10 {
			t.Errorf("message %d: %d events, %d bytes", seq, len(lines), len(msg.Data))
		}
		for _, l := range lines {
			var e audit.Event
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, e.ID)
		}
	}
	if rejected != 1 {
		t.Errorf("%d rejected messages, want span 7's once (sent twice)", rejected)
	}
	if len(ids) != 200 {
		t.Fatalf("%d events in %d messages, want 200 once each (sent twice)", len(ids), info.State.Msgs)
	}
	for i, id := range ids {
		k := i
		if i >= 7 {
			k++ // span 7 was rejected
		}
		if want := fmt.Sprintf("otlp:01010101010101010101010101010101:020202020202%04x", k); id != want {
			t.Fatalf("event %d is %s, want %s", i, id, want)
		}
	}
}

// TestBatchesFitTheServersMaxPayload: a server that takes smaller messages
// than ingest.max_message_bytes still takes every batch (NATS counts the
// headers too): a full batch refused would fail the request every time
// the client sends it again.
func TestBatchesFitTheServersMaxPayload(t *testing.T) {
	js := jetStreamMax(t, 64<<10)
	ctx := context.Background()
	stream := auditStream(t, js)
	rc, err := New(Options{Token: token, JS: js, Subject: "mcp.audit.", Convert: otlp.Options{StoreArgs: true},
		MaxEventBytes: 32 << 10, MaxMessageBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	size := map[int]int{}
	for k := range 64 {
		size[k] = 2 << 10 // 64 events of ~2.3 KiB: 150 KiB in one batch of 64
	}
	if w := send(t, rc, spans(t, 64, size)); w.Code != http.StatusOK {
		t.Fatalf("code %d: %s", w.Code, w.Body)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs < 3 {
		t.Errorf("%d messages: want batches under the server's 64 KiB", info.State.Msgs)
	}
}
