package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
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
http.listen serves /healthz, /readyz, /metrics and runs query, recommend,
replay, catalog, suppress and report for the CLI while the daemon holds the
database, and the schedules of the reports: section run, one at a time.
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
			store, err := analytics.Open(cmd.Context(), a.cfg.Storage.Path, analytics.Options{MemoryLimit: "256MB", IngestMemoryLimit: "160MB", ReturnMemory: true, IngestThreads: 1})
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
			opts.Runner = func(ctx context.Context, args []string, stdout, stderr io.Writer) int {
				return runInDaemon(ctx, store, args, stdout, stderr)
			}
			a.scheduleReports(store, schedules, &opts)
			a.log.Info("database open", "path", a.dbPath())
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
		StreamMaxAge: c.NATS.StreamMaxAge, StreamMaxBytes: c.NATS.StreamMaxBytes, BatchSize: c.Ingest.BatchSize, FetchSize: c.Ingest.FetchSize, FlushInterval: c.Ingest.FlushInterval,
		Decode:     audit.Options{MaxEventBytes: c.Ingest.MaxEventBytes, StoreArgs: c.Ingest.StoreArgs},
		HTTPListen: c.HTTP.Listen, HTTPToken: c.HTTP.Token,
	}
}

// daemonCommands may run inside the daemon; anything else is refused there.
var daemonCommands = map[string]bool{
	"query": true, "queries": true, "recommend": true, "replay": true, "catalog": true,
	"suppress": true, "unsuppress": true, "suppressions": true, "report": true,
}

// runInDaemon runs a forwarded command line against the daemon's store. A
// request that names another database file gets exitNotMine, so that the CLI
// opens that file itself.
func runInDaemon(ctx context.Context, store *analytics.Store, args []string, stdout, stderr io.Writer) int {
	if db := lastFlagValue(args, "--db"); db != "" {
		mine, _ := filepath.Abs(store.Path())
		if theirs, _ := filepath.Abs(db); theirs != mine {
			return exitNotMine
		}
	}
	if name := commandName(args); !daemonCommands[name] {
		fmt.Fprintf(stderr, "mcptrail: the daemon does not run %q\n", name)
		return exitUsage
	}
	defer store.Boost(ctx)()
	a := &app{stdout: stdout, stderr: stderr, stdin: nil, store: store}
	return a.execute(ctx, args)
}

// commandName is the first argument that is not a flag or a flag's value.
func commandName(args []string) string {
	for i := 0; i < len(args); i++ {
		arg := args[i]
		switch {
		case arg == "--db" || arg == "--config" || arg == "--now":
			i++
		case len(arg) > 0 && arg[0] == '-':
		default:
			return arg
		}
	}
	return ""
}

func lastFlagValue(args []string, flag string) string {
	v := ""
	for i, arg := range args {
		if arg == flag && i+1 < len(args) {
			v = args[i+1]
		} else if len(arg) > len(flag)+1 && arg[:len(flag)+1] == flag+"=" {
			v = arg[len(flag)+1:]
		}
	}
	return v
}
