package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/internal/redact"
	"github.com/mcptrail/mcptrail/server"
	"github.com/mcptrail/mcptrail/shardsvc"
)

// exitShardSilent: a shard did not answer; the others' answers were printed.
const exitShardSilent = 4

// dispatchShards sends a command to the daemons found on NATS (--nats):
// to the shard that owns the request's server, or, for a request that spans
// servers, to every shard, one section each.
func (a *app) dispatchShards(ctx context.Context, req api.Request) error {
	nc, err := a.shardConn()
	if err != nil {
		return err
	}
	defer nc.Close()
	c := &shardsvc.Client{Conn: nc, Token: a.cfg.HTTP.Token, Timeout: a.shardTimeout}
	if c.Token == "" {
		c.Token, _ = api.ReadToken(a.tokenFile())
	}
	shards, err := c.Discover(ctx)
	if err != nil {
		return fmt.Errorf("--nats %s: %w", redact.URL(a.shardsURL), redact.Error(err, a.shardsURL))
	}
	silent, err := c.Silent(ctx, a.cfg.NATS.Stream, a.cfg.NATS.Subject, shards)
	if err != nil {
		// Without the stream's consumers only the shards that answered are known.
		a.log.Debug("cannot list the stream's consumers to name silent shards", "err", err)
	}
	if len(shards) == 0 && len(silent) == 0 {
		return fmt.Errorf("--nats %s: no mcptrail daemon answered on %s.%s: is serve running there with this NATS?",
			redact.URL(a.shardsURL), "$SRV.INFO", shardsvc.Name)
	}
	if a.nowFixed {
		now := a.now
		req.CommonFields().Now = &now
	}
	srv, spans := shardsvc.RequestServer(req)
	switch {
	case srv != "":
		return a.routeShard(ctx, c, req, srv, shards, silent)
	case spans:
		return a.fanOut(ctx, c, req, shards, silent)
	case len(shards) == 1 && len(silent) == 0:
		return a.sendShard(ctx, c, req, shards[0])
	}
	return usageErrorf("over --nats, %s needs --server to find its shard (shards: %s)", a.cmdUsage, shardList(shards, silent))
}

// routeShard sends the request to the shard that owns srv.
func (a *app) routeShard(ctx context.Context, c *shardsvc.Client, req api.Request, srv string, shards []shardsvc.Shard, silent []shardsvc.Silent) error {
	for _, s := range shards {
		if s.Owns(srv) {
			return a.sendShard(ctx, c, req, s)
		}
	}
	for _, s := range silent {
		if (shardsvc.Shard{Servers: s.Servers}).Owns(srv) {
			return &exitError{code: exitShardSilent, err: fmt.Errorf("shard %s owns server %q but did not answer: is its serve running?", s.Consumer, srv)}
		}
	}
	return fmt.Errorf("no shard owns server %q (shards: %s)", srv, shardList(shards, silent))
}

// sendShard prints one shard's answer as the command would print it.
func (a *app) sendShard(ctx context.Context, c *shardsvc.Client, req api.Request, s shardsvc.Shard) error {
	code, _, err := c.Do(ctx, s, req, api.Sink{Stdout: a.stdout, Stderr: a.stderr, File: a.outWriter(req)})
	if errors.Is(err, shardsvc.ErrNoAnswer) {
		return &exitError{code: exitShardSilent, err: err}
	}
	if err != nil {
		return err
	}
	a.forwardedCode = &code
	return nil
}

// shardAnswer is one shard's answer in a fan-out, held until its turn.
type shardAnswer struct {
	stdout, stderr bytes.Buffer
	files          []api.File
	code           int
	err            error
}

