package otlp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/mcptrail/mcptrail/audit"
)

// Reasons a span or log record is dropped: it is no MCP tool call. They are
// metric labels, so never rename one.
const (
	DropNotMCP     = "not_mcp"      // neither mcp.method.name nor gen_ai.operation.name=execute_tool
	DropOtherCall  = "other_method" // an MCP request other than tools/call (initialize, tools/list, …)
	DropNoToolName = "no_tool_name" // execute_tool without a tool name
	DropNested     = "nested"       // a tool-call span nested with others of its call in the request, which give the event (nestedCalls)
)

// Options controls the conversion.
type Options struct {
	// Server, when set, names the server of every event (otlp.server,
	// ingest --server), whatever the attributes say.
	Server string
	// StoreArgs keeps the argument values (ingest.store_args); otherwise only
	// their hash and top-level keys.
	StoreArgs bool
	// MaxFieldBytes bounds every string field (audit.DefaultMaxFieldBytes
	// when 0): a longer one rejects the record; a longer attrs value is
	// truncated.
	MaxFieldBytes int
	// MaxArgsBytes bounds gen_ai.tool.call.arguments
	// (audit.DefaultMaxEventBytes when 0): longer arguments reject the record.
	MaxArgsBytes int
}

func (o Options) withDefaults() Options {
	if o.MaxFieldBytes <= 0 {
		o.MaxFieldBytes = audit.DefaultMaxFieldBytes
	}
	if o.MaxArgsBytes <= 0 {
		o.MaxArgsBytes = audit.DefaultMaxEventBytes
	}
	return o
}

// Result is what one request gave.
type Result struct {
	Events  []audit.Event
	Records int            // spans or log records in the request
	Dropped map[string]int // not tool calls, by Drop* reason
	// Rejected counts the tool calls that could not become a valid event,
	// by audit reason code; Message describes the first.
	Rejected map[string]int
	Message  string
	// Rejects are the rejected records themselves, for dead letters.
	Rejects []Reject
}

// Reject is one rejected tool call: the rejection, and the record as
// OTLP/JSON (its gen_ai.tool.call.arguments left out unless StoreArgs).
type Reject struct {
	Err *audit.Rejection
	Raw []byte
	// Signal is Traces when Raw is a span, Logs when a log record, ""
	// when there is no record. Server is the server the record names
	// (Options.Server, else its attributes'), "" when none.
	Signal, Server string
}

// RejectedCount is the number of rejected records.
func (r *Result) RejectedCount() int {
	n := 0
	for _, c := range r.Rejected {
		n += c
	}
	return n
}

func (r *Result) drop(reason string) {
	if r.Dropped == nil {
		r.Dropped = map[string]int{}
	}
	r.Dropped[reason]++
}

// Reject counts a rejected tool call; record, when not nil, is kept in
// Rejects.
func (r *Result) Reject(err error, record proto.Message, opts Options) {
	if r.Rejected == nil {
		r.Rejected = map[string]int{}
	}
	r.Rejected[audit.ReasonOf(err)]++
	if r.Message == "" {
		r.Message = err.Error()
	}
	rej, ok := err.(*audit.Rejection)
	if !ok {
		rej = &audit.Rejection{Reason: audit.ReasonOf(err), Detail: err.Error()}
	}
	var raw []byte
	signal := ""
	switch record.(type) {
	case *tracepb.Span:
		signal = Traces
	case *logspb.LogRecord:
		signal = Logs
	}
	if signal != "" {
		if !opts.StoreArgs {
			record = withoutArgs(record)
		}
		raw, _ = MarshalJSON(record)
	}
	r.Rejects = append(r.Rejects, Reject{Err: rej, Raw: raw, Signal: signal})
}

// RedactRecord is an OTLP/JSON span (signal Traces) or log record (Logs)
// without argument values, as Reject keeps it without StoreArgs: for a
// rejected record that arrives from elsewhere (the receiver's, through
// the stream), which the ingester redacts again rather than trust.
func RedactRecord(data []byte, signal string) ([]byte, error) {
	var m proto.Message
	switch signal {
	case Traces:
		m = &tracepb.Span{}
	case Logs:
		m = &logspb.LogRecord{}
	default:
		return nil, fmt.Errorf("otlp: a rejected record of signal %q: want %s or %s", signal, Traces, Logs)
	}
	if err := unmarshal(data, JSON, m); err != nil {
		return nil, err
	}
	return MarshalJSON(withoutArgs(m))
}

