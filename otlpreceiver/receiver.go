// Package otlpreceiver is the daemon's OTLP receiver: OTLP/HTTP, POST
// /v1/traces and /v1/logs (protobuf or JSON, gzip or not), and OTLP/gRPC,
// the trace and logs services' Export (grpc.go); each request's tool calls
// converted by package otlp and published to the JetStream stream like a
// gateway's events; the answer goes out only once JetStream acknowledged every
// publish, so a success means the events are durable.
package otlpreceiver

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/otlp"
)

// Paths of the OTLP/HTTP signals.
const (
	PathTraces = "/v1/traces"
	PathLogs   = "/v1/logs"
)

// DefaultMaxRequestBytes is otlp.max_request_bytes: the largest body, before
// and after decompression.
const DefaultMaxRequestBytes = 4 << 20

// retryAfter is what a client is told to wait while the stream cannot take
// its events.
const retryAfter = "5"

// publishTimeout bounds the wait for JetStream's acknowledgements.
const publishTimeout = 10 * time.Second

// Options configure the receiver.
type Options struct {
	// Token is the exporters' token (otlp.token), required as a bearer
	// token: it may send telemetry and nothing else. APIToken, the
	// daemon's API token, is accepted too (exporters set up with it before
	// the receiver had a token of its own), with a warning the first time.
	Token    string
	APIToken string
	// JS publishes; Subject is the prefix events go under (mcp.audit.).
	JS      jetstream.JetStream
	Subject string
	// Convert maps OTLP to events (otlp.server, ingest.store_args).
	Convert otlp.Options
	// MaxEventBytes rejects a record whose event is larger
	// (ingest.max_event_bytes: the ingester would dead-letter it).
	MaxEventBytes int
	// MaxMessageBytes bounds a batched message's payload
	// (ingest.max_message_bytes; ingest.DefaultMaxMessageBytes when 0).
	MaxMessageBytes int
	// MaxRequestBytes bounds a request body (DefaultMaxRequestBytes when 0).
	MaxRequestBytes int64
	// Ready reports whether the daemon ingests; while it does not, requests
	// get 503.
	Ready func() bool
	// Concurrency bounds the requests decoded and published at once (4 when
	// 0); more get 429.
	Concurrency int
	Log         *slog.Logger
}

// Receiver serves OTLP/HTTP.
type Receiver struct {
	o            Options
	slots        chan struct{}
	h            http.Handler
	apiTokenSeen sync.Once

	received     *prometheus.CounterVec
	accepted     *prometheus.CounterVec
	dropped      *prometheus.CounterVec
	requests     *prometheus.CounterVec
	grpcRequests *prometheus.CounterVec
}

// New makes a receiver.
func New(o Options) (*Receiver, error) {
	if o.Token == "" {
		return nil, errors.New("otlp receiver: no token: it is never open without one")
	}
	if o.JS == nil {
		return nil, errors.New("otlp receiver: no JetStream")
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxEventBytes <= 0 {
		o.MaxEventBytes = audit.DefaultMaxEventBytes
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if !strings.HasSuffix(o.Subject, ".") {
		o.Subject += "."
	}
	rc := &Receiver{o: o, slots: make(chan struct{}, o.Concurrency),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_otlp_records_received_total",
			Help: "Spans and log records received by the OTLP receiver, by signal.",
		}, []string{"signal"}),
		accepted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_otlp_records_accepted_total",
			Help: "Tool calls the OTLP receiver published to the stream (acknowledged by JetStream), by signal.",
		}, []string{"signal"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_otlp_records_dropped_total",
			Help: "Spans and log records not published, by signal and reason: no tool call (not_mcp, other_method, no_tool_name, nested) or a rejected tool call (its audit reason code).",
		}, []string{"signal", "reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_otlp_requests_total",
			Help: "OTLP/HTTP requests, by signal and HTTP status code.",
		}, []string{"signal", "code"}),
		grpcRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_otlp_grpc_requests_total",
			Help: "OTLP/gRPC requests, by signal and gRPC status code.",
		}, []string{"signal", "code"}),
	}
	mux := http.NewServeMux()
	mux.Handle("POST "+PathTraces, rc.requireToken(rc.signal(otlp.Traces)))
	mux.Handle("POST "+PathLogs, rc.requireToken(rc.signal(otlp.Logs)))
	rc.h = mux
	return rc, nil
}

