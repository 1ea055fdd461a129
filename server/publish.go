package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/redact"
	"github.com/mcptrail/mcptrail/internal/wait"
)

// DefaultPublishInFlight is the async-publish window: enough unacknowledged
// messages to keep the link busy, few enough to bound memory.
const DefaultPublishInFlight = 4096

// DefaultPublishAttempts is how many times Publish sends a message that
// JetStream does not acknowledge before it counts the message as failed.
const DefaultPublishAttempts = 8

// PublishOptions configures Publish.
type PublishOptions struct {
	URL string // NATS server URL(s), comma-separated
	Auth
	// Subject is the stream's subject (nats.subject, such as mcp.audit.>)
	// or its prefix (mcp.audit.): events go to the prefix + server.
	// "mcp.audit." when empty.
	Subject string
	// Rate is the target in events per second; 0 publishes as fast as the
	// acknowledgements allow.
	Rate float64
	// InFlight bounds the publishes awaiting their acknowledgement
	// (DefaultPublishInFlight when <= 0).
	InFlight int
	// Batch is how many consecutive events of one server share a message
	// (ingest.BatchContentType, SPEC §2); <= 1 sends each event as its own
	// message.
	Batch int
	// MaxMessageBytes bounds a batched message's payload
	// (ingest.DefaultMaxMessageBytes when <= 0); a batch stays under the
	// NATS server's max_payload too, with room for its headers.
	MaxMessageBytes int
	// Attempts is how many times a message is sent before it counts as
	// failed (DefaultPublishAttempts when <= 0). A message sent again keeps
	// its Nats-Msg-Id, so that the stream stores it once.
	Attempts int
	// AckWait is how long a message waits for its acknowledgement before it
	// is sent again (4 s when <= 0: inside the stream's duplicate window).
	AckWait time.Duration
	// RefusalSpan is how long JetStream may refuse every message (at least
	// 100 of them, none acknowledged) before publishing stops
	// (DefaultRefusalSpan when <= 0).
	RefusalSpan time.Duration

	handlerDelay time.Duration // tests: see publisher.handlerDelay
}

// PublishStats reports what Publish achieved.
type PublishStats struct {
	Published  int           // events acknowledged by JetStream (duplicates included)
	Duplicates int           // of those, acknowledged as duplicates of an earlier Nats-Msg-Id
	Failed     int           // events JetStream did not acknowledge
	Messages   int           // messages acknowledged
	Resent     int           // messages sent again after an acknowledgement did not come
	Duration   time.Duration // from the first publish to the last acknowledgement
	Rate       float64       // Published per second
}

// Publish publishes events like a careful gateway does: as JSON v1 payloads
// to mcp.audit.<server> through JetStream, one event per message with its id
// as Nats-Msg-Id or, with Batch, many per message (ingest.Batcher); it waits
// for every acknowledgement and sends what was not acknowledged again with
// the same Nats-Msg-Id (so the stream keeps one copy), up to Attempts times.
// next returns the next event, false when there are no more, or an error
// that stops publishing. Publish returns an error when any event was not
// acknowledged.
func Publish(ctx context.Context, opts PublishOptions, next func() (audit.Event, bool, error)) (PublishStats, error) {
	if opts.URL == "" {
		return PublishStats{}, errors.New("publish: no NATS URL")
	}
	prefix := strings.TrimSuffix(cmp.Or(opts.Subject, DefaultSubject), ">")
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	natsOpts, err := authOptions(opts.Auth)
	if err != nil {
		return PublishStats{}, err
	}
	// The server refuses a subject this user may not publish to only with an
	// asynchronous error: stop at once instead of waiting for acks that
	// never come.
	ctx, deny := context.WithCancelCause(ctx)
	defer deny(nil)
	natsOpts = append(natsOpts, nats.Name("mcptrail publish"), nats.Timeout(5*time.Second),
		// A gateway keeps trying while its NATS server restarts.
		nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				deny(fmt.Errorf("%w (check the NATS user's permissions; on the embedded server, the servers of its nats.embedded.users entry)", err))
			}
		}))
	nc, err := nats.Connect(opts.URL, natsOpts...)
	if err != nil {
		return PublishStats{}, fmt.Errorf("connect to NATS at %s: %w", redact.URL(opts.URL), redact.Error(err, opts.URL))
	}
	defer nc.Close()

	p, err := newPublisher(nc, opts, deny)
	if err != nil {
		return PublishStats{}, err
	}
	batcher := &ingest.Batcher{Prefix: prefix, MaxEvents: opts.Batch, MaxBytes: ingest.BatchBytes(opts.MaxMessageBytes, nc.MaxPayload())}
	send := func(m *nats.Msg) error {
		if m == nil {
			return nil
		}
		return p.send(ctx, m)
	}
	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return p.finish(ctx, err)
		}
		e, ok, err := next()
		if err != nil {
			_ = send(batcher.Flush())
			_ = p.drain(ctx)
			return p.finish(ctx, fmt.Errorf("publish: next event: %w", err))
		}
		if !ok {
			break
		}
		if opts.Rate > 0 {
			due := p.start.Add(time.Duration(float64(i) / opts.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 && !wait.Sleep(ctx, d) {
				return p.finish(ctx, ctx.Err())
			}
		}
		var m *nats.Msg
		if opts.Batch > 1 {
			m, err = batcher.Add(&e)
		} else {
			m, err = ingest.EventMsg(prefix, &e)
		}
		if err != nil {
			return p.finish(ctx, fmt.Errorf("publish: %w", err))
		}
		if err := send(m); err != nil {
			return p.finish(ctx, err)
		}
	}
	if err := send(batcher.Flush()); err != nil {
		return p.finish(ctx, err)
	}
	return p.finish(ctx, p.drain(ctx))
}