// withoutArgs is a copy of a span or log record that keeps no argument
// value: gen_ai.tool.call.arguments goes, the attributes the mapping reads
// (none holds arguments) keep their values, and every other value is
// audit.Redacted, its key kept. Gateways carry arguments under names of
// their own (mcp.tool.arguments), in span events (gen_ai.content.input)
// and in a log record's body (the JSON-RPC request), so only what is known
// to hold none is kept: the record's other attributes, its events' and
// links' attributes, a span's status message and a log's body are
// redacted.
func withoutArgs(m proto.Message) proto.Message {
	m = proto.Clone(m)
	redacted := func() *commonpb.AnyValue {
		return &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: audit.Redacted}}
	}
	redact := func(kvs []*commonpb.KeyValue, keep map[string]bool) []*commonpb.KeyValue {
		kvs = slices.DeleteFunc(kvs, func(kv *commonpb.KeyValue) bool { return kv.GetKey() == attrArguments })
		for _, kv := range kvs {
			if !keep[kv.GetKey()] {
				kv.Value = redacted()
			}
		}
		return kvs
	}
	switch x := m.(type) {
	case *tracepb.Span:
		x.Attributes = redact(x.Attributes, wanted)
		if x.Status.GetMessage() != "" {
			x.Status.Message = audit.Redacted // an upstream error may quote the arguments
		}
		for _, e := range x.Events {
			e.Attributes = redact(e.Attributes, nil)
		}
		for _, l := range x.Links {
			l.Attributes = redact(l.Attributes, nil)
		}
	case *logspb.LogRecord:
		x.Attributes = redact(x.Attributes, wanted)
		if x.Body != nil {
			x.Body = redacted()
		}
	}
	return m
}

// AttrArgsError is the attribute of a call kept without its arguments
// because they were no JSON object: why.
const AttrArgsError = "args_error"

// The attribute names read (SPEC §1, OpenTelemetry).
const (
	attrMethod       = "mcp.method.name"
	attrOperation    = "gen_ai.operation.name"
	attrArguments    = "gen_ai.tool.call.arguments"
	attrServiceName  = "service.name"
	attrInstanceID   = "service.instance.id"
	attrHostName     = "host.name"
	attrSession      = "mcp.session.id"
	attrConversation = "gen_ai.conversation.id"
	attrRequestID    = "jsonrpc.request.id"
	attrErrorType    = "error.type"
	attrRPCStatus    = "rpc.response.status_code"
	attrClient       = "client.address"
	opExecuteTool    = "execute_tool"
	// Gateways' own signs of a refusal or an error result: a call a tool
	// policy blocked (Archestra: mcp.blocked, with mcp.blocked_reason), an
	// HTTP answer that refused it (ToolHive's authorization: 403; a rate
	// limit: 429), a result with isError (Archestra: mcp.is_error_result).
	attrBlocked       = "mcp.blocked"
	attrBlockedReason = "mcp.blocked_reason"
	attrHTTPStatus    = "http.response.status_code"
	attrIsErrorResult = "mcp.is_error_result"
)

var (
	toolAttrs     = []string{"gen_ai.tool.name", "mcp.tool.name", "tool.name"}
	serverAttrs   = []string{"mcp.server.name", "mcp.target", "server.address", attrServiceName}
	gatewayAttrs  = []string{attrInstanceID, attrHostName}
	agentAttrs    = []string{"gen_ai.agent.id", "enduser.id", "user.id", "jwt.sub"}
	decisionAttrs = []string{"mcp.gateway.decision", "policy.decision"}
	grantAttrs    = []string{"mcp.gateway.grant", "policy.grant"}
	ruleAttrs     = []string{"mcp.gateway.rule", "policy.rule"}
	reasonAttrs   = []string{"mcp.gateway.reason", "policy.reason", attrBlockedReason}
	versionAttrs  = []string{"mcp.gateway.policy_version", "policy.version"}
	// keptAttrs go to the event's attrs as they are (truncated to the field
	// limit).
	keptAttrs = []string{attrClient, "mcp.protocol.version", "network.transport", attrErrorType, attrServiceName}
)

