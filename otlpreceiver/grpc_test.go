package otlpreceiver

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/mcptrail/mcptrail/otlp"
)

// grpcClient serves rc's gRPC services on a loopback port and returns a
// trace client of it.
func grpcClient(t *testing.T, rc *Receiver) coltrace.TraceServiceClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := rc.GRPCServer()
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return coltrace.NewTraceServiceClient(conn)
}

// grpcReceiver is a receiver of o, with the test's token and subject,
// served over gRPC; a trace client of it; and the test batch as an export
// request.
func grpcReceiver(t *testing.T, o Options) (*Receiver, coltrace.TraceServiceClient, *coltrace.ExportTraceServiceRequest) {
	t.Helper()
	o.Token, o.Subject = token, "mcp.audit."
	rc, err := New(o)
	require.NoError(t, err)
	req, err := otlp.UnmarshalTraces(batch(t), otlp.Protobuf)
	require.NoError(t, err)
	return rc, grpcClient(t, rc), req
}

func bearer(tok string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+tok)
}

// retryDelayOf is the RetryInfo a status carries, zero without one.
func retryDelayOf(err error) time.Duration {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// What an exporter must retry is UNAVAILABLE with RetryInfo: while the
// daemon does not ingest, and while the stream does not acknowledge (here:
// there is none); once both hold, the request is taken. The daemon's API
// token is accepted, as over HTTP.
func TestGRPCAnswersToRetry(t *testing.T) {
	js := jetStream(t)
	var ready atomic.Bool
	_, client, req := grpcReceiver(t, Options{APIToken: "api-token-0123456789ab", JS: js, Ready: ready.Load})

	_, err := client.Export(bearer(token), req)
	assert.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
	assert.Equal(t, 5*time.Second, retryDelayOf(err))

	ready.Store(true)
	_, err = client.Export(bearer(token), req)
	assert.Equal(t, codes.Unavailable, status.Code(err), "no stream: %v", err)
	assert.Equal(t, 5*time.Second, retryDelayOf(err))

	stream := auditStream(t, js)
	_, err = client.Export(bearer("api-token-0123456789ab"), req)
	require.NoError(t, err)
	info, err := stream.Info(context.Background())
	require.NoError(t, err)
	assert.EqualValues(t, 1, info.State.Msgs)
}

// More requests at once than the receiver takes: RESOURCE_EXHAUSTED with
// RetryInfo, without which exporters would drop the data.
func TestGRPCTooManyRequestsAtOnce(t *testing.T) {
	js := jetStream(t)
	auditStream(t, js)
	rc, client, req := grpcReceiver(t, Options{JS: js, Concurrency: 1})
	rc.slots <- struct{}{} // a request under way
	_, err := client.Export(bearer(token), req)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	assert.Equal(t, 5*time.Second, retryDelayOf(err))
	<-rc.slots
	_, err = client.Export(bearer(token), req)
	require.NoError(t, err)
}

// The token is checked as a call begins, before its message is read: a
// call without it is UNAUTHENTICATED whatever it sends, a message over
// the size limit or bytes that decode to nothing, so that no client
// without the token makes the receiver read, decompress or decode.
func TestGRPCTokenBeforeTheMessage(t *testing.T) {
	js := jetStream(t)
	auditStream(t, js)
	_, client, big := grpcReceiver(t, Options{JS: js, MaxRequestBytes: 512})
	big.ResourceSpans[0].ScopeSpans[0].Spans[0].Name = strings.Repeat("x", 4096)
	for name, ctx := range map[string]context.Context{"no token": context.Background(), "another token": bearer("not-the-token-0123456789")} {
		_, err := client.Export(ctx, big)
		assert.Equal(t, codes.Unauthenticated, status.Code(err), "%s: %v", name, err)
	}
	_, err := client.Export(bearer(token), big)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "with the token the size is what refuses it: %v", err)
}

// A call whose deadline passes while its events wait for the stream ends
// as the client saw it, DEADLINE_EXCEEDED, not as the stream's fault.
func TestGRPCCallEndingBeforeTheStreamAcknowledged(t *testing.T) {
	js := jetStream(t)
	rc, client, req := grpcReceiver(t, Options{JS: js, Ready: func() bool { return true }})
	// No stream, but a subscriber that never answers: the publish waits
	// for an acknowledgement until the call's deadline.
	sub, err := js.Conn().SubscribeSync("mcp.audit.>")
	require.NoError(t, err)
	defer sub.Unsubscribe()
	require.NoError(t, js.Conn().Flush())
	ctx, cancel := context.WithTimeout(bearer(token), 300*time.Millisecond)
	defer cancel()
	_, err = client.Export(ctx, req)
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	// The client sees its deadline in any case: the receiver's count
	// says how it ended the call (cancelled, as the client reset it, or
	// its deadline), not as the stream's fault.
	count := func(c codes.Code) float64 {
		return testutil.ToFloat64(rc.grpcRequests.WithLabelValues(otlp.Traces, c.String()))
	}
	require.Eventually(t, func() bool { return count(codes.Canceled)+count(codes.DeadlineExceeded) == 1 },
		5*time.Second, 10*time.Millisecond)
	assert.Zero(t, count(codes.Unavailable)+count(codes.Internal))
}
