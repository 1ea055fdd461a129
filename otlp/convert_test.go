package otlp

import (
	"encoding/hex"
	"encoding/json"
	"strings"
	"testing"
	"time"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mcptrail/mcptrail/audit"
)

var (
	traceA = mustHex("0af7651916cd43dd8448eb211c80319c")
	spanA  = mustHex("b7ad6b7169203331")
	spanB  = mustHex("00f067aa0ba902b7")
	t0     = time.Date(2026, 11, 3, 14, 5, 9, 123456789, time.UTC)
)

func mustHex(s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func kv(k string, v any) *commonpb.KeyValue {
	av := &commonpb.AnyValue{}
	switch x := v.(type) {
	case string:
		av.Value = &commonpb.AnyValue_StringValue{StringValue: x}
	case int:
		av.Value = &commonpb.AnyValue_IntValue{IntValue: int64(x)}
	case bool:
		av.Value = &commonpb.AnyValue_BoolValue{BoolValue: x}
	case *commonpb.AnyValue:
		av = x
	}
	return &commonpb.KeyValue{Key: k, Value: av}
}

// toolSpan is a gateway's span of a tools/call of get_vm_status.
// agentTurn is the parent of toolSpan: an agent's turn that propagated its
// trace context, so that the trace groups its calls.
var agentTurn = []byte{9, 9, 9, 9, 9, 9, 9, 9}

func toolSpan(extra ...*commonpb.KeyValue) *tracepb.Span {
	return &tracepb.Span{
		TraceId: traceA, SpanId: spanA, ParentSpanId: agentTurn, Name: "tools/call get_vm_status",
		Kind:              tracepb.Span_SPAN_KIND_SERVER,
		StartTimeUnixNano: uint64(t0.UnixNano()), EndTimeUnixNano: uint64(t0.Add(1500 * time.Microsecond).UnixNano()),
		Attributes: append([]*commonpb.KeyValue{kv("mcp.method.name", "tools/call"), kv("gen_ai.tool.name", "get_vm_status")}, extra...),
	}
}

func traces(resource []*commonpb.KeyValue, spans ...*tracepb.Span) *coltrace.ExportTraceServiceRequest {
	return &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource:   &resourcepb.Resource{Attributes: resource},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}},
	}}}
}

var gatewayResource = []*commonpb.KeyValue{kv("service.name", "proxmox-mcp"), kv("service.instance.id", "gw-1")}

func one(t *testing.T, res Result) audit.Event {
	t.Helper()
	if len(res.Events) != 1 {
		t.Fatalf("want 1 event, got %d (dropped %v, rejected %v: %s)", len(res.Events), res.Dropped, res.Rejected, res.Message)
	}
	return res.Events[0]
}