// read holds the attributes of one record (and its resource) that the
// mapping reads, as strings; the record's own attributes win over the
// resource's.
type read map[string]string

var wanted = func() map[string]bool {
	m := map[string]bool{attrMethod: true, attrOperation: true, attrSession: true, attrConversation: true,
		attrRequestID: true, attrErrorType: true, attrRPCStatus: true, attrBlocked: true, attrHTTPStatus: true,
		attrIsErrorResult: true}
	for _, l := range [][]string{toolAttrs, serverAttrs, gatewayAttrs, agentAttrs, decisionAttrs, grantAttrs,
		ruleAttrs, reasonAttrs, versionAttrs, keptAttrs} {
		for _, k := range l {
			m[k] = true
		}
	}
	return m
}()

func (r read) add(kvs []*commonpb.KeyValue) {
	for _, kv := range kvs {
		if k := kv.GetKey(); wanted[k] {
			if s, ok := stringOf(kv.GetValue()); ok {
				r[k] = s
			}
		}
	}
}

func (r read) first(keys []string) string {
	for _, k := range keys {
		if v := r[k]; v != "" {
			return v
		}
	}
	return ""
}

// stringOf renders a scalar attribute value.
func stringOf(v *commonpb.AnyValue) (string, bool) {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue, true
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10), true
	case *commonpb.AnyValue_BoolValue:
		return strconv.FormatBool(x.BoolValue), true
	case *commonpb.AnyValue_DoubleValue:
		// As JSON writes a number: a whole one in full (a request id sent
		// as a double, 12345678, reads as the native event's), others in
		// the shortest form.
		if f := x.DoubleValue; f == math.Trunc(f) && math.Abs(f) < 1e21 {
			return strconv.FormatFloat(f, 'f', -1, 64), true
		}
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64), true
	}
	return "", false
}

// isToolCall tells whether the attributes describe an MCP tool call, and
// why not.
func isToolCall(r read) (bool, string) {
	if m, ok := r[attrMethod]; ok {
		if m == audit.DefaultMethod {
			return true, ""
		}
		return false, DropOtherCall
	}
	if r[attrOperation] == opExecuteTool {
		if r.first(toolAttrs) == "" {
			return false, DropNoToolName
		}
		return true, ""
	}
	return false, DropNotMCP
}

// readAttrs reads a record's attributes over its resource's.
func readAttrs(res *resourcepb.Resource, kvs []*commonpb.KeyValue) read {
	r := read{}
	r.add(res.GetAttributes())
	r.add(kvs)
	return r
}

// toolCall counts a record, and drops it (counted by reason) unless it is a
// tool call.
func (res *Result) toolCall(r read) bool {
	res.Records++
	ok, why := isToolCall(r)
	if !ok {
		res.drop(why)
	}
	return ok
}

// record is what the mapping needs of a span or a log record besides its
// attributes.
type record struct {
	id      string
	traceID []byte
	// groupTrace is the trace id when it groups more than this call (the
	// span has a parent: the agent's turn propagated its context); a root
	// tool-call span is a trace of one call, no correlation key.
	groupTrace []byte
	ts         time.Time
	latencyMS  *float64
	spanError  bool
	args       *commonpb.AnyValue
	msg        proto.Message // the span or log record
}

