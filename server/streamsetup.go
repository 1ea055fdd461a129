package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/redact"
	"github.com/mcptrail/mcptrail/internal/wait"
)

// DefaultStartupTimeout is how long the start waits for the stream to answer
// (nats.startup_timeout).
const DefaultStartupTimeout = 2 * time.Minute

// streamSetup creates or brings in line the stream and the consumer.
type streamSetup struct {
	js      jetstream.JetStream
	nc      *nats.Conn
	stream  ingest.StreamSpec
	cons    ingest.ConsumerSpec
	timeout time.Duration
	m       *metrics
	log     *slog.Logger
	// onHealth tells /readyz why the daemon is not ingesting yet.
	onHealth func(ok bool, reason string)
}

// run sets both up, waiting with backoff while JetStream cannot answer (a
// stream leader being elected, a cluster still forming) up to the timeout:
// only what waiting cannot fix (JetStream off, a refused configuration)
// fails at once.
func (s streamSetup) run(ctx context.Context) (jetstream.Stream, jetstream.Consumer, error) {
	timeout := s.timeout
	if timeout <= 0 {
		timeout = DefaultStartupTimeout
	}
	deadline := time.Now().Add(timeout)
	delay := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		stream, cons, err := s.once(ctx)
		if err == nil {
			if attempt > 1 {
				s.log.Info("the stream answered", "stream", s.stream.Name, "attempts", attempt)
				s.onHealth(true, "")
			}
			s.checkReplicas(stream)
			return stream, cons, nil
		}
		switch {
		case ctx.Err() != nil:
			return nil, nil, ctx.Err()
		case !retryable(err):
			return nil, nil, err
		case time.Now().Add(delay).After(deadline):
			return nil, nil, fmt.Errorf("%w; gave up after nats.startup_timeout (%s) and %d attempts with the NATS servers %s%s",
				err, timeout, attempt, s.servers(), s.placementHint(err))
		}
		s.m.errors.WithLabelValues("stream_setup").Inc()
		reason := fmt.Sprintf("waiting for stream %s: %v", s.stream.Name, err)
		s.onHealth(false, reason)
		s.log.Warn("the stream does not answer yet; retrying", "stream", s.stream.Name, "attempt", attempt, "retry_in", delay, "err", err)
		if !wait.Sleep(ctx, delay) {
			return nil, nil, ctx.Err()
		}
		delay = min(2*delay, 5*time.Second)
	}
}

// once is one attempt, bounded so that a request lost in an election does
// not hold the start for long.
func (s streamSetup) once(ctx context.Context) (jetstream.Stream, jetstream.Consumer, error) {
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := ingest.EnsureStream(actx, s.js, s.stream)
	if jetStreamOff(err) {
		return nil, nil, fmt.Errorf("nats.jetstream: %w: enable JetStream on the NATS server (and for this account), "+
			"or set nats.jetstream: false for core mode, which is at-most-once", err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("nats.stream: %w", err)
	}
	cons, err := ingest.EnsureConsumer(actx, s.js, s.cons)
	if err != nil {
		return nil, nil, fmt.Errorf("nats.consumer: %w", err)
	}
	return stream, cons, nil
}

// errCodeNoPeers is JetStream's "no suitable peers for placement" (the
// server's JSClusterNoPeersErrF), which nats.go does not name. A cluster
// whose nodes are still joining answers it to a replicated stream with code
// 400, although the next attempt may succeed.
const errCodeNoPeers jetstream.ErrorCode = 10005

// retryable tells the errors that waiting can fix: no answer in time,
// JetStream saying it is unavailable for now (HTTP-like codes 408, 5xx), or
// too few peers online yet to place the stream's replicas.
func retryable(err error) bool {
	if jetStreamOff(err) {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 408 || apiErr.Code >= 500 || apiErr.ErrorCode == errCodeNoPeers
	}
	return true // timeouts, a connection being re-established
}

// placementHint says what a stream that could not be placed needs.
func (s streamSetup) placementHint(err error) string {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeNoPeers {
		return ""
	}
	return fmt.Sprintf(" (nats.stream_replicas is %d: the cluster needs that many JetStream servers online, "+
		"or lower nats.stream_replicas)", max(s.stream.Replicas, 1))
}

// jetStreamOff tells the errors of a server or account without JetStream.
func jetStreamOff(err error) bool {
	return errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, jetstream.ErrJetStreamNotEnabledForAccount) ||
		errors.Is(err, nats.ErrNoResponders)
}

// checkReplicas logs a stream whose replicas differ from nats.stream_replicas
// (an operator's larger value is kept).
func (s streamSetup) checkReplicas(stream jetstream.Stream) {
	want := max(s.stream.Replicas, 1)
	if got := stream.CachedInfo().Config.Replicas; got != want {
		s.log.Warn("the stream's replicas differ from nats.stream_replicas; keeping the stream's", "stream", s.stream.Name,
			"replicas", got, "nats.stream_replicas", want)
	}
}

// servers names the NATS servers the connection knows, credentials hidden.
func (s streamSetup) servers() string {
	var names []string
	for _, u := range s.nc.Servers() {
		names = append(names, redact.URL(u))
	}
	return strings.Join(names, ", ")
}