func TestSpanMapping(t *testing.T) {
	ms := 1.5
	base := audit.Event{
		ID: "otlp:0af7651916cd43dd8448eb211c80319c:b7ad6b7169203331", TS: t0, Server: "proxmox-mcp",
		Tool: "get_vm_status", Method: "tools/call", Decision: audit.Allowed, Status: "ok", Gateway: "gw-1",
		LatencyMS: &ms,
		Attrs:     map[string]string{"service.name": "proxmox-mcp", audit.AttrTraceID: "0af7651916cd43dd8448eb211c80319c"},
	}
	code := int64(-32602)
	cases := []struct {
		name     string
		resource []*commonpb.KeyValue
		span     *tracepb.Span
		opts     Options
		edit     func(e *audit.Event)
	}{
		{"base", gatewayResource, toolSpan(), Options{}, func(*audit.Event) {}},
		{"tool from mcp.tool.name", gatewayResource, func() *tracepb.Span {
			s := toolSpan()
			s.Attributes = []*commonpb.KeyValue{kv("mcp.method.name", "tools/call"), kv("mcp.tool.name", "get_vm_status")}
			return s
		}(), Options{}, func(*audit.Event) {}},
		{"tool from tool.name with execute_tool", gatewayResource, func() *tracepb.Span {
			s := toolSpan()
			s.Attributes = []*commonpb.KeyValue{kv("gen_ai.operation.name", "execute_tool"), kv("tool.name", "get_vm_status")}
			return s
		}(), Options{}, func(*audit.Event) {}},
		{"server from mcp.server.name", gatewayResource, toolSpan(kv("mcp.server.name", "pve"), kv("server.address", "10.0.0.5")), Options{},
			func(e *audit.Event) { e.Server = "pve" }},
		{"server from mcp.target", gatewayResource, toolSpan(kv("mcp.target", "pve"), kv("server.address", "10.0.0.5")), Options{},
			func(e *audit.Event) { e.Server = "pve" }},
		{"server from server.address", gatewayResource, toolSpan(kv("server.address", "pve.lan")), Options{},
			func(e *audit.Event) { e.Server = "pve.lan" }},
		{"server override wins", gatewayResource, toolSpan(kv("mcp.server.name", "pve")), Options{Server: "forced"},
			func(e *audit.Event) { e.Server = "forced" }},
		{"gateway from host.name", []*commonpb.KeyValue{kv("service.name", "proxmox-mcp"), kv("host.name", "box")}, toolSpan(), Options{},
			func(e *audit.Event) { e.Gateway = "box" }},
		{"decision denied from mcp.gateway.decision", gatewayResource, toolSpan(kv("mcp.gateway.decision", "deny"), kv("mcp.gateway.rule", "/tools/x"), kv("mcp.gateway.reason", "no")), Options{},
			func(e *audit.Event) { e.Decision, e.Status, e.Rule, e.Reason = audit.Denied, "", "/tools/x", "no" }},
		{"decision from policy.decision", gatewayResource, toolSpan(kv("policy.decision", "rate_limited")), Options{},
			func(e *audit.Event) { e.Decision, e.Status = audit.RateLimited, "" }},
		{"status error from error.type", gatewayResource, toolSpan(kv("error.type", "tool_error")), Options{},
			func(e *audit.Event) { e.Status = "error"; e.Attrs["error.type"] = "tool_error" }},
		{"status error from span status", gatewayResource, func() *tracepb.Span {
			s := toolSpan()
			s.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR}
			return s
		}(), Options{}, func(e *audit.Event) { e.Status = "error" }},
		{"status error from rpc.response.status_code", gatewayResource, toolSpan(kv("rpc.response.status_code", "-32602")), Options{},
			func(e *audit.Event) { e.Status, e.ErrorCode = "error", &code }},
		{"rpc status 0 is ok", gatewayResource, toolSpan(kv("rpc.response.status_code", 0)), Options{}, func(*audit.Event) {}},
		{"agent from gen_ai.agent.id first", gatewayResource, toolSpan(kv("jwt.sub", "sub"), kv("enduser.id", "eu"), kv("gen_ai.agent.id", "agent-7")), Options{},
			func(e *audit.Event) { e.Agent = "agent-7" }},
		{"agent from enduser.id", gatewayResource, toolSpan(kv("jwt.sub", "sub"), kv("enduser.id", "eu")), Options{}, func(e *audit.Event) { e.Agent = "eu" }},
		{"agent from user.id", gatewayResource, toolSpan(kv("jwt.sub", "sub"), kv("user.id", "u")), Options{}, func(e *audit.Event) { e.Agent = "u" }},
		{"agent from jwt.sub", gatewayResource, toolSpan(kv("jwt.sub", "sub")), Options{}, func(e *audit.Event) { e.Agent = "sub" }},
		{"grant and policy version", gatewayResource, toolSpan(kv("mcp.gateway.grant", "ci"), kv("policy.version", "7")), Options{},
			func(e *audit.Event) { e.Grant, e.PolicyVersion = "ci", "7" }},
		{"request id (int)", gatewayResource, toolSpan(kv("jsonrpc.request.id", 42)), Options{}, func(e *audit.Event) { e.RequestID = "42" }},
		{"session from mcp.session.id", gatewayResource, toolSpan(kv("mcp.session.id", "s-1"), kv("gen_ai.conversation.id", "c-1")), Options{},
			func(e *audit.Event) { e.Session, e.Attrs[audit.AttrConversationID] = "s-1", "c-1" }},
		{"a root span's trace is no session", gatewayResource, func() *tracepb.Span { s := toolSpan(); s.ParentSpanId = nil; return s }(), Options{},
			func(e *audit.Event) { delete(e.Attrs, audit.AttrTraceID) }},
		{"session from conversation", gatewayResource, toolSpan(kv("gen_ai.conversation.id", "c-1")), Options{},
			func(e *audit.Event) { e.Attrs[audit.AttrConversationID] = "c-1" }},
		{"client.address to attrs", gatewayResource, toolSpan(kv("client.address", "192.0.2.7")), Options{},
			func(e *audit.Event) { e.Attrs["client.address"] = "192.0.2.7" }},
		{"arguments hashed, keys only", gatewayResource, toolSpan(kv("gen_ai.tool.call.arguments", `{"vmid":100,"node":"pve"}`)), Options{},
			func(e *audit.Event) {
				_, e.ArgsHash, _ = audit.CanonicalArgs([]byte(`{"node":"pve","vmid":100}`))
				e.ArgKeys = []string{"node", "vmid"}
			}},
		{"arguments kept with StoreArgs", gatewayResource, toolSpan(kv("gen_ai.tool.call.arguments", `{"vmid":100,"node":"pve"}`)), Options{StoreArgs: true},
			func(e *audit.Event) {
				e.Args, e.ArgsHash, _ = audit.CanonicalArgs([]byte(`{"node":"pve","vmid":100}`))
				e.ArgKeys = []string{"node", "vmid"}
			}},
		{"arguments as a key-value list", gatewayResource, toolSpan(kv("gen_ai.tool.call.arguments", &commonpb.AnyValue{Value: &commonpb.AnyValue_KvlistValue{
			KvlistValue: &commonpb.KeyValueList{Values: []*commonpb.KeyValue{kv("vmid", 100), kv("node", "pve")}}}})), Options{},
			func(e *audit.Event) {
				_, e.ArgsHash, _ = audit.CanonicalArgs([]byte(`{"node":"pve","vmid":100}`))
				e.ArgKeys = []string{"node", "vmid"}
			}},
		{"long attrs value truncated", gatewayResource, toolSpan(kv("client.address", strings.Repeat("a", 2000))), Options{},
			func(e *audit.Event) { e.Attrs["client.address"] = strings.Repeat("a", 1024) }},
		{"no ids: hashed id, no trace session", gatewayResource, func() *tracepb.Span {
			s := toolSpan()
			s.TraceId, s.SpanId = nil, nil
			return s
		}(), Options{}, func(e *audit.Event) {
			e.ID = hashID(&resourcepb.Resource{Attributes: gatewayResource}, func() *tracepb.Span { s := toolSpan(); s.TraceId, s.SpanId = nil, nil; return s }())
			e.Session = ""
			delete(e.Attrs, audit.AttrTraceID)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			want := base
			want.Attrs = map[string]string{"service.name": "proxmox-mcp", audit.AttrTraceID: "0af7651916cd43dd8448eb211c80319c"}
			c.edit(&want)
			req := traces(c.resource, c.span)
			for _, enc := range []Encoding{Protobuf, JSON} {
				got := one(t, FromTraces(roundTrip(t, req, enc), c.opts))
				assertEvent(t, enc, want, got)
			}
		})
	}
}