// FromTraces converts the tool-call spans of a request.
func FromTraces(req *coltrace.ExportTraceServiceRequest, opts Options) Result {
	opts = opts.withDefaults()
	var res Result
	// Spans that are tool calls, so that tool-call spans nested in one
	// another give one event (nestedCalls.keep).
	nested := nestedCalls{}
	var reads []read // each span's, read once for both passes
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r := readAttrs(rs.GetResource(), sp.GetAttributes())
				reads = append(reads, r)
				if ok, _ := isToolCall(r); ok {
					nested.add(sp)
				}
			}
		}
	}
	nested.markServerDescendants()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r := reads[0]
				reads = reads[1:]
				if !res.toolCall(r) {
					continue
				}
				if !nested.keep(sp) {
					res.drop(DropNested)
					continue
				}
				rec := record{traceID: sp.GetTraceId(), spanError: sp.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR,
					args: attr(sp.GetAttributes(), attrArguments), msg: sp}
				if start := sp.GetStartTimeUnixNano(); start > 0 {
					rec.ts = unixNano(start)
					if end := sp.GetEndTimeUnixNano(); end > start {
						ms := float64(end-start) / 1e6
						rec.latencyMS = &ms
					}
				}
				if validID(sp.GetParentSpanId(), 8) {
					rec.groupTrace = sp.GetTraceId()
				}
				if validID(sp.GetTraceId(), 16) && validID(sp.GetSpanId(), 8) {
					rec.id = "otlp:" + hex.EncodeToString(sp.GetTraceId()) + ":" + hex.EncodeToString(sp.GetSpanId())
				} else {
					rec.id = hashID(rs.GetResource(), sp)
				}
				res.add(r, rec, opts)
			}
		}
	}
	return res
}

// FromLogs converts the tool-call log records of a request.
func FromLogs(req *collogs.ExportLogsServiceRequest, opts Options) Result {
	opts = opts.withDefaults()
	var res Result
	for _, rl := range req.GetResourceLogs() {
		for _, sl := range rl.GetScopeLogs() {
			for _, lr := range sl.GetLogRecords() {
				r := readAttrs(rl.GetResource(), lr.GetAttributes())
				if !res.toolCall(r) {
					continue
				}
				// A log record names no parent: its trace is taken as given.
				rec := record{traceID: lr.GetTraceId(), groupTrace: lr.GetTraceId(), id: hashID(rl.GetResource(), lr),
					args: attr(lr.GetAttributes(), attrArguments), msg: lr}
				if t := lr.GetTimeUnixNano(); t > 0 {
					rec.ts = unixNano(t)
				} else if t := lr.GetObservedTimeUnixNano(); t > 0 {
					rec.ts = unixNano(t)
				}
				res.add(r, rec, opts)
			}
		}
	}
	return res
}

// add maps one tool call, or counts it rejected.
func (res *Result) add(r read, rec record, opts Options) {
	e, err := event(r, rec, opts)
	if err == nil {
		err = e.Validate(audit.Options{MaxFieldBytes: opts.MaxFieldBytes})
	}
	if err != nil {
		res.Reject(err, rec.msg, opts)
		res.Rejects[len(res.Rejects)-1].Server = e.Server
		return
	}
	res.Events = append(res.Events, e)
}

func rejectf(reason, detail string) *audit.Rejection {
	return &audit.Rejection{Reason: reason, Detail: detail}
}

