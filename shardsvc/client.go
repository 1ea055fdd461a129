package shardsvc

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/ingest"
)

// Shard is one daemon found on NATS.
type Shard struct {
	ID       string
	Version  string
	Servers  []string // nil: every server
	Database string
	Stream   string
	Consumer string
	subjects map[string]string // api path (or HelloEndpoint) → subject
}

// Name is the shard's name in messages: its consumer (nats.consumer), which
// is unique per shard of a stream, with its instance id.
func (s Shard) Name() string {
	if s.Consumer == "" {
		return s.ID
	}
	return s.Consumer + " (" + s.ID + ")"
}

// ServersLabel lists the servers it owns, "*" for all.
func (s Shard) ServersLabel() string {
	if s.Servers == nil {
		return AllServers
	}
	return strings.Join(s.Servers, ",")
}

// Owns reports whether the shard stores the server's events.
func (s Shard) Owns(server string) bool {
	return len(s.Servers) == 0 || slices.Contains(s.Servers, server)
}

// Silent is a shard that the stream knows (its durable consumer) but that
// did not answer discovery: stopped, hung or unreachable.
type Silent struct {
	Consumer string
	Servers  []string // nil: every server
}

// ServersLabel lists the servers it owns, "*" for all.
func (s Silent) ServersLabel() string { return Shard{Servers: s.Servers}.ServersLabel() }

// Errors a request can end with.
var (
	// ErrNoAnswer: the shard did not answer within the timeout, or left.
	ErrNoAnswer = errors.New("did not answer")
	// ErrRefused: the shard refused the request (the error says why).
	ErrRefused = errors.New("refused")
)

// Client finds shards and sends them requests.
type Client struct {
	Conn *nats.Conn
	// Token is the API token the shards share (http.token).
	Token string
	// Discovery is how long discovery waits for the first shard (default
	// 1 s); later ones are awaited for a fifth of it after the last.
	Discovery time.Duration
	// Timeout bounds one request (default 60 s).
	Timeout time.Duration
}