// roundTrip encodes req as OTLP and decodes it again, so that every case runs
// through both encodings' decoders.
func roundTrip(t *testing.T, req *coltrace.ExportTraceServiceRequest, enc Encoding) *coltrace.ExportTraceServiceRequest {
	t.Helper()
	data := encode(t, req, enc)
	out, err := UnmarshalTraces(data, enc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func encode(t *testing.T, m proto.Message, enc Encoding) []byte {
	t.Helper()
	if enc == Protobuf {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b, err := MarshalJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func assertEvent(t *testing.T, enc Encoding, want, got audit.Event) {
	t.Helper()
	w, g := eventString(want), eventString(got)
	if w != g {
		t.Errorf("encoding %d:\nwant %s\ngot  %s", enc, w, g)
	}
}

func eventString(e audit.Event) string {
	b, _ := json.Marshal(e)
	return string(b)
}

func TestDroppedAndRejected(t *testing.T) {
	noTool := toolSpan()
	noTool.Attributes = []*commonpb.KeyValue{kv("mcp.method.name", "tools/call")}
	list := toolSpan()
	list.Attributes = []*commonpb.KeyValue{kv("mcp.method.name", "tools/list")}
	http := toolSpan()
	http.Attributes = []*commonpb.KeyValue{kv("http.request.method", "POST")}
	exec := toolSpan()
	exec.Attributes = []*commonpb.KeyValue{kv("gen_ai.operation.name", "execute_tool")}
	badDecision := toolSpan(kv("mcp.gateway.decision", "maybe"))
	longSession := toolSpan(kv("mcp.session.id", strings.Repeat("s", 1025)))
	bigArgs := toolSpan(kv("gen_ai.tool.call.arguments", `{"a":"`+strings.Repeat("x", 70000)+`"}`))
	notObject := toolSpan(kv("gen_ai.tool.call.arguments", `[1]`))
	noTime := toolSpan()
	noTime.StartTimeUnixNano = 0
	ok := toolSpan()
	ok.SpanId = spanB
	// A client span to the upstream inside the gateway's server span.
	child := toolSpan()
	child.SpanId, child.ParentSpanId = mustHex("1111111111111111"), spanB

	notObject.SpanId = mustHex("2222222222222222")
	res := FromTraces(traces(gatewayResource, noTool, list, http, exec, badDecision, longSession, bigArgs, notObject, noTime, ok, child), Options{})
	if res.Records != 11 || len(res.Events) != 2 {
		t.Fatalf("records %d events %d", res.Records, len(res.Events))
	}
	// Arguments that are no JSON object: the call is kept without them.
	kept := res.Events[0]
	if kept.ArgsHash != "" || len(kept.ArgKeys) != 0 || !strings.Contains(kept.Attrs[AttrArgsError], "gen_ai.tool.call.arguments") {
		t.Errorf("arguments that are no object: %+v", kept)
	}
	wantDropped := map[string]int{DropOtherCall: 1, DropNotMCP: 1, DropNoToolName: 1, DropNested: 1}
	wantRejected := map[string]int{audit.ReasonMissingTool: 1, audit.ReasonBadDecision: 1, audit.ReasonFieldTooLong: 1,
		audit.ReasonTooLarge: 1, audit.ReasonMissingTS: 1}
	if !equalCounts(res.Dropped, wantDropped) {
		t.Errorf("dropped %v, want %v", res.Dropped, wantDropped)
	}
	if !equalCounts(res.Rejected, wantRejected) {
		t.Errorf("rejected %v, want %v", res.Rejected, wantRejected)
	}
	if res.RejectedCount() != 5 || !strings.Contains(res.Message, "tools/call") {
		t.Errorf("rejected count %d, message %q", res.RejectedCount(), res.Message)
	}
	// The rejected records are kept for dead letters, without argument values.
	if len(res.Rejects) != 5 {
		t.Fatalf("rejects %d", len(res.Rejects))
	}
	for _, rj := range res.Rejects {
		if strings.Contains(string(rj.Raw), "xxxx") || strings.Contains(string(rj.Raw), "gen_ai.tool.call.arguments") || !strings.Contains(string(rj.Raw), `"traceId":"0af7651916cd43dd8448eb211c80319c"`) {
			t.Errorf("%s: raw %.200s", rj.Err.Reason, rj.Raw)
		}
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestLogMapping(t *testing.T) {
	rec := &logspb.LogRecord{
		ObservedTimeUnixNano: uint64(t0.UnixNano()), TraceId: traceA, SpanId: spanA,
		Attributes: []*commonpb.KeyValue{kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "get_vm_status"),
			kv("mcp.server.name", "pve"), kv("policy.decision", "denied")},
	}
	req := &collogs.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		Resource:  &resourcepb.Resource{Attributes: gatewayResource},
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{rec, {TimeUnixNano: 1, Body: &commonpb.AnyValue{}}}}},
	}}}
	var ids []string
	for _, enc := range []Encoding{Protobuf, JSON} {
		decoded, err := UnmarshalLogs(encode(t, req, enc), enc)
		if err != nil {
			t.Fatal(err)
		}
		res := FromLogs(decoded, Options{})
		e := one(t, res)
		if res.Records != 2 || res.Dropped[DropNotMCP] != 1 {
			t.Errorf("records %d dropped %v", res.Records, res.Dropped)
		}
		if !e.TS.Equal(t0) || e.Server != "pve" || e.Decision != audit.Denied || e.Status != "" || e.LatencyMS != nil ||
			e.Session != "" || e.Attrs[audit.AttrTraceID] != "0af7651916cd43dd8448eb211c80319c" || e.Gateway != "gw-1" || !strings.HasPrefix(e.ID, "otlp:sha256:") {
			t.Errorf("encoding %d: %s", enc, eventString(e))
		}
		ids = append(ids, e.ID)
	}
	if ids[0] != ids[1] {
		t.Errorf("a log record's id depends on its encoding: %v", ids)
	}
}

