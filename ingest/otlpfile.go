package ingest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"sync"
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
//
// Decoding a line (protojson, then the mapping) costs many times what
// storing its events does: lines are decoded on every core, and their
// results taken in the order of the lines, so that batches and dead letters
// are what one decoder would make, while the batch before is stored.
func ReadOTLP(ctx context.Context, br *bufio.Reader, conv otlp.Options, maxEventBytes int, sink Sink, opts FileOptions) (Totals, error) {
	if opts.BatchLines <= 0 {
		opts.BatchLines = FileBatchLines
	}
	if maxEventBytes <= 0 {
		maxEventBytes = audit.DefaultMaxEventBytes
	}
	ctx, cancel := context.WithCancel(ctx)
	workers := runtime.GOMAXPROCS(0)
	jobs := make(chan *otlpLine)
	order := make(chan *otlpLine, 2*workers) // bounds the lines in flight
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait() // no goroutine outlives the call
	}()
	for range workers {
		wg.Go(func() {
			for l := range jobs {
				l.done <- decodeOTLPLine(l, conv, maxEventBytes, opts.Name)
			}
		})
	}
	var lines int64 // the reader's until order is closed
	var readErr error
	wg.Go(func() {
		defer close(order)
		defer close(jobs)
		readErr = readOTLPLines(ctx, br, opts.Progress, &lines, func(l *otlpLine) bool {
			select {
			case order <- l:
			case <-ctx.Done():
				return false
			}
			select {
			case jobs <- l:
				return true
			case <-ctx.Done():
				return false
			}
		})
		if readErr != nil {
			readErr = fmt.Errorf("read %s at line %d: %w", opts.Name, lines+1, readErr)
		}
	})

	bb := newOTLPBatches(sink, opts)
	defer bb.release()
	for l := range order {
		var r otlpDecoded
		select {
		case r = <-l.done:
		case <-ctx.Done():
			return bb.tot, ctx.Err()
		}
		bb.tot.Lines = l.no
		if err := bb.add(ctx, r); err != nil {
			return bb.tot, err
		}
	}
	if err := ctx.Err(); err != nil {
		return bb.tot, err
	}
	bb.tot.Lines = lines
	if err := bb.flush(ctx); err != nil {
		return bb.tot, err
	}
	return bb.tot, readErr
}

// otlpBatches assembles the decoded lines of an OTLP/JSON file into the
// sink's batches as a v1 file's are assembled (fileBatch: staged as they
// come when the sink stages, in batches of exactly BatchLines events), and
// counts what was stored.
type otlpBatches struct {
	sink   Sink
	stager StagingSink // nil: the events are held as they are
	opts   FileOptions
	cur    *fileBatch
	tot    Totals
}

func newOTLPBatches(sink Sink, opts FileOptions) *otlpBatches {
	bb := &otlpBatches{sink: sink, opts: opts}
	bb.stager, _ = sink.(StagingSink)
	bb.cur = newFileBatch(bb.stager, opts.BatchLines)
	return bb
}

// add takes one line's outcome, storing every batch it fills.
func (bb *otlpBatches) add(ctx context.Context, r otlpDecoded) error {
	size := bb.opts.BatchLines
	bb.tot.Skipped += r.skipped
	bb.cur.batch.DeadLetters = append(bb.cur.batch.DeadLetters, r.dead...)
	for events := r.events; len(events) > 0 || len(bb.cur.batch.DeadLetters) >= size; {
		events = bb.cur.take(events, size)
		if bb.cur.events() >= size || len(bb.cur.batch.DeadLetters) >= size {
			if err := bb.flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// flush stores the open batch, if it holds anything, and opens another.
func (bb *otlpBatches) flush(ctx context.Context) error {
	if bb.cur.events() == 0 && len(bb.cur.batch.DeadLetters) == 0 {
		return nil
	}
	res, err := bb.sink.Append(ctx, bb.cur.batch)
	bb.cur.release()
	if err != nil {
		return fmt.Errorf("store batch from %s: %w", bb.opts.Name, err)
	}
	bb.tot.Add(res)
	bb.cur = newFileBatch(bb.stager, bb.opts.BatchLines)
	return nil
}

// release frees the open batch's staging.
func (bb *otlpBatches) release() { bb.cur.release() }

// otlpLine is a line of an OTLP/JSON file on its way through ReadOTLP: its
// number and bytes (or the digest of a line over the limit), and where its
// decoding is sent.
type otlpLine struct {
	no    int64
	data  []byte
	whole *Digest
	done  chan otlpDecoded
}

// otlpDecoded is what a line gives: events, dead letters, and the records
// that are not tool calls (skipped).
type otlpDecoded struct {
	events  []audit.Event
	dead    []DeadLetter
	skipped int
}

// readOTLPLines reads br's lines, counting them in lines, and hands each
// that is not blank to send until send returns false or the input ends
// (nil at its end).
func readOTLPLines(ctx context.Context, br *bufio.Reader, progress Progress, lines *int64, send func(*otlpLine) bool) error {
	for ctx.Err() == nil {
		data, n, whole, err := readLine(br, OTLPLineLimit)
		if n > 0 || len(data) > 0 {
			*lines++
			if progress != nil {
				_ = progress.Add(n)
			}
			l := &otlpLine{no: *lines, data: bytes.TrimSpace(data), whole: whole, done: make(chan otlpDecoded, 1)}
			if (whole != nil || len(l.data) > 0) && !send(l) {
				return nil
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// decodeOTLPLine decodes one line of an OTLP/JSON file.
func decodeOTLPLine(l *otlpLine, conv otlp.Options, maxEventBytes int, source string) otlpDecoded {
	var r otlpDecoded
	dead := func(reason, detail string, raw []byte) {
		r.dead = append(r.dead, DeadLetter{At: time.Now().UTC(), Source: source, Line: l.no, Format: FormatOTLP, Reason: reason,
			Detail: detail, Raw: raw[:min(len(raw), maxEventBytes)]})
	}
	if l.whole != nil {
		dead(audit.ReasonTooLarge, fmt.Sprintf("an OTLP/JSON line of %d bytes: the limit is %d", l.whole.Size, OTLPLineLimit),
			audit.PayloadDigest(l.whole.Sum, l.whole.Size))
		return r
	}
	signal := otlpSignal(l.data)
	if signal == "" {
		dead(audit.ReasonUnknownFormat, "not an OTLP/JSON traces or logs request (resourceSpans or resourceLogs)", digest(l.data))
		return r
	}
	res, err := otlp.Decode(l.data, otlp.JSON, signal, conv)
	if err != nil {
		dead(audit.ReasonMalformedJSON, err.Error(), digest(l.data))
		return r
	}
	r.events = res.Events
	for _, rj := range res.Rejects {
		dead(rj.Err.Reason, rj.Err.Detail, rj.Raw)
	}
	for _, n := range res.Dropped {
		r.skipped += n
	}
	return r
}

// digest is what a dead letter keeps of a line that is not a request it can
// take apart: its hash and size (it may hold argument values).
func digest(line []byte) []byte {
	return audit.PayloadDigest(sha256.Sum256(line), len(line))
}
