package otlpreceiver

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
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
)

const token = "receiver-test-token-0123456789"

// jetStream is a real embedded NATS server with JetStream and no stream yet.
func jetStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	ns, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true})
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
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "MCP_AUDIT", Subjects: []string{"mcp.audit.>"}})
	if err != nil {
		t.Fatal(err)
	}
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