// TestJSONHexIDs holds the OTLP/JSON rule that trace and span ids are hex
// (not protojson's base64), as the collector's file exporter writes them.
func TestJSONHexIDs(t *testing.T) {
	body := `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"proxmox-mcp"}}]},
	"scopeSpans":[{"scope":{"name":"gw"},"spans":[{"traceId":"5B8EFFF798038103D269B633813FC60C","spanId":"EEE19B7EC3C1B174",
	"parentSpanId":"","name":"tools/call","kind":2,"startTimeUnixNano":"1544712660000000000","endTimeUnixNano":"1544712661000000000",
	"attributes":[{"key":"mcp.method.name","value":{"stringValue":"tools/call"}},{"key":"gen_ai.tool.name","value":{"stringValue":"get_vm_status"}},
	{"key":"jsonrpc.request.id","value":{"intValue":"7"}}],"status":{"code":2}}]}]}]}`
	req, err := UnmarshalTraces([]byte(body), JSON)
	if err != nil {
		t.Fatal(err)
	}
	sp := req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if hex.EncodeToString(sp.TraceId) != "5b8efff798038103d269b633813fc60c" || hex.EncodeToString(sp.SpanId) != "eee19b7ec3c1b174" {
		t.Fatalf("ids %x %x", sp.TraceId, sp.SpanId)
	}
	e := one(t, FromTraces(req, Options{}))
	if e.ID != "otlp:5b8efff798038103d269b633813fc60c:eee19b7ec3c1b174" || e.RequestID != "7" || e.Status != "error" ||
		*e.LatencyMS != 1000 || !e.TS.Equal(time.Unix(1544712660, 0)) {
		t.Errorf("%s", eventString(e))
	}
	// protojson's own JSON would carry base64 ids: MarshalJSON writes hex.
	out, err := MarshalJSON(req)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"traceId":"5b8efff798038103d269b633813fc60c"`) {
		t.Errorf("MarshalJSON: %s", out)
	}
	for _, bad := range []string{`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz"}]}]}]}`, `{"resourceSpans":`, `{} {}`, `{"resourceSpans":[{"bogus":1}]}`} {
		if _, err := UnmarshalTraces([]byte(bad), JSON); err != nil {
			continue
		}
		if bad != `{"resourceSpans":[{"bogus":1}]}` {
			t.Errorf("%s: no error", bad)
		}
	}
	// Only member names are ids: the same words inside a string value (an
	// attribute holding JSON) stay as they are; white space around the colon
	// is allowed.
	tricky := `{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId" : "5b8efff798038103d269b633813fc60c","spanId":` +
		`"eee19b7ec3c1b174","attributes":[{"key":"note","value":{"stringValue":"{\"traceId\":\"zz\",\"spanId\":\"\\\"}"}}]}]}]}]}`
	req, err = UnmarshalTraces([]byte(tricky), JSON)
	if err != nil {
		t.Fatal(err)
	}
	sp = req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if hex.EncodeToString(sp.TraceId) != "5b8efff798038103d269b633813fc60c" || hex.EncodeToString(sp.SpanId) != "eee19b7ec3c1b174" ||
		sp.Attributes[0].Value.GetStringValue() != `{"traceId":"zz","spanId":"\"}` {
		t.Errorf("ids %x %x, attribute %q", sp.TraceId, sp.SpanId, sp.Attributes[0].Value.GetStringValue())
	}
	// The proto field names are ids too (protojson reads both spellings);
	// a member name that only begins like one, or is longer, is not.
	snake := `{"resource_spans":[{"scope_spans":[{"spans":[{"trace_id":"5b8efff798038103d269b633813fc60c","span_id":"eee19b7ec3c1b174",` +
		`"parent_span_id":"00f067aa0ba902b7","attributes":[{"key":"traceIdx","value":{"stringValue":"zz"}}],"name":"traceId"}]}]}]}`
	req, err = UnmarshalTraces([]byte(snake), JSON)
	if err != nil {
		t.Fatal(err)
	}
	sp = req.ResourceSpans[0].ScopeSpans[0].Spans[0]
	if hex.EncodeToString(sp.TraceId) != "5b8efff798038103d269b633813fc60c" || hex.EncodeToString(sp.SpanId) != "eee19b7ec3c1b174" ||
		hex.EncodeToString(sp.ParentSpanId) != "00f067aa0ba902b7" || sp.Name != "traceId" {
		t.Errorf("ids %x %x %x, name %q", sp.TraceId, sp.SpanId, sp.ParentSpanId, sp.Name)
	}
	if _, err := UnmarshalTraces([]byte{0xff, 0xff, 0xff}, Protobuf); err == nil {
		t.Error("malformed protobuf: no error")
	}
}

