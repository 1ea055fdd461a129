// Package otlp turns OpenTelemetry (OTLP) traces and logs into v1 audit
// events: spans and log records that describe an MCP tool call, in the names
// of the OpenTelemetry MCP semantic conventions (and the non-standard names
// gateways use), become audit.Event values; everything else is counted by
// reason and dropped. It decodes OTLP/protobuf and OTLP/JSON requests with the
// official types. It does no I/O: the receiver in package server and the file
// ingester call it.
package otlp

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Encoding is how an OTLP request body is encoded.
type Encoding int

// The OTLP/HTTP encodings.
const (
	Protobuf Encoding = iota // application/x-protobuf
	JSON                     // application/json
)

// The OTLP signals this package reads.
const (
	Traces = "traces"
	Logs   = "logs"
)

// Decode decodes an export request of signal (Traces or Logs) and converts
// its tool calls.
func Decode(data []byte, enc Encoding, signal string, opts Options) (Result, error) {
	if signal == Logs {
		req, err := UnmarshalLogs(data, enc)
		if err != nil {
			return Result{}, err
		}
		return FromLogs(req, opts), nil
	}
	req, err := UnmarshalTraces(data, enc)
	if err != nil {
		return Result{}, err
	}
	return FromTraces(req, opts), nil
}

// UnmarshalTraces decodes an ExportTraceServiceRequest.
func UnmarshalTraces(data []byte, enc Encoding) (*coltrace.ExportTraceServiceRequest, error) {
	req := &coltrace.ExportTraceServiceRequest{}
	return req, unmarshal(data, enc, req)
}

// UnmarshalLogs decodes an ExportLogsServiceRequest.
func UnmarshalLogs(data []byte, enc Encoding) (*collogs.ExportLogsServiceRequest, error) {
	req := &collogs.ExportLogsServiceRequest{}
	return req, unmarshal(data, enc, req)
}

func unmarshal(data []byte, enc Encoding, m proto.Message) error {
	if enc == Protobuf {
		if err := proto.Unmarshal(data, m); err != nil {
			return fmt.Errorf("otlp: malformed protobuf: %w", err)
		}
		return nil
	}
	fixed, err := hexIDsToBase64(data)
	if err != nil {
		return err
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(fixed, m); err != nil {
		return fmt.Errorf("otlp: malformed JSON: %s", withoutValues(err.Error()))
	}
	return nil
}

// quotedToken is a quoted token in protojson's messages: `unexpected
// token "…"`, `invalid value for bool field boolValue: "…"`.
var quotedToken = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// unquotedValues are the places where protojson writes a token it could
// not read without quotes, up to the message's end: `unexpected token
// 12345678`, `invalid value SECRET` (a bare word), `invalid value for bool
// field boolValue: 7777`.
var unquotedValues = []*regexp.Regexp{
	regexp.MustCompile(`(unexpected token ).+$`),
	regexp.MustCompile(`(invalid value )(?:[^f]|f[^o]|fo[^r]|for[^ ]).*$`),
	regexp.MustCompile(`(field [^\s:]+: )[^"].*$`),
}

// withoutValues is a protojson message with each value it quotes replaced
// by "…": the message becomes a dead letter's detail and the receiver's
// answer, and the value may be a tool call's argument (a log body or an
// attribute written as a bare string), which neither may hold (SPEC §1).
// A field's name, quoted after "field ", is the schema's and kept, and so is
// where the token was (line:column).
func withoutValues(msg string) string {
	var b strings.Builder
	last := 0
	for _, m := range quotedToken.FindAllStringIndex(msg, -1) {
		b.WriteString(msg[last:m[0]])
		if strings.HasSuffix(msg[:m[0]], "field ") {
			b.WriteString(msg[m[0]:m[1]])
		} else {
			b.WriteString(`"…"`)
		}
		last = m[1]
	}
	b.WriteString(msg[last:])
	out := b.String()
	for _, re := range unquotedValues {
		out = re.ReplaceAllString(out, "${1}…")
	}
	return out
}

// maxIDKey is the length of the longest OTLP/JSON member that holds a trace
// or span id (idKeyAt lists them). OTLP/JSON writes ids in hex, where
// protojson's mapping of bytes is base64.
const maxIDKey = len("parent_span_id")

// hexIDsToBase64 rewrites the hex ids of an OTLP/JSON document as base64, so
// that protojson decodes them to the right bytes. Numbers are kept as written.
func hexIDsToBase64(data []byte) ([]byte, error) {
	return rewriteIDs(data, func(k, s string) (string, error) {
		b, err := hex.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("otlp: malformed JSON: %s %q is not hex", k, clip(s))
		}
		return base64.StdEncoding.EncodeToString(b), nil
	})
}

