package ingest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/otlp"
)

// A publisher that took a record apart and rejected it (the OTLP
// receiver, which holds no database) sends it through the stream to be
// dead-lettered like any rejected message: the record as the payload, the
// reason code and its detail in these headers (SPEC §2), and the signal
// when the record is an OTLP/JSON span or log record. The ingester stores
// it as a dead letter of format otlp and never as an event.
const (
	RejectedHeader       = "Mcptrail-Rejected"
	RejectedDetailHeader = "Mcptrail-Rejected-Detail"
	RejectedSignalHeader = "Mcptrail-Rejected-Signal"
)

// maxRejectedDetail bounds the detail a rejected message's header brings.
const maxRejectedDetail = 1024

// Rejected is what a rejected message's headers say.
type Rejected struct {
	Reason, Detail string
	// Signal is otlp.Traces or otlp.Logs when the payload is an OTLP/JSON
	// span or log record; "" when it is a v1 event.
	Signal string
}

// RejectedMsg is the message that sends a record rejected as r to be
// dead-lettered, on prefix + the server's subject token ("unknown" when
// the record names none that can be one). Its Nats-Msg-Id is derived from
// the reason and the payload, so that a request sent again is dropped by
// the stream. The payload is cut to maxBytes (a dead letter keeps at most
// ingest.max_event_bytes of it in any case).
func RejectedMsg(prefix, server string, r Rejected, raw []byte, maxBytes int) *nats.Msg {
	if audit.BadServerName(server) != "" {
		server = ""
	}
	if maxBytes > 0 && len(raw) > maxBytes {
		raw = raw[:maxBytes]
	}
	sum := sha256.New()
	sum.Write([]byte(r.Reason))
	sum.Write([]byte{0})
	sum.Write(raw)
	h := nats.Header{
		RejectedHeader:        []string{r.Reason},
		RejectedDetailHeader:  []string{oneLine.Replace(audit.CutAt(r.Detail, maxRejectedDetail))},
		jetstream.MsgIDHeader: []string{"rejected:" + hex.EncodeToString(sum.Sum(nil)[:16])},
	}
	if r.Signal != "" {
		h[RejectedSignalHeader] = []string{r.Signal}
	}
	return &nats.Msg{Subject: prefix + SubjectToken(server), Data: raw, Header: h}
}

// oneLine keeps a header value on its line.
var oneLine = strings.NewReplacer("\r", " ", "\n", " ")

// rejectedOf reads a message's rejection headers; nil when it has none.
func rejectedOf(h nats.Header) *Rejected {
	if len(h) == 0 {
		return nil
	}
	reason := h.Get(RejectedHeader)
	if reason == "" {
		return nil
	}
	return &Rejected{Reason: reason, Detail: audit.CutAt(h.Get(RejectedDetailHeader), maxRejectedDetail), Signal: h.Get(RejectedSignalHeader)}
}

// rejection is the dead letter's reason and detail. A reason that is no
// reason code (SPEC §1) is not taken from the publisher as it is: the
// message is then unknown_format, the detail saying what it claimed.
func (r *Rejected) rejection() *audit.Rejection {
	if !audit.KnownReason(r.Reason) {
		return &audit.Rejection{Reason: audit.ReasonUnknownFormat,
			Detail: fmt.Sprintf("published as rejected with %q, which is no reason code: %s", audit.CutAt(r.Reason, 64), r.Detail)}
	}
	return &audit.Rejection{Reason: r.Reason, Detail: r.Detail}
}

// redacted is what a dead letter keeps of a rejected message's payload
// without ingest.store_args: an OTLP record redacted again here (its
// publisher is not trusted to have done so), a v1 event as any other, and
// only the digest of what does not parse as what the headers say.
func (r *Rejected) redacted(data []byte) []byte {
	if r.Signal != "" {
		if red, err := otlp.RedactRecord(data, r.Signal); err == nil {
			return red
		}
	} else if red, ok := audit.RedactArgs(data); ok {
		return red
	}
	return audit.PayloadDigest(sha256.Sum256(data), len(data))
}
