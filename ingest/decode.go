package ingest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/audit"
)

// Message is one raw payload from a source: a file line or a NATS message.
type Message struct {
	Data   []byte
	Source string // file path ("-" for stdin) or NATS subject
	Line   int64  // 1-based line number in a file or a batched NATS message (BatchContentType); 0 for a single-event NATS message
	Seq    uint64 // JetStream stream sequence; 0 otherwise
	// Whole, when set, is the size and SHA-256 of the whole payload of
	// which Data holds only the first bytes (a file line over the size
	// limit, of which only enough to reject it is kept).
	Whole *Digest
	// Rejected, when set, is the rejection its publisher found (a
	// message with RejectedHeader): it is dead-lettered as such.
	Rejected *Rejected
}

// Digest is the size and SHA-256 of a payload.
type Digest struct {
	Size int
	Sum  [sha256.Size]byte
}

// Decoded is the outcome of decoding a slice of messages, in message order.
type Decoded struct {
	Events  []audit.Event
	Dead    []DeadLetter
	Skipped int // lines that are not tool calls (Intercept heartbeats, blank lines...)
	// Formats holds the detected format of each event, parallel to Events, and
	// of each dead letter in Dead.Format; metrics label by it.
	Formats []audit.Format
}

// Decoder decodes batches of messages in parallel. It keeps the Intercept
// instance → server map across batches, so one Decoder must serve one stream
// of messages in order (one file, or one consumer).
type Decoder struct {
	Opts    audit.Options
	Workers int // parallel decoders; 1 when < 1
	// CheckSubject is set for NATS sources, whose Message.Source is the
	// subject: an event whose server is not the subject's last token (as
	// SubjectToken writes it) is dead-lettered as subject_mismatch, so that
	// a publisher allowed only mcp.audit.<a> cannot write events for b.
	CheckSubject bool

	intercept audit.InterceptServers
	results   []decodeResult // reused across calls: one fetch or file batch
	// mapped is set while the payloads lie in a mapped file (ReadFile):
	// reading them can then fault, which becomes an error.
	mapped bool
}

type decodeResult struct {
	res audit.Result
	err error
}

// Decode decodes msgs with d.Workers goroutines over contiguous chunks, then
// applies the order-dependent steps (Intercept server resolution, dead-letter
// routing) sequentially so the outcome does not depend on scheduling.
func (d *Decoder) Decode(ctx context.Context, msgs []Message) (Decoded, error) {
	out := Decoded{Events: make([]audit.Event, 0, len(msgs)), Formats: make([]audit.Format, 0, len(msgs))}
	err := d.DecodeAppend(ctx, msgs, &out)
	return out, err
}

// DecodeAppend is Decode appending to out, so that a batch assembled from
// several fetches is not copied once per fetch.
func (d *Decoder) DecodeAppend(ctx context.Context, msgs []Message, out *Decoded) error {
	return d.decodeAppend(ctx, msgs, out, d.Opts.Borrow)
}