// MarshalJSON encodes a request (or any OTLP message) as OTLP/JSON: protojson
// with the trace and span ids in hex.
func MarshalJSON(m proto.Message) ([]byte, error) {
	data, err := protojson.MarshalOptions{UseEnumNumbers: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	// protojson varies its white space on purpose: compact it, so that the
	// same message always gives the same bytes.
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return nil, err
	}
	data = compact.Bytes()
	return rewriteIDs(data, func(k, s string) (string, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("otlp: %s %q is not base64", k, clip(s))
		}
		return hex.EncodeToString(b), nil
	})
}

// rewriteIDs applies conv to the string value of every id member of a JSON
// document, in one pass over its bytes (no tree is built: a request is up to
// otlp.max_request_bytes). In valid JSON an unescaped quote followed by one of
// the id names, a quote and a colon can only open a member name: inside a
// string a quote is escaped, and a string value is never followed by a colon.
// Whatever else the document holds is left for protojson to judge.
func rewriteIDs(data []byte, conv func(key, value string) (string, error)) ([]byte, error) {
	var out []byte // nil until the first id: most of the document is copied once
	last := 0
	for i := 0; i < len(data); i++ {
		if data[i] != '"' || escaped(data, i) {
			continue
		}
		key, end := idKeyAt(data, i)
		if key == "" {
			continue
		}
		j := skipWS(data, end)
		if j >= len(data) || data[j] != ':' {
			continue
		}
		j = skipWS(data, j+1)
		if j >= len(data) || data[j] != '"' {
			continue // not a string: protojson says what is wrong
		}
		close := bytes.IndexByte(data[j+1:], '"')
		if close < 0 {
			return nil, fmt.Errorf("otlp: malformed JSON: unterminated %s", key)
		}
		value := string(data[j+1 : j+1+close])
		if value == "" {
			i = j + 1
			continue
		}
		if strings.IndexByte(value, '\\') >= 0 {
			return nil, fmt.Errorf("otlp: malformed JSON: %s %q is not an id", key, clip(value))
		}
		conv, err := conv(key, value)
		if err != nil {
			return nil, err
		}
		out = append(append(append(out, data[last:j+1]...), conv...), '"')
		last = j + 1 + close + 1
		i = last - 1
	}
	if out == nil {
		return data, nil
	}
	return append(out, data[last:]...), nil
}

// idKeyAt returns the id member name quoted at data[i] and the index after
// its closing quote, or "".
func idKeyAt(data []byte, i int) (string, int) {
	rest := data[i+1 : min(len(data), i+2+maxIDKey)]
	n := bytes.IndexByte(rest, '"')
	if n < 0 {
		return "", 0
	}
	end := i + 1 + n + 1
	// A switch on the converted bytes compares without copying them.
	switch string(rest[:n]) {
	case "traceId":
		return "traceId", end
	case "spanId":
		return "spanId", end
	case "parentSpanId":
		return "parentSpanId", end
	case "trace_id":
		return "trace_id", end
	case "span_id":
		return "span_id", end
	case "parent_span_id":
		return "parent_span_id", end
	}
	return "", 0
}

// escaped reports whether the quote at data[i] is escaped: an odd number of
// backslashes before it.
func escaped(data []byte, i int) bool {
	n := 0
	for j := i - 1; j >= 0 && data[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

func skipWS(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
