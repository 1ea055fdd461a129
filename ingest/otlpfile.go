package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/otlp"
)

// FormatOTLP names OTLP/JSON lines in dead letters and flags.
const FormatOTLP = "otlp"

// OTLPLineLimit bounds one line of an OTLP/JSON file: a whole exported batch.
const OTLPLineLimit = 64 << 20

// otlpSignal tells, from its first member, whether a JSON object is an OTLP
// traces or logs request ("" when neither).
func otlpSignal(data []byte) string {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	key, err := dec.Token()
	if err != nil {
		return ""
	}
	switch key {
	case "resourceSpans", "resource_spans":
		return otlp.Traces
	case "resourceLogs", "resource_logs":
		return otlp.Logs
	}
	return ""
}

// SniffOTLP reports whether a stream's first line is an OTLP/JSON request
// (the OpenTelemetry Collector's file exporter writes one per line), without
// consuming it.
func SniffOTLP(br *bufio.Reader) bool {
	peek, _ := br.Peek(4096)
	return otlpSignal(bytes.TrimLeft(peek, " \t\r\n")) != ""
}

// ReadOTLP ingests OTLP/JSON lines (ExportTraceServiceRequest or
// ExportLogsServiceRequest objects, one a line): their tool calls become
// events (package otlp), the other records are counted as skipped, and
// rejected records and lines go to dead letters. maxEventBytes bounds a dead
// letter's raw bytes.
func ReadOTLP(ctx context.Context, br *bufio.Reader, conv otlp.Options, maxEventBytes int, sink Sink, opts FileOptions) (Totals, error) {
	if opts.BatchLines <= 0 {
		opts.BatchLines = FileBatchLines
	}
	if maxEventBytes <= 0 {
		maxEventBytes = audit.DefaultMaxEventBytes
	}
	var tot Totals
	var b Batch
	flush := func() error {
		if len(b.Events) == 0 && len(b.DeadLetters) == 0 {
			return nil
		}
		res, err := sink.Append(ctx, b)
		if err != nil {
			return fmt.Errorf("store batch from %s: %w", opts.Name, err)
		}
		tot.Add(res)
		b = Batch{}
		return nil
	}
	dead := func(line int64, reason, detail string, raw []byte) {
		b.DeadLetters = append(b.DeadLetters, DeadLetter{At: time.Now().UTC(), Source: opts.Name, Line: line,
			Format: FormatOTLP, Reason: reason, Detail: detail, Raw: raw[:min(len(raw), maxEventBytes)]})
	}
	for {
		if err := ctx.Err(); err != nil {
			return tot, err
		}
		data, n, whole, err := readLine(br, OTLPLineLimit)
		if n > 0 || len(data) > 0 {
			tot.Lines++
			if opts.Progress != nil {
				_ = opts.Progress.Add(n)
			}
			line := bytes.TrimSpace(data)
			switch {
			case whole != nil:
				dead(tot.Lines, audit.ReasonTooLarge, fmt.Sprintf("an OTLP/JSON line of %d bytes: the limit is %d", whole.Size, OTLPLineLimit),
					audit.PayloadDigest(whole.Sum, whole.Size))
			case len(line) == 0:
			default:
				ingestOTLPLine(line, tot.Lines, conv, &b, &tot, dead)
			}
			if len(b.Events)+len(b.DeadLetters) >= opts.BatchLines {
				if ferr := flush(); ferr != nil {
					return tot, ferr
				}
			}
		}
		if err != nil {
			if ferr := flush(); ferr != nil {
				return tot, ferr
			}
			if err == io.EOF {
				return tot, nil
			}
			return tot, fmt.Errorf("read %s at line %d: %w", opts.Name, tot.Lines+1, err)
		}
	}
}

func ingestOTLPLine(line []byte, lineNo int64, conv otlp.Options, b *Batch, tot *Totals, dead func(int64, string, string, []byte)) {
	signal := otlpSignal(line)
	if signal == "" {
		dead(lineNo, audit.ReasonUnknownFormat, "not an OTLP/JSON traces or logs request (resourceSpans or resourceLogs)", digest(line))
		return
	}
	res, err := otlp.Decode(line, otlp.JSON, signal, conv)
	if err != nil {
		dead(lineNo, audit.ReasonMalformedJSON, err.Error(), digest(line))
		return
	}
	b.Events = append(b.Events, res.Events...)
	for _, rj := range res.Rejects {
		dead(lineNo, rj.Err.Reason, rj.Err.Detail, rj.Raw)
	}
	for _, n := range res.Dropped {
		tot.Skipped += n
	}
}

// digest is what a dead letter keeps of a line that is not a request it can
// take apart: its hash and size (it may hold argument values).
func digest(line []byte) []byte {
	return audit.PayloadDigest(sha256.Sum256(line), len(line))
}
