// Package shardsvc is the daemon's API as a NATS micro service, and the
// CLI's side of it: each `mcptrail serve` registers the service "mcptrail"
// with the audit servers it owns (nats.servers), and the CLI finds the shard
// that owns a server, or asks every shard, without knowing their addresses.
//
// Endpoints take the same typed api requests as the HTTP API and are
// answered by the same api.Backend, so an answer is the HTTP answer's frames
// byte for byte, sent as one message. Every request carries the daemon's API
// token; the client sends it only to a shard that proved it holds it.
package shardsvc

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcptrail/mcptrail/api"
)

const (
	// Name is the micro service's name: discovery asks $SRV.INFO.mcptrail.
	Name = "mcptrail"
	// SubjectPrefix starts every endpoint's subject:
	// mcptrail.api.<instance id>.<endpoint>, so that a request reaches
	// one shard, never any member of a queue group.
	SubjectPrefix = "mcptrail.api"
	// AuthHeader carries "Bearer <token>", as over HTTP.
	AuthHeader = "Authorization"
	// HelloEndpoint answers a challenge with the token's proof bound to its
	// subject (api.ProofFor).
	HelloEndpoint = "hello"
	// AllServers is the servers metadata of a shard that owns every server.
	AllServers = "*"

	// Metadata keys of the service.
	MetaServers   = "servers"
	MetaDatabase  = "database"
	MetaConsumer  = "consumer"
	MetaStream    = "stream"
	MetaEndpoints = "endpoints"
	// MetaPath is the endpoint metadata naming the api path it serves.
	MetaPath = "path"
)

// Error codes of the service's error answers (the Nats-Service-Error-Code
// header), named like the HTTP statuses they stand for.
const (
	CodeBadRequest   = "400"
	CodeUnauthorized = "401"
	CodeConflict     = "409"
	CodeTooLarge     = "413"
	CodeUnavailable  = "503"
)

// Options configure the service.
type Options struct {
	Backend api.Backend
	// Token is the daemon's API token; it must not be empty.
	Token string
	// Servers are the audit servers this daemon consumes (nats.servers);
	// empty: all.
	Servers []string
	// Stream and Consumer name the daemon's JetStream consumer, so that the
	// CLI can tell a shard that does not answer from one that is not there.
	Stream, Consumer string
	// Version is the binary's SemVer version ("0.0.0" when unknown).
	Version string
	Log     *slog.Logger
	// Concurrency bounds the requests that run at once (default 2, as the
	// HTTP API).
	Concurrency int
}

// Service is a running registration.
type Service struct {
	svc micro.Service
	h   *handler
}