// A rejected record's dead letter keeps no argument value without
// store_args, wherever a gateway puts them: under an attribute name of its
// own (ToolHive's mcp.tool.arguments), in a span event (Archestra's
// gen_ai.content.input) or link, in a span's status message (an upstream
// error quoting them), or in a log record's body (the JSON-RPC request).
// The attributes the mapping reads keep their values, the others their
// keys.
func TestRejectedRecordsKeepNoArgumentValue(t *testing.T) {
	const secret = "ghp_SECRET"
	span := toolSpan(kv("mcp.gateway.decision", "maybe"), kv("mcp.gateway.rule", "/tools/x"), // rejected: bad_decision
		kv("mcp.tool.arguments", "token="+secret), kv("gen_ai.tool.call.arguments", `{"token":"`+secret+`"}`))
	span.Events = []*tracepb.Span_Event{{Name: "gen_ai.content.input", Attributes: []*commonpb.KeyValue{kv("gen_ai.tool.call.arguments", `{"token":"`+secret+`"}`)}}}
	span.Links = []*tracepb.Span_Link{{TraceId: traceA, SpanId: spanA, Attributes: []*commonpb.KeyValue{kv("input", secret)}}}
	span.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "bad token " + secret}
	rec := &logspb.LogRecord{TimeUnixNano: uint64(t0.UnixNano()),
		Attributes: []*commonpb.KeyValue{kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "get_vm_status"),
			kv("mcp.gateway.decision", "maybe"), kv("mcp.gateway.rule", "/tools/x"), kv("mcp.tool.arguments", secret)},
		Body: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: `{"method":"tools/call","params":{"name":"x","arguments":{"token":"` + secret + `"}}}`}}}
	logs := &collogs.ExportLogsServiceRequest{ResourceLogs: []*logspb.ResourceLogs{{
		Resource:  &resourcepb.Resource{Attributes: gatewayResource},
		ScopeLogs: []*logspb.ScopeLogs{{LogRecords: []*logspb.LogRecord{rec}}},
	}}}
	for _, res := range []Result{FromTraces(traces(gatewayResource, span), Options{}), FromLogs(logs, Options{})} {
		if len(res.Rejects) != 1 {
			t.Fatalf("rejects %d, rejected %v", len(res.Rejects), res.Rejected)
		}
		raw := string(res.Rejects[0].Raw)
		if strings.Contains(raw, secret) {
			t.Errorf("the dead letter keeps an argument value: %s", raw)
		}
		for _, kept := range []string{`"mcp.tool.arguments"`, `"/tools/x"`, audit.Redacted} {
			if !strings.Contains(raw, kept) {
				t.Errorf("the dead letter lacks %s: %s", kept, raw)
			}
		}
	}
	stored := FromTraces(traces(gatewayResource, span), Options{StoreArgs: true})
	if !strings.Contains(string(stored.Rejects[0].Raw), secret) {
		t.Error("with store_args the record is kept as it came")
	}
}