// Discover asks every instance of the service for its info.
func (c *Client) Discover(ctx context.Context) ([]Shard, error) {
	wait := c.Discovery
	if wait <= 0 {
		wait = time.Second
	}
	subject, err := micro.ControlSubject(micro.InfoVerb, Name, "")
	if err != nil {
		return nil, err
	}
	inbox := c.Conn.NewRespInbox()
	sub, err := c.Conn.SubscribeSync(inbox)
	if err != nil {
		return nil, fmt.Errorf("discover shards: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := c.Conn.PublishRequest(subject, inbox, nil); err != nil {
		return nil, fmt.Errorf("discover shards on %s: %w", subject, err)
	}
	var shards []Shard
	next := wait
	for {
		mctx, cancel := context.WithTimeout(ctx, next)
		msg, err := sub.NextMsgWithContext(mctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			break // no more answers within the wait
		}
		var info micro.Info
		if err := json.Unmarshal(msg.Data, &info); err != nil || info.Name != Name {
			continue
		}
		shards = append(shards, shardOf(info))
		next = wait / 5
	}
	slices.SortFunc(shards, func(a, b Shard) int {
		return cmpOr(strings.Compare(a.Consumer, b.Consumer), strings.Compare(a.ID, b.ID))
	})
	// Two answers with one instance id: one of them is not that instance (a
	// program may answer discovery as it likes), and its servers or
	// consumer would route requests to the real one's subjects.
	seen := map[string]bool{}
	for _, s := range shards {
		if seen[s.ID] {
			return nil, fmt.Errorf("discover shards: %w: two services answer as instance %s; one of them is not a mcptrail daemon: check who may publish on $SRV.> and mcptrail.api.>", ErrRefused, s.ID)
		}
		seen[s.ID] = true
	}
	return shards, nil
}

func cmpOr(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func shardOf(info micro.Info) Shard {
	s := Shard{ID: info.ID, Version: info.Version, Database: info.Metadata[MetaDatabase],
		Stream: info.Metadata[MetaStream], Consumer: info.Metadata[MetaConsumer], subjects: map[string]string{}}
	if v := info.Metadata[MetaServers]; v != AllServers {
		s.Servers = strings.Split(v, ",")
	}
	// Only subjects under the instance's own prefix: the hello's proof names
	// that prefix's hello, so a request goes where the proof came from. An
	// answer that lists another shard's hello beside subjects of its own
	// would have that shard prove what the token is then sent elsewhere.
	base := SubjectPrefix + "." + info.ID + "."
	for _, e := range info.Endpoints {
		if !strings.HasPrefix(e.Subject, base) {
			continue
		}
		if p := e.Metadata[MetaPath]; p != "" {
			s.subjects[p] = e.Subject
		} else if e.Name == HelloEndpoint && e.Subject == base+HelloEndpoint {
			s.subjects[HelloEndpoint] = e.Subject
		}
	}
	return s
}

// Silent lists the durable consumers of mcptrail daemons on stream
// (ingest.ConsumerDescription) that no discovered shard owns: shards that exist but did not answer. subject is nats.subject (a
// consumer's filter subjects name its servers under it). A stream the
// client may not inspect gives an error; the caller then knows only the
// shards that answered.
func (c *Client) Silent(ctx context.Context, stream, subject string, shards []Shard) ([]Silent, error) {
	js, err := jetstream.New(c.Conn)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", stream, err)
	}
	alive := map[string]bool{}
	for _, s := range shards {
		if s.Stream == stream {
			alive[s.Consumer] = true
		}
	}
	prefix := strings.TrimSuffix(subject, ">")
	var out []Silent
	lister := st.ListConsumers(ctx)
	for ci := range lister.Info() {
		if ci.Config.Durable == "" || ci.Config.Description != ingest.ConsumerDescription || alive[ci.Config.Durable] {
			continue
		}
		s := Silent{Consumer: ci.Config.Durable}
		filters := ci.Config.FilterSubjects
		if ci.Config.FilterSubject != "" {
			filters = append(filters, ci.Config.FilterSubject)
		}
		for _, f := range filters {
			if f != subject {
				s.Servers = append(s.Servers, strings.TrimPrefix(f, prefix))
			}
		}
		out = append(out, s)
	}
	if err := lister.Err(); err != nil {
		return nil, fmt.Errorf("consumers of stream %s: %w", stream, err)
	}
	slices.SortFunc(out, func(a, b Silent) int { return strings.Compare(a.Consumer, b.Consumer) })
	return out, nil
}

// Do sends req to the shard once it proved that it holds the token, and
// copies its answer into sink. It returns the command's exit code;
// ErrNoAnswer and ErrRefused wrap the failures a caller reports per shard.
func (c *Client) Do(ctx context.Context, shard Shard, req api.Request, sink api.Sink) (code int, truncated bool, err error) {
	timeout := c.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	subject := shard.subjects[req.Path()]
	if subject == "" {
		return 1, false, fmt.Errorf("shard %s: %w: it has no endpoint for %s (version %s)", shard.Name(), ErrRefused, req.Path(), shard.Version)
	}
	if err := c.hello(ctx, shard); err != nil {
		return 1, false, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return 1, false, fmt.Errorf("encode request: %w", err)
	}
	msg := nats.NewMsg(subject)
	msg.Data = body
	msg.Header.Set(AuthHeader, "Bearer "+c.Token)
	resp, err := c.Conn.RequestMsgWithContext(ctx, msg)
	if err != nil {
		return 1, false, c.requestError(shard, timeout, err)
	}
	if err := answerError(shard, resp); err != nil {
		return 1, false, err
	}
	return api.ReadAnswer(bytes.NewReader(resp.Data), sink, "shard "+shard.Name())
}

func (c *Client) timeout() time.Duration {
	if c.Timeout <= 0 {
		return time.Minute
	}
	return c.Timeout
}

// hello sends a random challenge; a shard that cannot answer with the
// token's proof never sees the token.
func (c *Client) hello(ctx context.Context, shard Shard) error {
	if c.Token == "" {
		return fmt.Errorf("shard %s: %w: this CLI has no API token: set http.token (MCPTRAIL_HTTP_TOKEN) to the token the shards share", shard.Name(), ErrRefused)
	}
	if shard.subjects[HelloEndpoint] == "" {
		return fmt.Errorf("shard %s: %w: it lists no hello under its own subjects, so it cannot prove that it holds the token", shard.Name(), ErrRefused)
	}
	var challenge [32]byte
	if _, err := rand.Read(challenge[:]); err != nil {
		return err
	}
	resp, err := c.Conn.RequestWithContext(ctx, shard.subjects[HelloEndpoint], []byte(hex.EncodeToString(challenge[:])))
	if err != nil {
		return c.requestError(shard, c.timeout(), err)
	}
	if err := answerError(shard, resp); err != nil {
		return err
	}
	h, err := helloAnswer(resp.Data)
	want := api.ProofFor(c.Token, challenge[:], shard.subjects[HelloEndpoint])
	if err != nil || h.Service != Name || !hmac.Equal([]byte(h.Proof), []byte(want)) {
		return fmt.Errorf("shard %s: %w: it did not prove that it holds this CLI's token, so the token was not sent: "+
			"the shards and the CLI must share http.token", shard.Name(), ErrRefused)
	}
	return nil
}

func (c *Client) requestError(shard Shard, timeout time.Duration, err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("shard %s (servers %s) %w within %s: %v", shard.Name(), shard.ServersLabel(), ErrNoAnswer, timeout, err)
	}
	return fmt.Errorf("shard %s: %w", shard.Name(), err)
}

// answerError is the service's error answer, if it is one.
func answerError(shard Shard, resp *nats.Msg) error {
	code := resp.Header.Get(micro.ErrorCodeHeader)
	if code == "" {
		return nil
	}
	return fmt.Errorf("shard %s %w the request (%s): %s", shard.Name(), ErrRefused, code, resp.Header.Get(micro.ErrorHeader))
}
