package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/threadprio"
	"github.com/mcptrail/mcptrail/server"
)

func newServeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the daemon: ingest from NATS into DuckDB and serve the API",
		Long: `Run the daemon. By default it starts an embedded NATS server with JetStream
(nats.embedded.listen, nats.embedded.store_dir), creates the stream MCP_AUDIT on
mcp.audit.> and the durable consumer, and stores every event exactly once in the
database; with nats.url it connects to an existing NATS instead. The HTTP API on
http.listen serves /healthz, /readyz, /metrics and the typed API (docs/API.md),
through which query, queries, recommend, replay, backtest, report, catalog,
suppress, unsuppress, suppressions, policies and findings work while the daemon
holds the database; the API needs the token of
http.token or http.token_file (generated at first start). The schedules of the
reports: section run one at a time.
SIGINT or SIGTERM stops it gracefully.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			schedules, err := a.reportSchedules()
			if err != nil {
				return err
			}
			// The daemon runs for weeks at any volume: keep DuckDB's buffers and
			// the Go heap small (measured peak RSS with these limits: see README).
			softMemoryLimit(192 << 20)
			a.goHeapHugePages()
			store, err := analytics.Open(cmd.Context(), a.cfg.Storage.Path, analytics.Options{MemoryLimit: "256MB", IngestMemoryLimit: "160MB", ReturnMemory: true, IngestThreads: 1,
				SessionGap: a.cfg.Recommend.SessionGap, ArchiveDir: a.cfg.Storage.Archive, StoreArgs: a.cfg.Ingest.StoreArgs})
			if err != nil {
				if errors.Is(err, analytics.ErrLocked) {
					return fmt.Errorf("%w: another mcptrail (serve or ingest) holds it; stop it or set storage.path", err)
				}
				return err
			}
			defer func() {
				if err := store.Close(); err != nil {
					a.log.Error("close database", "err", err)
				}
			}()
			opts := a.serverOptions()
			// The thread that stores every batch (DuckDB appends on it) keeps
			// its core while NATS, the decoders and the collector share the
			// rest, as `ingest` does.
			opts.StoreThread = func() func() { return threadprio.Favor(ingestFavor) }
			if opts.HTTPToken, err = a.daemonToken(); err != nil {
				return err
			}
			if opts.OTLPListen != "" || opts.OTLPGRPCListen != "" {
				if opts.OTLPToken, err = a.exportersToken(); err != nil {
					return err
				}
			}
			opts.Backend = newDaemonBackend(a, store)
			a.startShardService(opts.Backend, opts.HTTPToken, &opts)
			a.scheduleReports(store, schedules, &opts)
			a.startAlarm(store, &opts)
			a.startPolicyWatch(store, &opts)
			a.startArchive(store, &opts)
			a.startRecluster(store, &opts)
			a.logDatabaseOpen(cmd.Context(), store)
			err = server.Run(cmd.Context(), store, opts, a.log, func() { a.log.Info("ready") })
			var ce *server.ConfigError
			if errors.As(err, &ce) {
				return &exitError{code: exitUsage, err: err}
			}
			return err
		},
	}
	return cmd
}

// serverOptions maps the configuration onto the daemon's options.
func (a *app) serverOptions() server.Options {
	c := a.cfg
	var users []server.EmbeddedUser
	for _, u := range c.NATS.Users {
		users = append(users, server.EmbeddedUser(u))
	}
	return server.Options{
		EmbeddedUsers: users, GatewayPasswordFile: c.NATS.GatewayPasswordFile,
		URL: c.NATS.URL, EmbeddedListen: c.NATS.Listen, EmbeddedStoreDir: c.NATS.StoreDir,
		Subject: c.NATS.Subject, JetStream: c.NATS.JetStream, Stream: c.NATS.Stream, Consumer: c.NATS.Consumer,
		Servers: c.NATS.Servers, Queue: c.NATS.Queue, Creds: c.NATS.Creds, NKey: c.NATS.NKey, Token: c.NATS.Token,
		User: c.NATS.User, Password: c.NATS.Password,
		TLS:          server.TLS{CA: c.NATS.TLSCA, Cert: c.NATS.TLSCert, Key: c.NATS.TLSKey},
		StreamMaxAge: c.NATS.StreamMaxAge, StreamMaxBytes: c.NATS.StreamMaxBytes,
		StreamReplicas: c.NATS.StreamReplicas, StartupTimeout: c.NATS.StartupTimeout, BatchSize: c.Ingest.BatchSize, FetchSize: c.Ingest.FetchSize, FlushInterval: c.Ingest.FlushInterval,
		Decode: audit.Options{MaxEventBytes: c.Ingest.MaxEventBytes, StoreArgs: c.Ingest.StoreArgs}, MaxMessageBytes: c.Ingest.MaxMessageBytes,
		HTTPListen: c.HTTP.Listen, HTTPAllowedHosts: c.HTTP.AllowedHosts, HTTPTLSCert: c.HTTP.TLSCert, HTTPTLSKey: c.HTTP.TLSKey,
		OTLPListen: c.OTLP.Listen, OTLPGRPCListen: c.OTLP.GRPCListen, OTLPMaxRequestBytes: c.OTLP.MaxRequestBytes, OTLPServer: c.OTLP.Server,
	}
}

// daemonToken is the API's token: http.token, or the one in
// http.token_file, generated there at first start.
func (a *app) daemonToken() (string, error) {
	return a.loadToken(a.cfg.HTTP.Token, a.tokenFile(), "http.token_file", "the API token; the CLI reads it from there")
}

// exportersToken is the OTLP receiver's token: otlp.token, else the one in
// otlp.token_file, generated at the first start with a receiver.
func (a *app) exportersToken() (string, error) {
	return a.loadToken(a.cfg.OTLP.Token, a.otlpTokenFile(), "otlp.token_file",
		"the OTLP exporters' token: give it to the gateways that export OpenTelemetry")
}

// loadToken is configured, else the token in the file path (key), which it
// generates when missing; what says what it is, in the log.
func (a *app) loadToken(configured, path, key, what string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	token, created, err := api.LoadOrCreateTokenFile(path, key)
	if err != nil {
		return "", err
	}
	if created {
		a.log.Info("generated "+what, key, path)
	} else {
		a.log.Info(what, key, path)
	}
	return token, nil
}

// logDatabaseOpen logs the database and its storage format, and how to
// copy a file of an older format into the current one.
func (a *app) logDatabaseOpen(ctx context.Context, store *analytics.Store) {
	format, older, err := store.StorageFormat(ctx)
	if err != nil {
		a.log.Warn("database open; its storage format could not be read", "path", a.dbPath(), "err", err)
		return
	}
	a.log.Info("database open", "path", a.dbPath(), "format", format)
	if older {
		a.log.Info("the database file is in an older storage format: stop serve and copy it into the current one, a tenth smaller and cheaper to append to, with mcptrail convert",
			"format", format, "current", analytics.StorageVersion, "command", "mcptrail convert --db "+a.dbPath()+" --out NEW.duckdb")
	}
}