// Start registers the service on nc. Requests run with ctx: when it ends,
// requests not yet started are refused. Stop ends the registration.
func Start(ctx context.Context, nc *nats.Conn, o Options) (*Service, error) {
	if o.Token == "" {
		return nil, errors.New("shard service: no API token: the service is never open without one")
	}
	if o.Backend == nil {
		return nil, errors.New("shard service: no backend")
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 2
	}
	if o.Version == "" {
		o.Version = "0.0.0"
	}
	servers := AllServers
	if len(o.Servers) > 0 {
		servers = strings.Join(o.Servers, ",")
	}
	var names []string
	for _, p := range api.Paths() {
		names = append(names, endpointName(p))
	}
	svc, err := micro.AddService(nc, micro.Config{
		Name: Name, Version: o.Version,
		Description: "mcptrail daemon API (docs/API.md) for the audit servers in metadata.servers",
		Metadata: map[string]string{MetaServers: servers, MetaDatabase: o.Backend.Database(),
			MetaConsumer: o.Consumer, MetaStream: o.Stream, MetaEndpoints: strings.Join(names, ",")},
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			o.Log.Warn("shard service", "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("register the NATS service %q: %w", Name, err)
	}
	h := &handler{o: o, ctx: ctx, nc: nc, slots: make(chan struct{}, o.Concurrency)}
	s := &Service{svc: svc, h: h}
	base := SubjectPrefix + "." + svc.Info().ID
	err = svc.AddEndpoint(HelloEndpoint, micro.HandlerFunc(h.hello), micro.WithEndpointSubject(base+"."+HelloEndpoint))
	for _, p := range api.Paths() {
		if err != nil {
			break
		}
		err = svc.AddEndpoint(endpointName(p), h.endpoint(p),
			micro.WithEndpointSubject(base+"."+strings.ReplaceAll(strings.TrimPrefix(p, "/api/v1/"), "/", ".")),
			micro.WithEndpointMetadata(map[string]string{MetaPath: p}))
	}
	if err != nil {
		_ = svc.Stop()
		return nil, fmt.Errorf("register the NATS service %q: %w", Name, err)
	}
	o.Log.Info("NATS service registered", "name", Name, "id", svc.Info().ID, "servers", servers, "subjects", base+".>")
	return s, nil
}

// ID is the instance's id, as discovery shows it.
func (s *Service) ID() string { return s.svc.Info().ID }

// Stop drains the service's subscriptions and waits for the requests that
// run: the daemon closes the store only after them.
func (s *Service) Stop() error {
	err := s.svc.Stop()
	s.h.mu.Lock()
	s.h.closed = true // a message still drained after Stop is refused
	s.h.mu.Unlock()
	s.h.running.Wait()
	return err
}

// endpointName is the micro endpoint name of an api path
// (/api/v1/catalog/import → catalog_import).
func endpointName(path string) string {
	return strings.ReplaceAll(strings.TrimPrefix(path, "/api/v1/"), "/", "_")
}

type handler struct {
	o       Options
	ctx     context.Context
	nc      *nats.Conn
	slots   chan struct{}
	mu      sync.Mutex
	closed  bool
	running sync.WaitGroup
}

// hello proves that this daemon holds the token, before any client sends
// it, for the subject it was asked on (api.ProofFor).
func (h *handler) hello(req micro.Request) {
	challenge, err := hex.DecodeString(string(req.Data()))
	if err != nil || len(challenge) < 16 || len(challenge) > 64 {
		_ = req.Error(CodeBadRequest, "want a challenge of 16 to 64 random bytes in hex", nil)
		return
	}
	_ = req.RespondJSON(api.Hello{Service: Name, API: "v1", Proof: api.ProofFor(h.o.Token, challenge, req.Subject())})
}

// endpoint answers the requests of one api path. The token is checked
// before the body is read; the command runs in its own goroutine so that a
// long one does not hold up the subscription.
func (h *handler) endpoint(path string) micro.Handler {
	return micro.HandlerFunc(func(req micro.Request) {
		if !api.BearerOK(req.Headers().Get(AuthHeader), h.o.Token) {
			_ = req.Error(CodeUnauthorized, "unauthorized: send the daemon's token (http.token, or the file http.token_file) as the header \"Authorization: Bearer <token>\"", nil)
			return
		}
		r, err := api.DecodeRequest(path, bytes.NewReader(req.Data()))
		if err == nil {
			err = api.CheckRequest(r, h.o.Backend.Database())
		}
		if err == nil {
			err = h.owns(r)
		}
		if err != nil {
			code := CodeBadRequest
			if errors.Is(err, api.ErrOtherDatabase) || errors.Is(err, errNotOwned) {
				code = CodeConflict
			}
			_ = req.Error(code, oneLine(err.Error()), nil)
			return
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.closed {
			_ = req.Error(CodeUnavailable, "the daemon is shutting down", nil)
			return
		}
		h.running.Go(func() { h.run(path, r, req) })
	})
}

// errNotOwned refuses a request about a server this shard does not consume.
var errNotOwned = errors.New("not this shard's server")

// owns refuses a request about one server that this daemon does not consume
// (nats.servers): the CLI routes by what discovery says, and discovery
// answers are not authenticated, so the shard checks too.
func (h *handler) owns(r api.Request) error {
	srv, _ := RequestServer(r)
	if srv == "" || (Shard{Servers: h.o.Servers}).Owns(srv) {
		return nil
	}
	return fmt.Errorf("%w: this shard consumes servers %s, not %q", errNotOwned, strings.Join(h.o.Servers, ","), srv)
}

func (h *handler) run(path string, r api.Request, req micro.Request) {
	select {
	case h.slots <- struct{}{}:
		defer func() { <-h.slots }()
	case <-h.ctx.Done():
		_ = req.Error(CodeUnavailable, "the daemon is shutting down", nil)
		return
	}
	var answer bytes.Buffer
	api.Execute(h.ctx, h.o.Backend, h.o.Log, r, &answer)
	// Headroom for the reply's protocol line and headers.
	if limit := int(h.nc.MaxPayload()) - 1024; answer.Len() > limit {
		msg := fmt.Sprintf("the answer is %d bytes, over this NATS connection's max payload of %d bytes (max_payload): "+
			"nothing was sent; narrow the request (--since, --server, a LIMIT) or use the HTTP API (http.listen)", answer.Len(), h.nc.MaxPayload())
		h.o.Log.Warn("shard service answer too large", "path", path, "bytes", answer.Len(), "max_payload", h.nc.MaxPayload())
		_ = req.Error(CodeTooLarge, msg, nil)
		return
	}
	if err := req.Respond(answer.Bytes()); err != nil {
		h.o.Log.Warn("shard service answer not sent", "path", path, "err", err)
	}
}

// oneLine keeps an error description valid as a NATS header value.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// helloAnswer decodes a hello answer.
func helloAnswer(data []byte) (api.Hello, error) {
	var h api.Hello
	err := json.Unmarshal(data, &h)
	return h, err
}
