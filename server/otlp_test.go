package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mcptrail/mcptrail/otlp"
)

// The exporters' token, and the API's (accepted by the receiver too).
const (
	otlpToken    = "otlp-test-token-0123456789"
	otlpAPIToken = "api-test-token-0123456789"
)

func strAttr(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}

// toolSpans is a gateway's batch: n tools/call spans of one trace (span ids
// from first), one HTTP span that is no tool call, and one tool call with a
// decision the mapping does not know (and a secret in its arguments).
func toolSpans(first, n int) *coltrace.ExportTraceServiceRequest {
	trace := bytes.Repeat([]byte{0xab}, 16)
	start := time.Date(2026, 11, 3, 14, 0, 0, 0, time.UTC)
	span := func(i int, attrs ...*commonpb.KeyValue) *tracepb.Span {
		id := make([]byte, 8)
		binary.BigEndian.PutUint64(id, uint64(i+1))
		ts := start.Add(time.Duration(i) * time.Second)
		return &tracepb.Span{TraceId: trace, SpanId: id, Name: "tools/call",
			StartTimeUnixNano: uint64(ts.UnixNano()), EndTimeUnixNano: uint64(ts.Add(3 * time.Millisecond).UnixNano()),
			Attributes: attrs}
	}
	var spans []*tracepb.Span
	for i := first; i < first+n; i++ {
		spans = append(spans, span(i, strAttr("mcp.method.name", "tools/call"), strAttr("gen_ai.tool.name", "get_vm_status"),
			strAttr("mcp.session.id", "s-1")))
	}
	spans = append(spans, span(1_000_000+first, strAttr("http.request.method", "POST")),
		span(2_000_000+first, strAttr("mcp.method.name", "tools/call"), strAttr("gen_ai.tool.name", "x"), strAttr("policy.decision", "maybe"),
			strAttr("gen_ai.tool.call.arguments", `{"password":"hunter2"}`)))
	return &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: []*commonpb.KeyValue{strAttr("service.name", "proxmox-mcp"), strAttr("service.instance.id", "gw-1")}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}}
}

// deniedDeleteLog is a gateway's log record of a refused delete_vm.
func deniedDeleteLog() *collogs.ExportLogsServiceRequest {
	return &collogs.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{{
			TimeUnixNano: uint64(time.Date(2026, 11, 3, 15, 0, 0, 0, time.UTC).UnixNano()),
			Attributes: []*commonpb.KeyValue{strAttr("gen_ai.operation.name", "execute_tool"), strAttr("gen_ai.tool.name", "delete_vm"),
				strAttr("mcp.server.name", "proxmox-mcp"), strAttr("policy.decision", "denied")},
		}}}},
	}}}
}

func post(t *testing.T, url, contentType, encoding, token string, body []byte) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	if encoding != "" {
		req.Header.Set("Content-Encoding", encoding)
	}
	return do(t, req, token)
}

func gzipped(t *testing.T, b []byte) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

// otlpOptions is a daemon with the exporters' and the API's tokens, an API
// and a request bound of 256 KiB, its receivers left to the test.
func otlpOptions(t *testing.T) Options {
	opts := testOptions(t)
	opts.HTTPToken, opts.OTLPToken = otlpAPIToken, otlpToken
	opts.Backend = echoBackend{db: "/data/mcptrail.duckdb"}
	opts.OTLPMaxRequestBytes = 256 << 10
	return opts
}