// Malformed OTLP/JSON is refused with protojson's message, which quotes the
// token it could not read: a log body or an attribute value written as a
// bare string, which may hold a tool call's arguments. The message keeps
// where and what went wrong, and a field's name, not the value.
func TestMalformedJSONQuotesNoValue(t *testing.T) {
	const secret = "ghp_SECRET"
	for _, doc := range []string{
		`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"timeUnixNano":"1764900000000000000","body":"tools/call vm_exec {\"password\":\"` + secret + `\"}"}]}]}]}`,
		`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"attributes":[{"key":"gen_ai.tool.call.arguments","value":"{\"password\":\"` + secret + `\"}"}]}]}]}]}`,
		`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"attributes":[{"key":"x","value":{"boolValue":"` + secret + `"}}]}]}]}]}`,
		// Tokens protojson writes without quotes.
		`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":` + secret + `}]}]}]}`,
		`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"a"} ` + secret + `}]}]}]}`,
		`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":1234` + secret[4:] + `}]}]}]}`,
		`{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"attributes":[{"key":"x","value":{"boolValue":7777}}]}]}]}]}`,
	} {
		_, err := Decode([]byte(doc), JSON, Logs, Options{})
		if err == nil {
			t.Fatalf("%s: decoded", doc)
		}
		if msg := err.Error(); strings.Contains(msg, secret) || strings.Contains(msg, "7777") || strings.Contains(msg, secret[4:]) ||
			!strings.Contains(msg, "malformed JSON") || !strings.Contains(msg, "…") || !strings.Contains(msg, "(line 1:") {
			t.Errorf("%s: %s", doc, msg)
		}
	}
	_, err := Decode([]byte(`{"resourceLogs":[{"resource":{},"resource":{}}]}`), JSON, Logs, Options{})
	if err == nil || !strings.Contains(err.Error(), `field "resource"`) {
		t.Errorf("a field's name is kept: %v", err)
	}
}