func event(r read, rec record, opts Options) (audit.Event, error) {
	e := audit.Event{
		ID:            rec.id,
		TS:            rec.ts,
		Server:        opts.Server,
		Tool:          r.first(toolAttrs),
		Method:        audit.DefaultMethod,
		Decision:      audit.Allowed,
		Status:        "ok",
		Gateway:       r.first(gatewayAttrs),
		Grant:         r.first(grantAttrs),
		Agent:         r.first(agentAttrs),
		RequestID:     r[attrRequestID],
		Rule:          r.first(ruleAttrs),
		Reason:        r.first(reasonAttrs),
		LatencyMS:     rec.latencyMS,
		PolicyVersion: r.first(versionAttrs),
	}
	if e.Server == "" {
		e.Server = r.first(serverAttrs)
	}
	// The correlation ids travel as attributes: the store takes them as the
	// session of a call without one (SPEC §3), wherever the event went.
	e.Session = r[attrSession]
	if v := r[attrConversation]; v != "" {
		setAttr(&e, audit.AttrConversationID, truncate(v, opts.MaxFieldBytes))
	}
	if validID(rec.groupTrace, 16) {
		setAttr(&e, audit.AttrTraceID, hex.EncodeToString(rec.groupTrace))
	}
	if d := r.first(decisionAttrs); d != "" {
		dec, ok := decisionOf(d)
		if !ok {
			return e, rejectf(audit.ReasonBadDecision, fmt.Sprintf("decision attribute %q: want allowed, denied, rate_limited, approval_required or hidden", clip(d)))
		}
		e.Decision = dec
	} else {
		// Without a decision attribute, a gateway's own sign of a refusal:
		// a refusal read as an allowed call would count as use.
		switch {
		case strings.EqualFold(r[attrBlocked], "true"):
			e.Decision = audit.Denied
		case r[attrHTTPStatus] == "403":
			e.Decision = audit.Denied
		case r[attrHTTPStatus] == "429":
			e.Decision = audit.RateLimited
		}
	}
	code, codeErr := rpcError(r[attrRPCStatus])
	if code != nil {
		e.ErrorCode = code
	}
	if r[attrErrorType] != "" || rec.spanError || codeErr || strings.EqualFold(r[attrIsErrorResult], "true") {
		e.Status = "error"
	}
	if e.Decision != audit.Allowed {
		e.Status = "" // the call was not forwarded: there is no upstream outcome
	}
	if rec.args != nil {
		if err := setArgs(&e, rec.args, opts); err != nil {
			// Arguments that are no JSON object (ToolHive writes
			// "key=value, key2=[REDACTED]") say nothing the store can hash,
			// but the call is still a call: it is kept without them, and
			// says why. Only arguments over the limit reject it.
			if audit.ReasonOf(err) == audit.ReasonTooLarge {
				return e, err
			}
			setAttr(&e, AttrArgsError, truncate(argsError(err, opts.StoreArgs), opts.MaxFieldBytes))
		}
	}
	for _, k := range keptAttrs {
		if v := r[k]; v != "" {
			setAttr(&e, k, truncate(v, opts.MaxFieldBytes))
		}
	}
	return e, nil
}

func setAttr(e *audit.Event, k, v string) {
	if e.Attrs == nil {
		e.Attrs = map[string]string{}
	}
	e.Attrs[k] = v
}

// decisionOf reads a gateway's decision attribute.
func decisionOf(s string) (audit.Decision, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "allowed", "allow", "permit", "permitted", "pass":
		return audit.Allowed, true
	case "denied", "deny", "block", "blocked", "reject", "rejected":
		return audit.Denied, true
	case "rate_limited", "rate-limited", "ratelimited", "throttled":
		return audit.RateLimited, true
	case "approval_required", "require_approval", "requires_approval", "pending_approval":
		return audit.ApprovalRequired, true
	case "hidden":
		return audit.Hidden, true
	}
	return "", false
}

// rpcError reads rpc.response.status_code: a JSON-RPC error code (set only
// when the response is an error); "0" and "OK" are no error.
func rpcError(s string) (code *int64, isErr bool) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || strings.EqualFold(s, "ok") {
		return nil, false
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return &n, true
	}
	return nil, true
}

// setArgs hashes gen_ai.tool.call.arguments (a JSON object as a string, or a
// key-value list) with the canonical arguments hash.
func setArgs(e *audit.Event, v *commonpb.AnyValue, opts Options) error {
	var raw []byte
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		raw = []byte(x.StringValue)
	case *commonpb.AnyValue_KvlistValue:
		b, err := json.Marshal(jsonOf(v))
		if err != nil {
			return rejectf(audit.ReasonBadField, "gen_ai.tool.call.arguments: "+err.Error())
		}
		raw = b
	default:
		return rejectf(audit.ReasonBadField, "gen_ai.tool.call.arguments: want a JSON object")
	}
	if len(raw) > opts.MaxArgsBytes {
		return rejectf(audit.ReasonTooLarge, fmt.Sprintf("gen_ai.tool.call.arguments has %d bytes: the limit is %d", len(raw), opts.MaxArgsBytes))
	}
	canonical, hash, keys, err := audit.CanonicalArgsKeys(raw)
	if err != nil {
		return fmt.Errorf("gen_ai.tool.call.arguments: %w", err)
	}
	e.ArgsHash = hash
	e.ArgKeys = keys
	if opts.StoreArgs {
		e.Args = canonical
	}
	return nil
}

