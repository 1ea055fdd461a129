package server

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/redact"
	"github.com/mcptrail/mcptrail/internal/wait"
)

// DefaultPublishInFlight is the async-publish window: enough unacknowledged
// messages to keep the link busy, few enough to bound memory.
const DefaultPublishInFlight = 4096

// PublishOptions configures Publish.
type PublishOptions struct {
	URL string // NATS server URL(s), comma-separated
	Auth
	// Subject is the subject prefix: events go to Subject + server.
	// "mcp.audit." when empty.
	Subject string
	// Rate is the target in events per second; 0 publishes as fast as the
	// acknowledgements allow.
	Rate float64
	// InFlight bounds the publishes awaiting their acknowledgement
	// (DefaultPublishInFlight when <= 0).
	InFlight int
}

// PublishStats reports what Publish achieved.
type PublishStats struct {
	Published  int           // events acknowledged by JetStream (duplicates included)
	Duplicates int           // of those, acknowledged as duplicates of an earlier Nats-Msg-Id
	Failed     int           // events JetStream did not acknowledge
	Duration   time.Duration // from the first publish to the last acknowledgement
	Rate       float64       // Published per second
}

// Publish publishes events like a gateway does: each event as a JSON v1
// payload to mcp.audit.<server> through JetStream, with the event id as
// Nats-Msg-Id (so the stream drops a republished event within its duplicate
// window) and waiting for every publish acknowledgement. next returns the
// next event, false when there are no more, or an error that stops
// publishing. Publish returns an error when any event was not acknowledged.
func Publish(ctx context.Context, opts PublishOptions, next func() (audit.Event, bool, error)) (PublishStats, error) {
	var st PublishStats
	if opts.URL == "" {
		return st, errors.New("publish: no NATS URL")
	}
	prefix := opts.Subject
	if prefix == "" {
		prefix = strings.TrimSuffix(DefaultSubject, ">")
	}
	if !strings.HasSuffix(prefix, ".") {
		prefix += "."
	}
	inFlight := opts.InFlight
	if inFlight <= 0 {
		inFlight = DefaultPublishInFlight
	}
	natsOpts, err := authOptions(opts.Auth)
	if err != nil {
		return st, err
	}
	// The server refuses a subject this user may not publish to only with an
	// asynchronous error: stop at once instead of waiting for acks that
	// never come.
	ctx, deny := context.WithCancelCause(ctx)
	defer deny(nil)
	natsOpts = append(natsOpts, nats.Name("mcptrail publish"), nats.Timeout(5*time.Second),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if errors.Is(err, nats.ErrPermissionViolation) {
				deny(fmt.Errorf("%w (check the NATS user's permissions; on the embedded server, the servers of its nats.embedded.users entry)", err))
			}
		}))
	nc, err := nats.Connect(opts.URL, natsOpts...)
	if err != nil {
		return st, fmt.Errorf("connect to NATS at %s: %w", redact.URL(opts.URL), err)
	}
	defer nc.Close()

	var acked, dups, failed atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(inFlight),
		jetstream.WithPublishAsyncTimeout(30*time.Second),
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, _ *nats.Msg, ack *jetstream.PubAck) {
			acked.Add(1)
			if ack.Duplicate {
				dups.Add(1)
			}
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, m *nats.Msg, err error) {
			failed.Add(1)
			errMu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", m.Subject, err)
			}
			errMu.Unlock()
		}),
	)
	if err != nil {
		return st, fmt.Errorf("publish: %w", err)
	}

	start := time.Now()
	finish := func(err error) (PublishStats, error) {
		st.Published, st.Duplicates = int(acked.Load()), int(dups.Load())
		st.Failed += int(failed.Load())
		st.Duration = time.Since(start)
		if st.Duration > 0 {
			st.Rate = float64(st.Published) / st.Duration.Seconds()
		}
		if cause := context.Cause(ctx); err != nil && errors.Is(cause, nats.ErrPermissionViolation) {
			err = cause
		}
		if err == nil && st.Failed > 0 {
			errMu.Lock()
			err = fmt.Errorf("publish: %d of %d events were not acknowledged by JetStream: %w", st.Failed, st.Published+st.Failed, firstErr)
			errMu.Unlock()
		}
		return st, err
	}

	for i := 0; ; i++ {
		if err := ctx.Err(); err != nil {
			return finish(err)
		}
		e, ok, err := next()
		if err != nil {
			waitComplete(ctx, js)
			return finish(fmt.Errorf("publish: next event: %w", err))
		}
		if !ok {
			break
		}
		if opts.Rate > 0 {
			due := start.Add(time.Duration(float64(i) / opts.Rate * float64(time.Second)))
			if d := time.Until(due); d > 0 && !wait.Sleep(ctx, d) {
				return finish(ctx.Err())
			}
		}
		m, err := ingest.EventMsg(prefix, &e)
		if err != nil {
			return finish(fmt.Errorf("publish: %w", err))
		}
		if i == 0 {
			// The first event goes synchronously, so a missing stream is one
			// clear error instead of a flood of asynchronous failures.
			if err := publishFirst(ctx, js, m, &acked, &dups); err != nil {
				return finish(err)
			}
			continue
		}
		for {
			_, err = js.PublishMsgAsync(m)
			if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) || ctx.Err() != nil {
				break // the window is full: wait for acknowledgements and retry
			}
		}
		if err != nil {
			st.Failed++
			return finish(fmt.Errorf("publish to %s: %w", m.Subject, err))
		}
	}
	if err := waitComplete(ctx, js); err != nil {
		return finish(err)
	}
	return finish(nil)
}

func publishFirst(ctx context.Context, js jetstream.JetStream, m *nats.Msg, acked, dups *atomic.Int64) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ack, err := js.PublishMsg(pctx, m)
	if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("publish to %s: no JetStream stream captures this subject: start `mcptrail serve` first (it creates the stream) or create one on mcp.audit.>: %w", m.Subject, err)
	}
	if err != nil {
		return fmt.Errorf("publish to %s: %w", m.Subject, err)
	}
	acked.Add(1)
	if ack.Duplicate {
		dups.Add(1)
	}
	return nil
}

// waitComplete waits for every outstanding acknowledgement.
func waitComplete(ctx context.Context, js jetstream.JetStream) error {
	select {
	case <-js.PublishAsyncComplete():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Minute):
		return fmt.Errorf("publish: %d acknowledgements still outstanding after a minute", js.PublishAsyncPending())
	}
}