// ServeHTTP serves the OTLP/HTTP paths.
func (rc *Receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) { rc.h.ServeHTTP(w, r) }

// Collectors are the receiver's metrics, for /metrics.
func (rc *Receiver) Collectors() []prometheus.Collector {
	return []prometheus.Collector{rc.received, rc.accepted, rc.dropped, rc.requests, rc.grpcRequests}
}

// failure is an answer other than 200.
type failure struct {
	code  int
	msg   string
	retry bool
}

func (f *failure) Error() string { return f.msg }

// take takes one of the requests the receiver serves at once, over HTTP
// and gRPC alike; when none is free it fails, to be retried.
func (rc *Receiver) take() (release func(), f *failure) {
	select {
	case rc.slots <- struct{}{}:
		return func() { <-rc.slots }, nil
	default:
		return nil, &failure{code: http.StatusTooManyRequests, msg: "too many OTLP requests at once: retry later", retry: true}
	}
}

// notReady is the failure of a request while the daemon does not ingest,
// nil while it does.
func (rc *Receiver) notReady() *failure {
	if rc.o.Ready != nil && !rc.o.Ready() {
		return &failure{code: http.StatusServiceUnavailable, msg: "the daemon is not ingesting now: retry later", retry: true}
	}
	return nil
}

func (rc *Receiver) signal(signal string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		enc, ok := encodingOf(r.Header.Get("Content-Type"))
		if !ok {
			rc.fail(w, signal, otlp.JSON, &failure{code: http.StatusUnsupportedMediaType,
				msg: fmt.Sprintf("Content-Type %q: want application/x-protobuf or application/json", r.Header.Get("Content-Type"))})
			return
		}
		release, f := rc.take()
		if f != nil {
			rc.fail(w, signal, enc, f)
			return
		}
		defer release()
		resp, err := rc.export(r, signal, enc)
		if err != nil {
			var f *failure
			switch {
			case errors.As(err, &f):
			case r.Context().Err() != nil: // the client went away: as before it did, send again
				f = &failure{code: http.StatusServiceUnavailable, msg: "the request ended before the stream acknowledged its events: retry", retry: true}
			default:
				f = &failure{code: http.StatusInternalServerError, msg: err.Error()}
			}
			rc.fail(w, signal, enc, f)
			return
		}
		rc.write(w, signal, enc, http.StatusOK, resp)
	})
}

func encodingOf(contentType string) (otlp.Encoding, bool) {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return 0, false
	}
	switch mt {
	case "application/x-protobuf":
		return otlp.Protobuf, true
	case "application/json":
		return otlp.JSON, true
	}
	return 0, false
}

// export reads, converts and publishes one request and returns its answer.
func (rc *Receiver) export(r *http.Request, signal string, enc otlp.Encoding) (proto.Message, error) {
	if f := rc.notReady(); f != nil {
		return nil, f
	}
	body, err := rc.read(r)
	if err != nil {
		return nil, err
	}
	res, err := otlp.Decode(body, enc, signal, rc.o.Convert)
	if err != nil {
		return nil, &failure{code: http.StatusBadRequest, msg: err.Error()}
	}
	return rc.accept(r.Context(), signal, res)
}