// A gateway that writes no decision attribute still tells a refusal its
// own way, and a refused call read as allowed would count as use: a span
// Archestra's tool policy blocked (mcp.blocked, its reason, status ERROR)
// is denied; a call ToolHive's authorization answered 403 is denied, and
// one answered 429 rate limited; a result with isError (Archestra's
// mcp.is_error_result) is an allowed call with status error and no
// JSON-RPC error code. An explicit decision attribute still wins.
func TestGatewaysOwnRefusalsAndErrorResults(t *testing.T) {
	blocked := toolSpan(kv("mcp.blocked", true), kv("mcp.blocked_reason", "Tool invocation blocked: policy is configured to always block tool call"))
	blocked.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR, Message: "blocked"}
	for _, c := range []struct {
		name     string
		span     *tracepb.Span
		decision audit.Decision
		status   string
		reason   string
	}{
		{"archestra blocked", blocked, audit.Denied, "", "Tool invocation blocked: policy is configured to always block tool call"},
		{"toolhive 403", toolSpan(kv("http.response.status_code", 403)), audit.Denied, "", ""},
		{"429", toolSpan(kv("http.response.status_code", 429)), audit.RateLimited, "", ""},
		{"error result", toolSpan(kv("mcp.is_error_result", true)), audit.Allowed, "error", ""},
		{"200", toolSpan(kv("http.response.status_code", 200)), audit.Allowed, "ok", ""},
		{"explicit decision wins", toolSpan(kv("http.response.status_code", 403), kv("mcp.gateway.decision", "allowed")), audit.Allowed, "ok", ""},
	} {
		e := one(t, FromTraces(traces(gatewayResource, c.span), Options{}))
		if e.Decision != c.decision || e.Status != c.status || e.Reason != c.reason || e.ErrorCode != nil {
			t.Errorf("%s: decision %q status %q reason %q error_code %v", c.name, e.Decision, e.Status, e.Reason, e.ErrorCode)
		}
	}
}