// fanOut asks every shard at once and prints their answers in shard order,
// each under a header line naming the shard and its servers, or, in CSV and
// JSON, merged into one document (shards_merge.go). A shard that does not
// answer is named on stderr; the exit code is then 4.
func (a *app) fanOut(ctx context.Context, c *shardsvc.Client, req api.Request, shards []shardsvc.Shard, silent []shardsvc.Silent) error {
	answers := make([]shardAnswer, len(shards))
	var wg sync.WaitGroup
	for i, s := range shards {
		wg.Go(func() {
			ans := &answers[i]
			sink := api.Sink{Stdout: &ans.stdout, Stderr: &ans.stderr}
			if a.outWriter(req) != nil {
				sink.File = func(f api.File) error { ans.files = append(ans.files, f); return nil }
			}
			ans.code, _, ans.err = c.Do(ctx, s, req, sink)
		})
	}
	wg.Wait()
	code := exitOK
	write := a.outWriter(req)
	format := fanOutFormat(req)
	if write != nil {
		format = "" // with --out, a shard prints what it wrote, in words
	}
	var outs []shardOutput
	for i, s := range shards {
		ans := &answers[i]
		if format != "" {
			if ans.stdout.Len() > 0 {
				outs = append(outs, shardOutput{shard: s, stdout: ans.stdout.Bytes()})
			}
		} else {
			if i > 0 {
				fmt.Fprintln(a.stdout)
			}
			fmt.Fprintf(a.stdout, "== shard %s, servers %s ==\n", s.Name(), s.ServersLabel())
			_, _ = a.stdout.Write(ans.stdout.Bytes())
		}
		_, _ = a.stderr.Write(ans.stderr.Bytes())
		for _, f := range ans.files {
			if err := write(f); err != nil && ans.err == nil {
				ans.err = err
			}
		}
		switch {
		case errors.Is(ans.err, shardsvc.ErrNoAnswer):
			fmt.Fprintf(a.stderr, "mcptrail: %v\n", ans.err)
			code = max(code, exitShardSilent)
		case ans.err != nil:
			fmt.Fprintf(a.stderr, "mcptrail: %v\n", ans.err)
			code = max(code, exitFailure)
		default:
			code = max(code, ans.code)
		}
	}
	if format != "" {
		merged, err := mergeShardOutputs(format, outs)
		_, _ = a.stdout.Write(merged)
		if err != nil {
			fmt.Fprintf(a.stderr, "mcptrail: %v\n", err)
			code = max(code, exitFailure)
		}
	}
	for _, s := range silent {
		fmt.Fprintf(a.stderr, "mcptrail: shard %s (servers %s) did not answer: its consumer is on stream %s but no daemon of it answered discovery\n",
			s.Consumer, s.ServersLabel(), a.cfg.NATS.Stream)
		code = max(code, exitShardSilent)
	}
	a.forwardedCode = &code
	return nil
}

// shardList names the shards and their servers, for messages.
func shardList(shards []shardsvc.Shard, silent []shardsvc.Silent) string {
	var parts []string
	for _, s := range shards {
		parts = append(parts, s.Name()+" → "+s.ServersLabel())
	}
	for _, s := range silent {
		parts = append(parts, s.Consumer+" → "+s.ServersLabel()+" (not answering)")
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}

// shardConn connects to --nats with the nats.* credentials.
func (a *app) shardConn() (*nats.Conn, error) {
	n := a.cfg.NATS
	opts, err := server.AuthOptions(server.Auth{Creds: n.Creds, NKey: n.NKey, Token: n.Token, User: n.User, Password: n.Password,
		TLS: server.TLS{CA: n.TLSCA, Cert: n.TLSCert, Key: n.TLSKey}})
	if err != nil {
		return nil, err
	}
	// Answers on an inbox of the operators' own: gateways may read _INBOX.>.
	opts = append(opts, nats.Name("mcptrail "+a.cmdUsage), nats.Timeout(5*time.Second), nats.NoReconnect(),
		nats.CustomInboxPrefix(server.OperatorInboxPrefix))
	nc, err := nats.Connect(a.shardsURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("--nats %s: %w", redact.URL(a.shardsURL), redact.Error(err, a.shardsURL))
	}
	return nc, nil
}