// accept publishes a request's tool calls and its rejected records, counts
// them, and returns the answer: with a partial success naming the rejected.
func (rc *Receiver) accept(ctx context.Context, signal string, res otlp.Result) (proto.Message, error) {
	msgs, events := rc.messages(&res)
	msgs = append(msgs, rc.rejected(&res)...)
	if err := rc.publish(ctx, msgs); err != nil {
		if ctx.Err() != nil {
			// The client gave up (its deadline, or it went away): no
			// answer reaches it, and the stream is not at fault.
			rc.o.Log.Debug("otlp: a request ended before the stream acknowledged its events", "signal", signal, "events", events, "err", ctx.Err())
			return nil, ctx.Err()
		}
		rc.o.Log.Warn("otlp: the stream did not take a request's events: answered 503", "signal", signal, "events", events, "err", err)
		return nil, &failure{code: http.StatusServiceUnavailable, msg: "the stream did not acknowledge the events: retry later", retry: true}
	}
	rc.received.WithLabelValues(signal).Add(float64(res.Records))
	rc.accepted.WithLabelValues(signal).Add(float64(events))
	for reason, n := range res.Dropped {
		rc.dropped.WithLabelValues(signal, reason).Add(float64(n))
	}
	for reason, n := range res.Rejected {
		rc.dropped.WithLabelValues(signal, reason).Add(float64(n))
	}
	rejected, msg := int64(res.RejectedCount()), ""
	if rejected > 0 {
		msg = rejectionMessage(res)
	}
	if signal == otlp.Traces {
		out := &coltrace.ExportTraceServiceResponse{}
		if rejected > 0 {
			out.PartialSuccess = &coltrace.ExportTracePartialSuccess{RejectedSpans: rejected, ErrorMessage: msg}
		}
		return out, nil
	}
	out := &collogs.ExportLogsServiceResponse{}
	if rejected > 0 {
		out.PartialSuccess = &collogs.ExportLogsPartialSuccess{RejectedLogRecords: rejected, ErrorMessage: msg}
	}
	return out, nil
}

// rejectionMessage names the counts by reason and the first rejection.
func rejectionMessage(res otlp.Result) string {
	reasons := make([]string, 0, len(res.Rejected))
	for k := range res.Rejected {
		reasons = append(reasons, k)
	}
	slices.Sort(reasons)
	parts := make([]string, len(reasons))
	for i, k := range reasons {
		parts[i] = fmt.Sprintf("%s %d", k, res.Rejected[k])
	}
	return fmt.Sprintf("tool calls rejected (%s); first: %s", strings.Join(parts, ", "), res.Message)
}

// read returns the body, gunzipped, within the size limit.
func (rc *Receiver) read(r *http.Request) ([]byte, error) {
	limit := rc.o.MaxRequestBytes
	tooLarge := &failure{code: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf("the request body is over otlp.max_request_bytes (%d bytes): send smaller batches", limit)}
	if r.ContentLength > limit {
		return nil, tooLarge
	}
	var src io.Reader = http.MaxBytesReader(nil, r.Body, limit)
	switch strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))) {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(src)
		if err != nil {
			return nil, bodyError(err, tooLarge)
		}
		defer zr.Close()
		src = zr
	default:
		return nil, &failure{code: http.StatusUnsupportedMediaType, msg: fmt.Sprintf("Content-Encoding %q: want gzip or none", r.Header.Get("Content-Encoding"))}
	}
	data, err := io.ReadAll(io.LimitReader(src, limit+1))
	if err != nil {
		return nil, bodyError(err, tooLarge)
	}
	if int64(len(data)) > limit {
		return nil, tooLarge
	}
	return data, nil
}

func bodyError(err error, tooLarge *failure) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge
	}
	return &failure{code: http.StatusBadRequest, msg: "reading the body: " + err.Error()}
}

// messages packs a request's events into batched messages (SPEC §2: up to
// 64 events, ingest.max_message_bytes or less under the server's
// max_payload, Nats-Msg-Id from their ids) as a careful gateway does, so
// that the stream and the ingester handle one message per 64 events
// instead of one each; a request of one event is a message of its own,
// with its id as Nats-Msg-Id. An event over ingest.max_event_bytes is
// rejected in res instead. events counts the events the messages carry.
func (rc *Receiver) messages(res *otlp.Result) (msgs []*nats.Msg, events int) {
	b := ingest.Batcher{Prefix: rc.o.Subject, MaxBytes: rc.messageBytes()}
	var last *audit.Event
	var lastLine []byte
	for i := range res.Events {
		e := &res.Events[i]
		line, err := ingest.EncodeEvent(e)
		if err == nil && len(line) > rc.o.MaxEventBytes {
			err = &audit.Rejection{Reason: audit.ReasonTooLarge, Detail: fmt.Sprintf("the event of span or record %s has %d bytes: the limit (ingest.max_event_bytes) is %d", e.ID, len(line), rc.o.MaxEventBytes)}
		}
		if err != nil {
			res.Reject(err, nil, rc.o.Convert)
			rj := &res.Rejects[len(res.Rejects)-1]
			rj.Raw, rj.Server = line, e.Server // the event, for its dead letter
			continue
		}
		if m := b.AddEncoded(e, line); m != nil {
			msgs = append(msgs, m)
		}
		events++
		last, lastLine = e, line
	}
	if events == 1 {
		return []*nats.Msg{ingest.EncodedEventMsg(rc.o.Subject, last, lastLine)}, 1
	}
	if m := b.Flush(); m != nil {
		msgs = append(msgs, m)
	}
	return msgs, events
}

