package otlp

import (
	"crypto/sha256"
	"math"
	"strconv"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/mcptrail/mcptrail/audit"
)

// ExporterName is the resource service.name of spans made by TracesRequest.
const ExporterName = "mcptrail-simulate"

// TracesRequest writes events as a gateway exporting OpenTelemetry would: one
// span each, named by the MCP semantic conventions and the decision
// attributes this package reads, so that FromTraces gives the events back
// (with ids of its own: the trace id is derived from the session, the span id
// from the event id). Spans are grouped by gateway (one resource each, its
// service.instance.id), in the order the gateways first appear.
//
// A span of an event with a session has a parent, the agent's task of that
// session, so that its trace groups the session's calls (an agent that
// propagates its trace context). With opts.Stateless the spans carry no
// mcp.session.id, as stateless MCP traffic (specification 2026-07-28).
func TracesRequest(events []audit.Event, opts EncodeOptions) *coltrace.ExportTraceServiceRequest {
	req := &coltrace.ExportTraceServiceRequest{}
	byGateway := map[string]*tracepb.ScopeSpans{}
	for i := range events {
		e := &events[i]
		ss := byGateway[e.Gateway]
		if ss == nil {
			attrs := []*commonpb.KeyValue{str("service.name", ExporterName)}
			if e.Gateway != "" {
				attrs = append(attrs, str("service.instance.id", e.Gateway))
			}
			ss = &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: ExporterName}}
			byGateway[e.Gateway] = ss
			req.ResourceSpans = append(req.ResourceSpans, &tracepb.ResourceSpans{
				Resource: &resourcepb.Resource{Attributes: attrs}, ScopeSpans: []*tracepb.ScopeSpans{ss}})
		}
		ss.Spans = append(ss.Spans, Span(e, opts))
	}
	return req
}

// EncodeOptions shape the spans TracesRequest writes.
type EncodeOptions struct {
	// Stateless leaves out mcp.session.id: the calls of a session are then
	// correlated by their trace only.
	Stateless bool
}

// Span is the span of one event (see TracesRequest).
func Span(e *audit.Event, opts EncodeOptions) *tracepb.Span {
	traceKey := e.Session
	if traceKey == "" {
		traceKey = e.ID
	}
	tsum := sha256.Sum256([]byte("trace\x00" + traceKey))
	ssum := sha256.Sum256([]byte("span\x00" + e.ID))
	method := e.Method
	if method == "" {
		method = audit.DefaultMethod
	}
	sp := &tracepb.Span{
		TraceId: tsum[:16], SpanId: ssum[:8], Name: method + " " + e.Tool, Kind: tracepb.Span_SPAN_KIND_SERVER,
		StartTimeUnixNano: uint64(e.TS.UnixNano()), EndTimeUnixNano: uint64(e.TS.UnixNano()),
	}
	if e.Session != "" {
		psum := sha256.Sum256([]byte("task\x00" + e.Session))
		sp.ParentSpanId = psum[:8]
	}
	session := e.Session
	if opts.Stateless {
		session = ""
	}
	if e.LatencyMS != nil {
		sp.EndTimeUnixNano += uint64(math.Round(*e.LatencyMS * 1e6))
	}
	attrs := []*commonpb.KeyValue{str("mcp.method.name", method), str("gen_ai.operation.name", opExecuteTool)}
	for _, kv := range [...]struct{ k, v string }{
		{"gen_ai.tool.name", e.Tool}, {"mcp.server.name", e.Server}, {attrSession, session}, {attrRequestID, e.RequestID},
		{"gen_ai.agent.id", e.Agent}, {"mcp.gateway.decision", string(e.Decision)}, {"mcp.gateway.grant", e.Grant},
		{"mcp.gateway.rule", e.Rule}, {"mcp.gateway.reason", e.Reason}, {"mcp.gateway.policy_version", e.PolicyVersion},
	} {
		if kv.v != "" {
			attrs = append(attrs, str(kv.k, kv.v))
		}
	}
	if e.Status == "error" {
		attrs = append(attrs, str(attrErrorType, "tool_error"))
		sp.Status = &tracepb.Status{Code: tracepb.Status_STATUS_CODE_ERROR}
	}
	if e.ErrorCode != nil {
		attrs = append(attrs, str(attrRPCStatus, strconv.FormatInt(*e.ErrorCode, 10)))
	}
	if len(e.Args) > 0 {
		attrs = append(attrs, str(attrArguments, string(e.Args)))
	}
	sp.Attributes = attrs
	return sp
}

func str(k, v string) *commonpb.KeyValue {
	return &commonpb.KeyValue{Key: k, Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: v}}}
}