// decodeAppend is DecodeAppend, the events' strings aliasing the payloads
// when borrow is set (audit.Options.Borrow).
func (d *Decoder) decodeAppend(ctx context.Context, msgs []Message, out *Decoded, borrow bool) (err error) {
	if d.mapped {
		// The payloads lie in a mapped file: a fault reading them (the
		// file truncated meanwhile) is an error, here and in the workers.
		defer catchFault(&err)
	}
	opts := d.Opts
	opts.Borrow = borrow
	if cap(d.results) < len(msgs) {
		d.results = make([]decodeResult, len(msgs))
	}
	results := d.results[:len(msgs)]
	defer clear(results) // drop references to this call's payloads
	workers := max(d.Workers, 1)
	chunk := (len(msgs) + workers - 1) / max(workers, 1)
	var wg sync.WaitGroup
	faults := make([]error, workers) // one per part: there are at most workers
	for w, start := 0, 0; start < len(msgs); w, start = w+1, start+max(chunk, 1) {
		end := min(start+chunk, len(msgs))
		wg.Add(1)
		go func(part []Message, out []decodeResult, fault *error) {
			defer wg.Done()
			if d.mapped {
				debug.SetPanicOnFault(true)
				defer catchFault(fault)
			}
			for i := range part {
				if r := part[i].Rejected; r != nil {
					out[i].res, out[i].err = audit.Result{Format: FormatOTLP}, r.rejection()
					continue
				}
				out[i].res, out[i].err = audit.Decode(part[i].Data, opts)
			}
		}(msgs[start:end], results[start:end], &faults[w])
	}
	wg.Wait()
	// Every worker that faulted met the same changed file: one says so.
	for _, err := range faults {
		if err != nil {
			return fmt.Errorf("decode lines %d-%d of %s: %w", msgs[0].Line, msgs[len(msgs)-1].Line, msgs[0].Source, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}

	limit := d.Opts.MaxEventBytes
	if limit <= 0 {
		limit = audit.DefaultMaxEventBytes
	}
	for i := range results {
		r := &results[i]
		err := r.err
		if err == nil {
			err = d.intercept.Apply(&r.res, d.Opts)
		}
		if err == nil && d.CheckSubject && r.res.Kind == audit.KindEvent {
			err = checkSubject(msgs[i].Source, r.res.Event.Server)
		}
		if err != nil {
			out.Dead = append(out.Dead, deadLetter(msgs[i], r.res.Format, err, limit, d.Opts.StoreArgs))
			continue
		}
		switch r.res.Kind {
		case audit.KindEvent:
			out.Events = append(out.Events, r.res.Event)
			out.Formats = append(out.Formats, r.res.Format)
		default:
			out.Skipped++
		}
	}
	return nil
}

// DecodeMessages decodes one self-contained slice of messages with a fresh
// Decoder. Sources that see a continuing stream should keep a Decoder instead.
func DecodeMessages(ctx context.Context, msgs []Message, opts audit.Options, workers int) (events []audit.Event, dead []DeadLetter, skipped int) {
	d := Decoder{Opts: opts, Workers: workers}
	out, err := d.Decode(ctx, msgs)
	if err != nil {
		return nil, nil, 0
	}
	return out.Events, out.Dead, out.Skipped
}

// checkSubject refuses an event published on another server's subject.
func checkSubject(subject, server string) error {
	last := subject[strings.LastIndexByte(subject, '.')+1:]
	if isSubjectToken(last, server) || last == SubjectToken(server) {
		return nil
	}
	return &audit.Rejection{Reason: audit.ReasonSubjectMismatch, Detail: fmt.Sprintf(
		"the event's server %q arrived on subject %q: publish each server's events to <prefix>%s",
		server, subject, SubjectToken(server))}
}

// isSubjectToken reports whether token is SubjectToken(server) for a
// server name of ASCII bytes, without building that string: it runs for
// every event that serve stores, where SubjectToken's rune mapping cost
// about 1% of the daemon's CPU. It is false for the other names (and for
// ""), which checkSubject then compares the slow way.
func isSubjectToken(token, server string) bool {
	if len(token) != len(server) || server == "" {
		return false
	}
	for i := 0; i < len(server); i++ {
		c := server[i]
		if c >= utf8.RuneSelf || rune(token[i]) != subjectTokenRune(rune(c)) {
			return false
		}
	}
	return true
}

// SubjectToken makes a server name usable as one subject token, as
// publishers write it in mcp.audit.<server>: '.', '*', '>' and white space
// become '_' (the payload keeps the real name, which is what is stored).
func SubjectToken(s string) string {
	if s == "" {
		return "unknown"
	}
	return strings.Map(subjectTokenRune, s)
}

// subjectTokenRune is the rune SubjectToken writes for r.
func subjectTokenRune(r rune) rune {
	switch r {
	case '.', '*', '>', ' ', '\t', '\r', '\n':
		return '_'
	}
	return r
}

// deadLetter builds the dead letter of a rejected message. Its raw bytes are
// the payload truncated to limit; without storeArgs (ingest.store_args) they
// are the payload with every argument value redacted (audit.RedactArgs),
// or, when it is not valid JSON (or was cut short), only its digest: a
// rejected payload must not keep at rest the secrets that a stored event
// would not.
func deadLetter(m Message, format audit.Format, err error, limit int, storeArgs bool) DeadLetter {
	reason := audit.ReasonOf(err)
	detail := err.Error()
	var rej *audit.Rejection
	if errors.As(err, &rej) {
		detail = rej.Detail
	}
	raw := m.Data
	if !storeArgs {
		raw = redactedRaw(m, reason)
	}
	if len(raw) > limit {
		raw = raw[:limit]
	}
	if format == "" {
		format = audit.FormatAuto
	}
	return DeadLetter{
		Source: m.Source, Line: m.Line, Seq: m.Seq, Format: string(format),
		Reason: reason, Detail: detail, Raw: append([]byte(nil), raw...),
	}
}

// redactedRaw is what a dead letter keeps of m's payload without arguments:
// a payload of a known format without its argument values, one of no
// format without any value (its arguments could be anywhere), one that is
// no JSON its digest.
func redactedRaw(m Message, reason string) []byte {
	if m.Whole != nil {
		return audit.PayloadDigest(m.Whole.Sum, m.Whole.Size)
	}
	if m.Rejected != nil {
		return m.Rejected.redacted(m.Data)
	}
	redact := audit.RedactArgs
	if reason == audit.ReasonUnknownFormat {
		redact = audit.RedactValues
	}
	if red, ok := redact(m.Data); ok {
		return red
	}
	return audit.PayloadDigest(sha256.Sum256(m.Data), len(m.Data))
}

// EventMsg is the NATS message a gateway publishes for e: the v1 JSON payload
// on prefix + the server's subject token, with the event id as Nats-Msg-Id so
// that the stream drops the same event published again within its duplicate
// window. prefix ends in a dot (mcp.audit.).
func EventMsg(prefix string, e *audit.Event) (*nats.Msg, error) {
	data, err := EncodeEvent(e)
	if err != nil {
		return nil, err
	}
	return EncodedEventMsg(prefix, e, data), nil
}

// EncodedEventMsg is EventMsg for e already encoded as data (EncodeEvent).
func EncodedEventMsg(prefix string, e *audit.Event, data []byte) *nats.Msg {
	m := &nats.Msg{Subject: prefix + SubjectToken(e.Server), Data: data}
	if e.ID != "" {
		m.Header = nats.Header{jetstream.MsgIDHeader: []string{e.ID}}
	}
	return m
}