// rejected are the messages that send a request's rejected tool calls to
// the dead letters (ingest.RejectedMsg): the receiver holds no database,
// and a rejected record must not be lost (SPEC §1, Bad input). They are
// published with the events, so the request is answered once both are in
// the stream.
func (rc *Receiver) rejected(res *otlp.Result) []*nats.Msg {
	limit := rc.messageBytes()
	msgs := make([]*nats.Msg, 0, len(res.Rejects))
	for _, rj := range res.Rejects {
		msgs = append(msgs, ingest.RejectedMsg(rc.o.Subject, rj.Server,
			ingest.Rejected{Reason: rj.Err.Reason, Detail: rj.Err.Detail, Signal: rj.Signal}, rj.Raw, limit))
	}
	return msgs
}

// messageBytes is the payload a message may carry: ingest.max_message_bytes,
// less under the server's max_payload (ingest.BatchBytes).
func (rc *Receiver) messageBytes() int {
	var maxPayload int64
	if nc := rc.o.JS.Conn(); nc != nil {
		maxPayload = nc.MaxPayload()
	}
	return ingest.BatchBytes(rc.o.MaxMessageBytes, maxPayload)
}

// publish publishes every message and waits until JetStream acknowledged all
// of them; any failure fails the whole request (the client sends it again, and
// the ids keep what was stored from being stored twice).
func (rc *Receiver) publish(ctx context.Context, msgs []*nats.Msg) error {
	if len(msgs) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, publishTimeout)
	defer cancel()
	futures := make([]jetstream.PubAckFuture, 0, len(msgs))
	for _, m := range msgs {
		for {
			f, err := rc.o.JS.PublishMsgAsync(m)
			if errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
				continue // the window is full: the client waits for acknowledgements
			}
			if err != nil {
				return fmt.Errorf("publish to %s: %w", m.Subject, err)
			}
			futures = append(futures, f)
			break
		}
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return fmt.Errorf("publish to %s: %w", f.Msg().Subject, err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func (rc *Receiver) fail(w http.ResponseWriter, signal string, enc otlp.Encoding, f *failure) {
	if f.retry {
		w.Header().Set("Retry-After", retryAfter)
	}
	rc.write(w, signal, enc, f.code, &rpcstatus.Status{Code: grpcCode(f.code), Message: f.msg})
}

// grpcCode is the google.rpc.Code of an HTTP status, for the Status body.
func grpcCode(code int) int32 {
	switch code {
	case http.StatusBadRequest, http.StatusUnsupportedMediaType:
		return 3 // INVALID_ARGUMENT
	case http.StatusRequestEntityTooLarge:
		return 11 // OUT_OF_RANGE
	case http.StatusTooManyRequests:
		return 8 // RESOURCE_EXHAUSTED
	case http.StatusServiceUnavailable:
		return 14 // UNAVAILABLE
	}
	return 13 // INTERNAL
}

// write answers in the request's encoding.
func (rc *Receiver) write(w http.ResponseWriter, signal string, enc otlp.Encoding, code int, m proto.Message) {
	var data []byte
	var err error
	if enc == otlp.Protobuf {
		w.Header().Set("Content-Type", "application/x-protobuf")
		data, err = proto.Marshal(m)
	} else {
		w.Header().Set("Content-Type", "application/json")
		data, err = otlp.MarshalJSON(m)
	}
	if err != nil {
		code, data = http.StatusInternalServerError, nil
	}
	rc.requests.WithLabelValues(signal, strconv.Itoa(code)).Inc()
	w.WriteHeader(code)
	_, _ = w.Write(data)
}
