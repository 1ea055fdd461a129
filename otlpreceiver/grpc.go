package otlpreceiver

import (
	"context"
	"errors"
	"net/http"
	"time"

	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // exporters compress with gzip
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/otlp"
)

// OTLP/gRPC is what most exporters speak by default (the Collector's otlp
// exporter, port 4317). Its requests take the HTTP receiver's way after
// decoding: the same token, the same bound on requests at once, the same
// readiness, the same publishing; only the answers are gRPC statuses.

// grpcStreams bounds the calls one connection has open at once; more than
// the receiver's bound on requests wait for none of them.
const grpcStreams = 16

// GRPCServer is a gRPC server with the OTLP trace and logs services, which
// admits only the exporters' token (or the API token) and messages up to
// otlp.max_request_bytes after decompression; opts add to its options
// (credentials, for TLS; the connection's bounds).
func (rc *Receiver) GRPCServer(opts ...grpc.ServerOption) *grpc.Server {
	s := grpc.NewServer(append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(int(rc.o.MaxRequestBytes)),
		// The token is checked as a call begins, before its message is
		// read: a handler's interceptor runs only once the message is
		// received, decompressed and decoded.
		grpc.InTapHandle(rc.grpcToken),
		grpc.MaxConcurrentStreams(grpcStreams),
		grpc.StatsHandler(grpcCounter{rc: rc}),
	}, opts...)...)
	coltrace.RegisterTraceServiceServer(s, traceService{rc: rc})
	collogs.RegisterLogsServiceServer(s, logsService{rc: rc})
	return s
}

type traceService struct {
	coltrace.UnimplementedTraceServiceServer
	rc *Receiver
}

func (t traceService) Export(ctx context.Context, req *coltrace.ExportTraceServiceRequest) (*coltrace.ExportTraceServiceResponse, error) {
	resp, err := t.rc.exportGRPC(ctx, otlp.Traces, func() otlp.Result { return otlp.FromTraces(req, t.rc.o.Convert) })
	if err != nil {
		return nil, err
	}
	return resp.(*coltrace.ExportTraceServiceResponse), nil
}

type logsService struct {
	collogs.UnimplementedLogsServiceServer
	rc *Receiver
}

func (l logsService) Export(ctx context.Context, req *collogs.ExportLogsServiceRequest) (*collogs.ExportLogsServiceResponse, error) {
	resp, err := l.rc.exportGRPC(ctx, otlp.Logs, func() otlp.Result { return otlp.FromLogs(req, l.rc.o.Convert) })
	if err != nil {
		return nil, err
	}
	return resp.(*collogs.ExportLogsServiceResponse), nil
}

// exportGRPC converts and accepts one request, within the bound on
// requests at once and while the daemon ingests, and counts its answer.
func (rc *Receiver) exportGRPC(ctx context.Context, signal string, convert func() otlp.Result) (resp any, err error) {
	release, f := rc.take()
	if f != nil {
		return nil, grpcFailure(f)
	}
	defer release()
	if f := rc.notReady(); f != nil {
		return nil, grpcFailure(f)
	}
	m, err := rc.accept(ctx, signal, convert())
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, status.FromContextError(err).Err() // what the client saw
		}
		var f *failure
		if !errors.As(err, &f) {
			f = &failure{code: http.StatusInternalServerError, msg: err.Error()}
		}
		return nil, grpcFailure(f)
	}
	return m, nil
}

// grpcFailure is a failure as a gRPC status. One to retry carries
// RetryInfo: OTLP exporters retry RESOURCE_EXHAUSTED only with it, and
// wait as long as it says.
func grpcFailure(f *failure) error {
	st := status.New(codes.Code(grpcCode(f.code)), f.msg)
	if f.retry {
		if withInfo, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay)}); err == nil {
			st = withInfo
		}
	}
	return st.Err()
}

// retryDelay is retryAfter's wait, for gRPC's RetryInfo.
const retryDelay = 5 * time.Second

// grpcToken admits a call whose authorization metadata carries the
// exporters' token, or the daemon's API token (warned about once, as over
// HTTP), as the call begins.
func (rc *Receiver) grpcToken(ctx context.Context, info *tap.Info) (context.Context, error) {
	auth := ""
	if v := info.Header.Get("authorization"); len(v) == 1 {
		auth = v[0]
	}
	switch {
	case api.BearerOK(auth, rc.o.Token):
	case api.BearerOK(auth, rc.o.APIToken):
		rc.apiTokenSeen.Do(func() {
			remote := ""
			if p, ok := peer.FromContext(ctx); ok {
				remote = p.Addr.String()
			}
			rc.o.Log.Warn("an exporter sends the daemon's API token, which may also query and change the store: "+
				"give it the OTLP token instead (otlp.token, or the file otlp.token_file), which may only send telemetry",
				"remote", remote)
		})
	default:
		// Such a call never begins: grpcCounter does not see it.
		if signal, ok := signalOf(info.FullMethodName); ok {
			rc.grpcRequests.WithLabelValues(signal, codes.Unauthenticated.String()).Inc()
		}
		return ctx, status.Error(codes.Unauthenticated, "send the OTLP token (otlp.token, or the file otlp.token_file) as the authorization metadata: Bearer <token>")
	}
	return ctx, nil
}

// signalOf is the OTLP signal of an Export method; ok is false for any
// other method.
func signalOf(method string) (signal string, ok bool) {
	switch method {
	case coltrace.TraceService_Export_FullMethodName:
		return otlp.Traces, true
	case collogs.LogsService_Export_FullMethodName:
		return otlp.Logs, true
	}
	return "", false
}

// grpcCounter counts every Export call as it ends, with the status it
// ended with: those grpc-go answers itself (a message over the size limit,
// one that does not decode) as well as the handler's.
type grpcCounter struct{ rc *Receiver }

// methodKey holds a call's method in its context, for HandleRPC.
type methodKey struct{}

func (g grpcCounter) TagRPC(ctx context.Context, info *stats.RPCTagInfo) context.Context {
	return context.WithValue(ctx, methodKey{}, info.FullMethodName)
}

func (g grpcCounter) HandleRPC(ctx context.Context, s stats.RPCStats) {
	end, ok := s.(*stats.End)
	if !ok || end.IsClient() {
		return
	}
	method, _ := ctx.Value(methodKey{}).(string)
	if signal, ok := signalOf(method); ok {
		g.rc.grpcRequests.WithLabelValues(signal, status.Code(end.Error).String()).Inc()
	}
}

func (grpcCounter) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }

func (grpcCounter) HandleConn(context.Context, stats.ConnStats) {}
