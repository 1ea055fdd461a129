package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"golang.org/x/sync/errgroup"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/otlp"
	"github.com/mcptrail/mcptrail/simulate"
)

// otlpBatchSpans is how many spans simulate puts in one OTLP request (the
// OpenTelemetry Collector's default batch size).
const otlpBatchSpans = 512

// otlpBatcher groups events into OTLP trace requests.
type otlpBatcher struct {
	events []audit.Event
	opts   otlp.EncodeOptions
	send   func(req *coltrace.ExportTraceServiceRequest, spans int) error
}

func (b *otlpBatcher) add(e audit.Event) error {
	b.events = append(b.events, e)
	if len(b.events) >= otlpBatchSpans {
		return b.flush()
	}
	return nil
}

func (b *otlpBatcher) flush() error {
	if len(b.events) == 0 {
		return nil
	}
	err := b.send(otlp.TracesRequest(b.events, b.opts), len(b.events))
	b.events = b.events[:0]
	return err
}

// otlpSenders is how many requests simulate --otlp keeps in flight (the
// receiver serves 4 at once).
const otlpSenders = 4

// otlpRetries bounds how often one request is sent again after 429 or 503.
const otlpRetries = 10

// The OTLP protocols simulate --otlp speaks (OTEL_EXPORTER_OTLP_PROTOCOL's
// names).
const (
	otlpHTTP = "http/protobuf"
	otlpGRPC = "grpc"
)

// sendSimulationOTLP sends simulated traffic to an OTLP receiver as
// protobuf trace requests of otlpBatchSpans spans, with the exporters'
// token: over HTTP, or over gRPC when protocol is otlpGRPC.
func (a *app) sendSimulationOTLP(cmd *cobra.Command, opts simulate.Options, target, protocol string, stateless bool) error {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("--otlp %q: want an http:// or https:// URL such as http://127.0.0.1:4318 (4317 for grpc)", target)
	}
	if protocol != otlpHTTP && protocol != otlpGRPC {
		return usageErrorf("--otlp-protocol %q: allowed values are %s and %s", protocol, otlpHTTP, otlpGRPC)
	}
	if protocol == otlpGRPC && (u.Port() == "" || (u.Path != "" && u.Path != "/")) {
		return usageErrorf("--otlp %q with --otlp-protocol grpc: want the receiver's host and port and no path, such as http://127.0.0.1:4317", target)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	token := a.cfg.OTLP.Token
	if token == "" {
		if token, err = api.ReadTokenFile(a.otlpTokenFile(), "otlp.token_file"); err != nil {
			return fmt.Errorf("--otlp needs the OTLP exporters' token (otlp.token, or otlp.token_file, which serve writes when otlp.listen is set): %w", err)
		}
	}
	client := &http.Client{Timeout: time.Minute}
	export := func(ctx context.Context, req *coltrace.ExportTraceServiceRequest) (int64, error) {
		body, err := proto.Marshal(req)
		if err != nil {
			return 0, err
		}
		return postOTLP(ctx, client, u.String(), token, body)
	}
	if protocol == otlpGRPC {
		creds := insecure.NewCredentials()
		if u.Scheme == "https" {
			creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		}
		conn, err := grpc.NewClient(u.Host, grpc.WithTransportCredentials(creds))
		if err != nil {
			return fmt.Errorf("--otlp %s: %w", target, err)
		}
		defer conn.Close()
		traces := coltrace.NewTraceServiceClient(conn)
		export = func(ctx context.Context, req *coltrace.ExportTraceServiceRequest) (int64, error) {
			return exportGRPC(ctx, traces, u.Host, token, req)
		}
	}
	var sent, rejected atomic.Int64
	start := time.Now()
	// Like a collector's sending queue: a few requests in flight, as the
	// receiver answers each only once JetStream acknowledged it.
	g, ctx := errgroup.WithContext(cmd.Context())
	g.SetLimit(otlpSenders)
	b := otlpBatcher{opts: otlp.EncodeOptions{Stateless: stateless}, send: func(req *coltrace.ExportTraceServiceRequest, spans int) error {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		g.Go(func() error {
			rej, err := export(ctx, req)
			if err == nil {
				sent.Add(int64(spans) - rej)
				rejected.Add(rej)
			}
			return err
		})
		return nil
	}}
	_, err = simulate.Generate(ctx, opts, b.add)
	if err == nil {
		err = b.flush()
	}
	if werr := g.Wait(); werr != nil {
		err = werr // the first failed request says why the rest stopped
	}
	if err != nil {
		return err
	}
	took := time.Since(start)
	fmt.Fprintf(a.stdout, "sent %d events in %s (%.0f events/s), %d rejected\n", sent.Load(), took.Round(time.Millisecond),
		float64(sent.Load())/max(took.Seconds(), 1e-9), rejected.Load())
	return nil
}

// postOTLP sends one request, again after 429 or 503 as Retry-After says,
// and returns the number of spans the receiver rejected.
func postOTLP(ctx context.Context, client *http.Client, target, token string, body []byte) (rejected int64, err error) {
	for try := 0; ; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/x-protobuf")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, fmt.Errorf("send to %s: %w", target, err)
		}
		data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("send to %s: %w", target, err)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			var out coltrace.ExportTraceServiceResponse
			if err := proto.Unmarshal(data, &out); err != nil {
				return 0, fmt.Errorf("send to %s: the answer is no ExportTraceServiceResponse: %w", target, err)
			}
			return out.GetPartialSuccess().GetRejectedSpans(), nil
		case (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && try < otlpRetries:
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			select {
			case <-time.After(time.Duration(max(wait, 1)) * time.Second):
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		default:
			var st rpcstatus.Status
			msg := strings.TrimSpace(string(data))
			if proto.Unmarshal(data, &st) == nil && st.GetMessage() != "" {
				msg = st.GetMessage()
			}
			return 0, fmt.Errorf("send to %s: %s: %s", target, resp.Status, msg)
		}
	}
}

// exportGRPC sends one request over OTLP/gRPC, within a minute as the
// HTTP path's client does, again when the receiver asks for it with
// RetryInfo (UNAVAILABLE while it cannot take events, RESOURCE_EXHAUSTED
// while busy) after the delay it gives, and returns the number of spans
// the receiver rejected. Anything else fails at once: a receiver that
// cannot be reached, a message too large.
func exportGRPC(ctx context.Context, client coltrace.TraceServiceClient, target, token string, req *coltrace.ExportTraceServiceRequest) (int64, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	for try := 0; ; try++ {
		callCtx, cancel := context.WithTimeout(ctx, time.Minute)
		out, err := client.Export(callCtx, req, grpc.UseCompressor(gzip.Name))
		cancel()
		if err == nil {
			return out.GetPartialSuccess().GetRejectedSpans(), nil
		}
		st := status.Convert(err)
		var wait time.Duration
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				wait = max(ri.GetRetryDelay().AsDuration(), time.Second)
			}
		}
		if wait == 0 || (st.Code() != codes.Unavailable && st.Code() != codes.ResourceExhausted) || try >= otlpRetries {
			return 0, fmt.Errorf("send to %s: %s: %s", target, st.Code(), st.Message())
		}
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
