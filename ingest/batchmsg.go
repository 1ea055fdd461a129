package ingest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"math"
	"mime"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/audit"
)

// BatchContentType marks a NATS message whose payload holds many events,
// one JSON object per line (SPEC §2). Each line is decoded, validated,
// dead-lettered or stored on its own; the message's stream sequence is the
// checkpoint of all of them, and their ids de-duplicate.
const BatchContentType = "application/x-ndjson"

// contentTypeHeader is the NATS header that names a payload's type.
const contentTypeHeader = "Content-Type"

// isBatch reports whether a message's headers mark it as a batch: a
// Content-Type of BatchContentType, its name and media type in any case and
// with parameters (charset=utf-8), as HTTP reads them. A batch taken for
// one event would be dead-lettered whole.
func isBatch(h nats.Header) bool {
	if len(h) == 0 {
		return false
	}
	v, ok := h[contentTypeHeader] // nats.Header keeps names as sent
	if !ok {
		for name, values := range h {
			if strings.EqualFold(name, contentTypeHeader) {
				v, ok = values, true
				break
			}
		}
	}
	if !ok || len(v) == 0 {
		return false
	}
	if v[0] == BatchContentType {
		return true // as BatchMsg writes it, without parsing
	}
	media, _, err := mime.ParseMediaType(v[0])
	return err == nil && media == BatchContentType
}

// appendMessages appends what one NATS message holds: itself (a rejected
// record's, RejectedMsg, marked so), or for a batch each of its non-blank lines, numbered from 1 within the message
// (Line), all with the message's subject and stream sequence.
func appendMessages(out []Message, data []byte, subject string, seq uint64, h nats.Header) []Message {
	if r := rejectedOf(h); r != nil {
		return append(out, Message{Data: data, Source: subject, Seq: seq, Rejected: r})
	}
	if !isBatch(h) {
		return append(out, Message{Data: data, Source: subject, Seq: seq})
	}
	line := int64(0)
	for len(data) > 0 {
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i], data[i+1:]
		} else {
			l, data = data, nil
		}
		line++
		if blank(l) {
			continue
		}
		out = append(out, Message{Data: l, Source: subject, Seq: seq, Line: line})
	}
	return out
}

// DefaultMaxMessageBytes is the payload a batched message stays under by
// default: the NATS server's default max_payload (1 MiB).
const DefaultMaxMessageBytes = 1 << 20

// batchHeaderBytes is the room a batched message leaves under the server's
// max_payload for its headers (Content-Type and Nats-Msg-Id take under 100
// bytes), which NATS counts with the payload.
const batchHeaderBytes = 1024

// BatchBytes is the payload a batched message may carry on a connection
// to a server that takes messages of up to maxPayload bytes (0: unknown):
// configured (ingest.max_message_bytes; DefaultMaxMessageBytes when <= 0),
// less when the server takes less, so that a full batch is never refused.
func BatchBytes(configured int, maxPayload int64) int {
	if configured <= 0 {
		configured = DefaultMaxMessageBytes
	}
	if room := int(maxPayload) - batchHeaderBytes; maxPayload > 0 && room > 0 && room < configured {
		return room
	}
	return configured
}

// Batcher packs events into batched messages (BatchContentType) the way a
// careful gateway does: consecutive events for one subject, at most
// MaxEvents of them and MaxBytes of payload per message (an event larger
// than MaxBytes goes alone). Each message's Nats-Msg-Id is derived from its
// events' ids, so that the stream drops the same batch published again
// within its duplicate window; each event's own id still de-duplicates it
// in the store.
type Batcher struct {
	Prefix    string // subject prefix, e.g. "mcp.audit."
	MaxEvents int    // events per message (64 when <= 0)
	MaxBytes  int    // payload bytes per message (DefaultMaxMessageBytes when <= 0)

	subject string
	data    bytes.Buffer
	ids     hash.Hash
	n       int
}

// EncodeEvent is e as a line of a batched message (and as the payload of a
// message of its own, EventMsg).
func EncodeEvent(e *audit.Event) ([]byte, error) {
	line, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode event %q: %w", e.ID, err)
	}
	return line, nil
}

// Add encodes e into the open batch. When e does not join it (another
// subject, or the batch is full), the batch is closed first and returned.
func (b *Batcher) Add(e *audit.Event) (*nats.Msg, error) {
	line, err := EncodeEvent(e)
	if err != nil {
		return nil, err
	}
	return b.AddEncoded(e, line), nil
}

// AddEncoded is Add for e already encoded as line (EncodeEvent), for a
// caller that checks the line's size first.
func (b *Batcher) AddEncoded(e *audit.Event, line []byte) *nats.Msg {
	maxEvents, maxBytes := b.MaxEvents, b.MaxBytes
	if maxEvents <= 0 {
		maxEvents = 64
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxMessageBytes
	}
	subject := b.Prefix + SubjectToken(e.Server)
	var done *nats.Msg
	if b.n > 0 && (subject != b.subject || b.n >= maxEvents || b.data.Len()+len(line)+1 > maxBytes) {
		done = b.Flush()
	}
	if b.ids == nil {
		b.ids = sha256.New()
	}
	b.subject = subject
	b.data.Write(line)
	b.data.WriteByte('\n')
	b.ids.Write([]byte(e.ID))
	b.ids.Write([]byte{0})
	b.n++
	return done
}

// Flush closes the open batch and returns it; nil when it is empty.
func (b *Batcher) Flush() *nats.Msg {
	if b.n == 0 {
		return nil
	}
	m := &nats.Msg{Subject: b.subject, Data: bytes.Clone(b.data.Bytes()), Header: nats.Header{
		contentTypeHeader:     []string{BatchContentType},
		jetstream.MsgIDHeader: []string{"batch:" + hex.EncodeToString(b.ids.Sum(nil)[:16])},
	}}
	b.data.Reset()
	b.ids.Reset()
	b.n = 0
	return m
}

// BatchMsg is the one batched message that carries events, all of which
// must be for one server.
func BatchMsg(prefix string, events []audit.Event) (*nats.Msg, error) {
	if len(events) == 0 {
		return nil, fmt.Errorf("encode batch: no events")
	}
	b := Batcher{Prefix: prefix, MaxEvents: len(events), MaxBytes: math.MaxInt}
	for i := range events {
		done, err := b.Add(&events[i])
		if err != nil {
			return nil, err
		}
		if done != nil {
			return nil, fmt.Errorf("encode batch: event %q is for %s, the batch for %s", events[i].ID, b.subject, done.Subject)
		}
	}
	return b.Flush(), nil
}

// EventsIn counts the events a message published by EventMsg or BatchMsg
// carries.
func EventsIn(m *nats.Msg) int { return eventsIn(m.Header, m.Data) }

// eventsIn counts the events of a message with these headers and payload.
func eventsIn(h nats.Header, data []byte) int {
	if isBatch(h) {
		return bytes.Count(data, []byte{'\n'})
	}
	return 1
}

// messagesFitting is how many of msgs, from the first, carry at most room
// events in all (a batched message is never split, since its stream
// sequence is the checkpoint of all its events).
func messagesFitting(msgs []jetstream.Msg, room int) int {
	events := 0
	for i, m := range msgs {
		if events += eventsIn(m.Headers(), m.Data()); events > room {
			return i
		}
	}
	return len(msgs)
}