// A request id sent as a double reads as the same id sent as an integer
// or in a native event: whole numbers in full, not in exponent form.
func TestDoubleAttributesReadAsJSONNumbers(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{{12345678, "12345678"}, {-3, "-3"}, {1.5, "1.5"}, {1e21, "1e+21"}} {
		sp := toolSpan(kv("jsonrpc.request.id", &commonpb.AnyValue{Value: &commonpb.AnyValue_DoubleValue{DoubleValue: c.v}}))
		if got := one(t, FromTraces(traces(gatewayResource, sp), Options{})).RequestID; got != c.want {
			t.Errorf("%g: request id %q, want %q", c.v, got, c.want)
		}
	}
}

// ToolHive writes a call's arguments as "key=value" text, no JSON: the
// call is kept without them (no args_hash, no arg_keys), saying why,
// rather than lost.
func TestArgumentsThatAreNoJSONKeepTheCall(t *testing.T) {
	e := one(t, FromTraces(traces(gatewayResource, toolSpan(kv("gen_ai.tool.call.arguments", "url=https://example.org, token=[REDACTED]"))), Options{}))
	if e.ArgsHash != "" || e.ArgKeys != nil || e.Attrs[AttrArgsError] == "" || e.Decision != audit.Allowed {
		t.Errorf("kept as %+v", e)
	}
	// Why, without quoting the arguments (a JSON error names the
	// character it stopped at).
	e = one(t, FromTraces(traces(gatewayResource, toolSpan(kv("gen_ai.tool.call.arguments", `{"token": Xsecret}`))), Options{}))
	if got := e.Attrs[AttrArgsError]; got != "gen_ai.tool.call.arguments: not one JSON object (malformed_json)" {
		t.Errorf("args_error %q", got)
	}
}

// An agent's execute_tool span, its MCP client span, the gateway's server
// span and the gateway's client span to the upstream, all in one request,
// give one event: the gateway's server span, which records the decision
// and the server (the outermost span, the agent's, names neither).
func TestNestedCallSpansGiveTheGatewaysServerSpan(t *testing.T) {
	ids := [][]byte{mustHex("1000000000000001"), mustHex("1000000000000002"), mustHex("1000000000000003"), mustHex("1000000000000004")}
	span := func(i int, kind tracepb.Span_SpanKind, attrs ...*commonpb.KeyValue) *tracepb.Span {
		sp := toolSpan(attrs...)
		sp.SpanId, sp.Kind = ids[i], kind
		if i > 0 {
			sp.ParentSpanId = ids[i-1]
		}
		return sp
	}
	agentTurn := span(0, tracepb.Span_SPAN_KIND_INTERNAL, kv("gen_ai.operation.name", "execute_tool"))
	agentTurn.Attributes = []*commonpb.KeyValue{kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", "get_vm_status")}
	agentClient := span(1, tracepb.Span_SPAN_KIND_CLIENT)
	gateway := span(2, tracepb.Span_SPAN_KIND_SERVER, kv("mcp.server.name", "pve"), kv("mcp.gateway.decision", "denied"))
	upstream := span(3, tracepb.Span_SPAN_KIND_CLIENT)
	req := &coltrace.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{
		{Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{kv("service.name", "my-agent")}},
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{agentTurn, agentClient}}}},
		{Resource: &resourcepb.Resource{Attributes: gatewayResource},
			ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{gateway, upstream}}}},
	}}
	res := FromTraces(req, Options{})
	e := one(t, res)
	if e.Server != "pve" || e.Decision != audit.Denied || e.Gateway != "gw-1" || res.Dropped[DropNested] != 3 {
		t.Errorf("event %+v, dropped %v", e, res.Dropped)
	}
}