// argsError says why arguments were not kept. Without StoreArgs it names
// the reason alone: a JSON error quotes the character it stopped at, a
// character of the arguments.
func argsError(err error, storeArgs bool) string {
	if storeArgs {
		return err.Error()
	}
	return "gen_ai.tool.call.arguments: not one JSON object (" + audit.ReasonOf(err) + ")"
}

// jsonOf is an attribute value as JSON data.
func jsonOf(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_DoubleValue:
		if math.IsNaN(x.DoubleValue) || math.IsInf(x.DoubleValue, 0) {
			return nil
		}
		return x.DoubleValue
	case *commonpb.AnyValue_BytesValue:
		return x.BytesValue
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, jsonOf(e))
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		out := make(map[string]any, len(x.KvlistValue.GetValues()))
		for _, kv := range x.KvlistValue.GetValues() {
			out[kv.GetKey()] = jsonOf(kv.GetValue())
		}
		return out
	}
	return nil
}

func attr(kvs []*commonpb.KeyValue, key string) *commonpb.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }

func spanKey(trace, span []byte) string { return string(trace) + "/" + string(span) }

// nestedCalls are a request's tool-call spans, to give one event of a call
// whose spans nest: a gateway's server span around its client span to the
// upstream, or an agent's execute_tool span (and its MCP client span)
// around the gateway's server span. The event is the outermost server
// span, the one a gateway records what it did in (its decision, its
// server); without a server span among them, the outermost span.
type nestedCalls map[string]*callSpan

type callSpan struct {
	parent           string // the parent span's key, "" for none
	server           bool   // span kind SERVER
	serverDescendant bool   // a tool-call span inside it is a server span
}

func (n nestedCalls) add(sp *tracepb.Span) {
	c := &callSpan{server: sp.GetKind() == tracepb.Span_SPAN_KIND_SERVER}
	if len(sp.GetParentSpanId()) > 0 {
		c.parent = spanKey(sp.GetTraceId(), sp.GetParentSpanId())
	}
	n[spanKey(sp.GetTraceId(), sp.GetSpanId())] = c
}

// markServerDescendants marks the tool-call ancestors of each server span
// (a cycle of bad parent ids stops the walk).
func (n nestedCalls) markServerDescendants() {
	for _, c := range n {
		if !c.server {
			continue
		}
		for up, steps := n[c.parent], 0; up != nil && !up.serverDescendant && steps < len(n); up, steps = n[up.parent], steps+1 {
			up.serverDescendant = true
		}
	}
}

// keep says whether a tool-call span gives the event of its call: a server
// span with no server span among its tool-call ancestors, or a span of
// another kind with no tool-call ancestor and no server span inside it.
func (n nestedCalls) keep(sp *tracepb.Span) bool {
	c := n[spanKey(sp.GetTraceId(), sp.GetSpanId())]
	switch {
	case c == nil:
		return true
	case !c.server:
		return n[c.parent] == nil && !c.serverDescendant
	}
	for up, steps := n[c.parent], 0; up != nil && steps < len(n); up, steps = n[up.parent], steps+1 {
		if up.server {
			return false
		}
	}
	return true
}

// validID: an id of the right length that is not all zeroes (OTLP's rule).
func validID(b []byte, n int) bool {
	if len(b) != n {
		return false
	}
	for _, c := range b {
		if c != 0 {
			return true
		}
	}
	return false
}

func unixNano(n uint64) time.Time {
	if n > math.MaxInt64 {
		n = math.MaxInt64
	}
	return time.Unix(0, int64(n)).UTC()
}

// hashID identifies a record without usable ids by its content and its
// resource: the same record sent again gets the same id.
func hashID(res *resourcepb.Resource, m proto.Message) string {
	mo := proto.MarshalOptions{Deterministic: true}
	a, _ := mo.Marshal(res)
	b, _ := mo.Marshal(m)
	h := sha256.New()
	h.Write(a)
	h.Write([]byte{0})
	h.Write(b)
	return "otlp:sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// truncate cuts s to at most n bytes at a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}
