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
	"io"

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
		return fmt.Errorf("otlp: malformed JSON: %w", err)
	}
	return nil
}

// idKeys are the OTLP/JSON members that hold trace and span ids. OTLP/JSON
// writes them in hex, where protojson's mapping of bytes is base64.
var idKeys = map[string]bool{
	"traceId": true, "spanId": true, "parentSpanId": true,
	"trace_id": true, "span_id": true, "parent_span_id": true,
}

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
	return rewriteIDs(data, func(k, s string) (string, error) {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return "", fmt.Errorf("otlp: %s %q is not base64", k, clip(s))
		}
		return hex.EncodeToString(b), nil
	})
}

// rewriteIDs applies conv to every non-empty id member of a JSON document.
func rewriteIDs(data []byte, conv func(key, value string) (string, error)) ([]byte, error) {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("otlp: malformed JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("otlp: malformed JSON: more than one value")
	}
	changed, err := walkIDs(doc, conv)
	if err != nil {
		return nil, err
	}
	if !changed {
		return data, nil
	}
	return json.Marshal(doc)
}

func walkIDs(v any, conv func(key, value string) (string, error)) (changed bool, err error) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && idKeys[k] {
				if s == "" {
					continue
				}
				if v[k], err = conv(k, s); err != nil {
					return false, err
				}
				changed = true
				continue
			}
			c, err := walkIDs(x, conv)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
	case []any:
		for _, x := range v {
			c, err := walkIDs(x, conv)
			if err != nil {
				return false, err
			}
			changed = changed || c
		}
	}
	return changed, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
