package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collogs "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// OTLP/gRPC, as the Collector's otlp exporter sends it: the tool calls of
// an Export are stored once JetStream took them, the rejected one named in
// partial_success; gzip-compressed requests and the logs service too; no
// token or a wrong one is Unauthenticated and stores nothing; a message
// over otlp.max_request_bytes is refused; /metrics counts by gRPC code.
func TestServeOTLPGRPCReceiver(t *testing.T) {
	store := openStore(t)
	opts := otlpOptions(t)
	opts.OTLPGRPCListen = "127.0.0.1:0"
	addr := make(chan string, 1)
	opts.OTLPGRPCListening = func(a string) { addr <- a }
	d := start(t, store, opts)

	conn, err := grpc.NewClient(<-addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer conn.Close()
	traces, logs := coltrace.NewTraceServiceClient(conn), collogs.NewLogsServiceClient(conn)
	withToken := func(token string) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}

	out, err := traces.Export(withToken(otlpToken), toolSpans(0, 40))
	require.NoError(t, err)
	assert.EqualValues(t, 1, out.GetPartialSuccess().GetRejectedSpans())
	assert.Contains(t, out.GetPartialSuccess().GetErrorMessage(), "bad_decision 1")
	waitCount(t, store, `SELECT count(*) FROM calls`, 40)
	assert.Equal(t, 40, queryInt(t, store, `SELECT count(*) FROM calls WHERE server = 'proxmox-mcp' AND tool = 'get_vm_status'
		AND gateway = 'gw-1' AND session = 's-1' AND latency_ms = 3 AND id LIKE 'otlp:abab%'`))

	// gzip, 10 more of which 5 again; a log record through the logs service.
	_, err = traces.Export(withToken(otlpToken), toolSpans(35, 10), grpc.UseCompressor(gzip.Name))
	require.NoError(t, err)
	lout, err := logs.Export(withToken(otlpToken), deniedDeleteLog())
	require.NoError(t, err)
	assert.Nil(t, lout.GetPartialSuccess(), "no partial_success when everything was taken")
	waitCount(t, store, `SELECT count(*) FROM calls`, 46)
	assert.Equal(t, 1, queryInt(t, store, `SELECT count(*) FROM calls WHERE tool = 'delete_vm' AND decision = 'denied'`))

	// Without the token, or with another, nothing is taken.
	for _, ctx := range []context.Context{context.Background(), withToken("wrong-token-0123456789")} {
		_, err = traces.Export(ctx, toolSpans(100, 5))
		assert.Equal(t, codes.Unauthenticated, status.Code(err), "%v", err)
	}
	// Metadata over the HTTP server's 64 KiB of headers.
	_, err = traces.Export(metadata.AppendToOutgoingContext(withToken(otlpToken), "x-padding", strings.Repeat("x", 100<<10)), toolSpans(300, 1))
	require.Error(t, err, "100 KiB of metadata was taken")
	// Over otlp.max_request_bytes.
	_, err = traces.Export(withToken(otlpToken), toolSpans(200, 3000))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	time.Sleep(300 * time.Millisecond) // anything taken would have been stored by now
	assert.Equal(t, 46, queryInt(t, store, `SELECT count(*) FROM calls`))
	assert.Equal(t, 46, queryInt(t, store, `SELECT count(DISTINCT id) FROM calls`))

	_, body := d.get(t, "/metrics", "")
	for _, want := range []string{
		`mcptrail_otlp_grpc_requests_total{code="OK",signal="traces"} 2`,
		`mcptrail_otlp_grpc_requests_total{code="OK",signal="logs"} 1`,
		`mcptrail_otlp_grpc_requests_total{code="Unauthenticated",signal="traces"} 2`,
		// grpc-go's own refusal of the message over the limit, counted too.
		`mcptrail_otlp_grpc_requests_total{code="ResourceExhausted",signal="traces"} 1`,
	} {
		assert.Contains(t, body, want)
	}
	assert.True(t, strings.Contains(body, `mcptrail_otlp_records_accepted_total{signal="traces"} 50`), "50 spans published")
}

// With http.tls.cert and key the gRPC receiver speaks TLS with the API's
// certificate: an exporter that trusts its CA is answered; one without TLS
// gets nothing through.
func TestServeOTLPGRPCOverTLS(t *testing.T) {
	pki := newTestPKI(t, t.TempDir())
	store := openStore(t)
	opts := testOptions(t)
	opts.HTTPToken, opts.OTLPToken = otlpAPIToken, otlpToken
	opts.HTTPTLSCert, opts.HTTPTLSKey = pki.serverCert, pki.serverKey
	opts.OTLPGRPCListen = "127.0.0.1:0"
	addr := make(chan string, 1)
	opts.OTLPGRPCListening = func(a string) { addr <- a }
	start(t, store, opts)
	target := <-addr

	creds, err := credentials.NewClientTLSFromFile(pki.ca, "")
	require.NoError(t, err)
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	require.NoError(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = coltrace.NewTraceServiceClient(conn).Export(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+otlpToken), toolSpans(0, 5))
	require.NoError(t, err)
	waitCount(t, store, `SELECT count(*) FROM calls`, 5)

	plain, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer plain.Close()
	short, cancelShort := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelShort()
	_, err = coltrace.NewTraceServiceClient(plain).Export(metadata.AppendToOutgoingContext(short, "authorization", "Bearer "+otlpToken), toolSpans(10, 5))
	require.Error(t, err)
}