func TestServeOTLPReceiver(t *testing.T) {
	store := openStore(t)
	opts := otlpOptions(t)
	opts.OTLPListen = "127.0.0.1:0"
	addr := make(chan string, 1)
	opts.OTLPListening = func(a string) { addr <- a }
	d := start(t, store, opts)
	base := "http://" + <-addr

	// OTLP/HTTP protobuf: 40 tool calls stored, the HTTP span dropped, the
	// bad decision rejected in partial_success.
	batch, err := proto.Marshal(toolSpans(0, 40))
	require.NoError(t, err)
	resp, body := post(t, base+"/v1/traces", "application/x-protobuf", "", otlpToken, batch)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "application/x-protobuf", resp.Header.Get("Content-Type"))
	var out coltrace.ExportTraceServiceResponse
	require.NoError(t, proto.Unmarshal(body, &out))
	assert.EqualValues(t, 1, out.GetPartialSuccess().GetRejectedSpans())
	assert.Contains(t, out.GetPartialSuccess().GetErrorMessage(), "bad_decision 1")
	waitCount(t, store, `SELECT count(*) FROM calls`, 40)
	assert.Equal(t, 40, queryInt(t, store, `SELECT count(*) FROM calls WHERE server = 'proxmox-mcp' AND tool = 'get_vm_status'
		AND gateway = 'gw-1' AND session = 's-1' AND status = 'ok' AND latency_ms = 3 AND id LIKE 'otlp:abab%'`))

	// The same batch again: acknowledged, stored once.
	resp, body = post(t, base+"/v1/traces", "application/x-protobuf", "", otlpToken, batch)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))

	// gzip OTLP/JSON: 10 more (5 of them again) and a log record.
	jsonBatch, err := otlp.MarshalJSON(toolSpans(35, 10))
	require.NoError(t, err)
	resp, body = post(t, base+"/v1/traces", "application/json", "gzip", otlpToken, gzipped(t, jsonBatch))
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	assert.Contains(t, string(body), `"rejectedSpans":"1"`)
	logBody, err := otlp.MarshalJSON(deniedDeleteLog())
	require.NoError(t, err)
	resp, body = post(t, base+"/v1/logs", "application/json", "", otlpToken, logBody)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.Equal(t, "{}", strings.TrimSpace(string(body)), "no partial_success when everything was taken")
	waitCount(t, store, `SELECT count(*) FROM calls`, 46)
	time.Sleep(300 * time.Millisecond) // a duplicate would have been stored by now
	assert.Equal(t, 46, queryInt(t, store, `SELECT count(DISTINCT id) FROM calls`))
	assert.Equal(t, 46, queryInt(t, store, `SELECT count(*) FROM calls`))
	assert.Equal(t, 1, queryInt(t, store, `SELECT count(*) FROM calls WHERE tool = 'delete_vm' AND decision = 'denied'`))

	// The rejected spans are dead letters, each once (the first batch's was
	// sent twice), as OTLP/JSON without their arguments.
	waitCount(t, store, `SELECT count(*) FROM dead_letters`, 2)
	assert.Equal(t, 2, queryInt(t, store, `SELECT count(*) FROM dead_letters WHERE reason = 'bad_decision' AND format = 'otlp'
		AND source = 'mcp.audit.proxmox-mcp' AND detail LIKE '%maybe%' AND decode(raw) LIKE '%"spanId":"00000000001e8%'
		AND decode(raw) LIKE '%"stringValue":"x"%' AND decode(raw) NOT LIKE '%hunter2%'`))

	// Refusals.
	resp, _ = post(t, base+"/v1/traces", "application/x-protobuf", "", "", batch)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a token is required")
	resp, _ = post(t, base+"/v1/traces", "application/x-protobuf", "", "wrong-token-0123456789", batch)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp, _ = post(t, base+"/v1/traces", "text/plain", "", otlpToken, batch)
	assert.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	resp, _ = post(t, base+"/v1/traces", "application/x-protobuf", "br", otlpToken, batch)
	assert.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	resp, _ = post(t, base+"/v1/traces", "application/x-protobuf", "", otlpToken, []byte{0xff, 0xff, 0xff})
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = post(t, base+"/v1/traces", "application/json", "", otlpToken, []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"not hex"}]}]}]}`))
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	big := bytes.Repeat([]byte("x"), 300<<10)
	resp, _ = post(t, base+"/v1/traces", "application/x-protobuf", "", otlpToken, big)
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	resp, _ = post(t, base+"/v1/traces", "application/x-protobuf", "gzip", otlpToken, gzipped(t, big))
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "the limit holds after decompression too")
	assert.Equal(t, 46, queryInt(t, store, `SELECT count(*) FROM calls`))

	code, metrics := d.get(t, "/metrics", "")
	require.Equal(t, http.StatusOK, code)
	for _, want := range []string{
		`mcptrail_otlp_records_accepted_total{signal="traces"} 90`,
		`mcptrail_otlp_records_accepted_total{signal="logs"} 1`,
		`mcptrail_otlp_records_received_total{signal="traces"} 96`,
		`mcptrail_otlp_records_dropped_total{reason="not_mcp",signal="traces"} 3`,
		`mcptrail_otlp_records_dropped_total{reason="bad_decision",signal="traces"} 3`,
		`mcptrail_otlp_requests_total{code="413",signal="traces"} 2`,
	} {
		assert.Contains(t, metrics, want)
	}

	// The API token is taken too (exporters set up before the receiver had
	// a token of its own); the exporters' token opens no API endpoint.
	resp, body = post(t, base+"/v1/traces", "application/x-protobuf", "", otlpAPIToken, batch)
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	code, _ = d.get(t, "/api/v1/status", otlpToken)
	assert.Equal(t, http.StatusUnauthorized, code, "the exporters' token is no API token")
	code, _ = d.get(t, "/api/v1/status", otlpAPIToken)
	assert.Equal(t, http.StatusOK, code)
}

func TestServeRefusesABadOTLPSetup(t *testing.T) {
	store := openStore(t)
	for _, tc := range []struct {
		edit      func(*Options)
		key, want string
	}{
		{func(o *Options) { o.OTLPListen, o.HTTPToken = "127.0.0.1:0", otlpAPIToken }, "otlp.token", "never served without a token"},
		{func(o *Options) { o.OTLPListen, o.OTLPToken, o.OTLPServer = "127.0.0.1:0", otlpToken, "a/b" }, "otlp.server", "an MCP server name"},
	} {
		opts := testOptions(t)
		tc.edit(&opts)
		err := Run(context.Background(), store, opts, testLogger(t), nil)
		var ce *ConfigError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, tc.key, ce.Key)
		assert.Contains(t, err.Error(), tc.want)
	}

	// A taken otlp.listen names the setting.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	opts := testOptions(t)
	opts.OTLPListen, opts.OTLPToken = ln.Addr().String(), otlpToken
	err = Run(context.Background(), store, opts, testLogger(t), nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "otlp.listen "+ln.Addr().String())
	assert.Contains(t, err.Error(), "MCPTRAIL_OTLP_LISTEN")
}
