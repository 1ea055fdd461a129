package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/catalog"
	"github.com/mcptrail/mcptrail/recommend"
	"github.com/mcptrail/mcptrail/server"
	"github.com/mcptrail/mcptrail/simulate"
)

func newDemoCmd(a *app) *cobra.Command {
	var dir string
	var days int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline once on simulated Proxmox traffic",
		Long: `Run mcptrail end to end in a demo folder: start the embedded NATS server with
JetStream and the ingest pipeline, publish days of simulated Proxmox MCP traffic
through NATS as a gateway would, wait until every event is stored, import the
Proxmox catalog, recommend a policy for proxmox-mcp, print the summary and the
PR folder, and stop everything it started.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if days < 1 || days > 60 {
				return usageErrorf("--days must be from 1 to 60")
			}
			return a.runDemo(cmd.Context(), dir, days)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "mcptrail-demo", "demo folder (its database and NATS store are recreated)")
	cmd.Flags().IntVar(&days, "days", 14, "days of simulated traffic")
	return cmd
}

func (a *app) runDemo(ctx context.Context, dir string, days int) error {
	start := time.Now()
	step := func(msg string, args ...any) {
		a.log.Info(msg, append(args, "elapsed", time.Since(start).Round(time.Millisecond))...)
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	dbPath := filepath.Join(dir, "mcptrail.duckdb")
	natsDir := filepath.Join(dir, "nats")
	for _, p := range []string{dbPath, dbPath + ".wal", natsDir} {
		if err := os.RemoveAll(p); err != nil {
			return fmt.Errorf("clean the demo folder: %w", err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create the demo folder: %w", err)
	}
	addrs, err := freeAddrs(2)
	if err != nil {
		return err
	}
	natsAddr, httpAddr := addrs[0], addrs[1]
	store, err := analytics.Open(ctx, dbPath, analytics.Options{SessionGap: a.cfg.Recommend.SessionGap, NoHugePages: !a.cfg.Storage.HugePages})
	if err != nil {
		return err
	}
	defer store.Close()

	// The daemon, as `mcptrail serve` runs it, on ports of its own.
	opts := a.serverOptions()
	opts.URL, opts.EmbeddedListen, opts.EmbeddedStoreDir, opts.HTTPListen, opts.HTTPToken = "", natsAddr, natsDir, httpAddr, ""
	opts.JetStream, opts.Servers, opts.Consumer = true, nil, "mcptrail"
	// Its default gateway user, whose password serve keeps beside the database.
	gwFile := filepath.Join(dir, server.GatewayPasswordFileName)
	opts.EmbeddedUsers, opts.GatewayPasswordFile = nil, gwFile
	srvCtx, stopServer := context.WithCancel(ctx)
	ready := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- server.Run(srvCtx, store, opts, a.log.With("component", "serve"), func() { close(ready) })
	}()
	stop := func() error {
		stopServer()
		return <-served
	}
	select {
	case <-ready:
	case err := <-served:
		return fmt.Errorf("start the embedded NATS server and ingest: %w", err)
	case <-ctx.Done():
		_ = stop()
		return ctx.Err()
	}
	step("embedded NATS with JetStream and the ingest pipeline are running", "nats", "nats://"+natsAddr, "http", httpAddr)

	// A gateway's traffic, published with acknowledgements.
	gwPassword, err := server.ReadPasswordFile(gwFile)
	if err != nil {
		_ = stop()
		return err
	}
	simOpts := simulate.Options{Scenario: simulate.DefaultScenario, Seed: 1, Duration: time.Duration(days) * 24 * time.Hour, Now: a.now}
	events := make(chan audit.Event, 4096)
	genErr := make(chan error, 1)
	go func() {
		defer close(events)
		_, err := simulate.Generate(srvCtx, simOpts, func(e audit.Event) error {
			select {
			case events <- e:
				return nil
			case <-srvCtx.Done():
				return srvCtx.Err()
			}
		})
		genErr <- err
	}()
	st, err := server.Publish(srvCtx, server.PublishOptions{URL: "nats://" + natsAddr, Subject: opts.Subject,
		Auth: server.Auth{User: server.DefaultGatewayUser, Password: gwPassword}}, func() (audit.Event, bool, error) {
		e, ok := <-events
		return e, ok, nil
	})
	if err == nil {
		err = <-genErr
	}
	if err != nil {
		_ = stop()
		return fmt.Errorf("publish simulated traffic: %w", err)
	}
	step("published simulated gateway traffic", "events", st.Published, "days", days, "rate", fmt.Sprintf("%.0f/s", st.Rate))

	if err := waitStored(ctx, store, int64(st.Published-st.Duplicates)); err != nil {
		_ = stop()
		return err
	}
	step("every event is stored")

	_, tools, _, err := a.importCatalogData(ctx, store, catalog.ProxmoxToolsJSON(), "proxmox-mcp.tools.json (embedded)", catalog.ProxmoxServer)
	if err != nil {
		_ = stop()
		return err
	}
	step("imported the Proxmox MCP catalog", "tools", tools)

	report, set, history, err := a.recommendAll(ctx, store, catalog.ProxmoxServer, "", nil, nil, a.recommendParams(), "text")
	if err == nil {
		err = history.wait()
	}
	if err != nil {
		_ = stop()
		return err
	}
	prDir := filepath.Join(dir, "pr")
	if set != nil {
		err = recommend.WriteSetFolder(prDir, set)
	} else {
		err = recommend.WriteFolder(prDir, report)
	}
	if err == nil {
		// As `recommend --out` does: PR.md ends with the latest backtest.
		err = a.appendBacktest(ctx, store, prDir, catalog.ProxmoxServer, "", a.recommendParams())
	}
	if err != nil {
		_ = stop()
		return err
	}
	step("recommended a policy per grant for proxmox-mcp")
	if err := stop(); err != nil {
		return fmt.Errorf("stop the daemon: %w", err)
	}
	step("stopped the embedded NATS server and the ingest pipeline")

	if set != nil {
		fmt.Fprint(a.stdout, recommend.SetText(set, a.colorOut()))
		fmt.Fprintf(a.stdout, "\nPR folder: %s (PR.md, recommendations.json, and <grant>/policy.json and policy.diff for each grant)\n", prDir)
	} else {
		fmt.Fprint(a.stdout, recommend.Text(report, a.colorOut()))
		fmt.Fprintf(a.stdout, "\nPR folder: %s (policy.json, policy.diff, PR.md, recommendations.json)\n", prDir)
	}
	fmt.Fprintf(a.stdout, "Database:  %s — try: mcptrail query calls_by_tool --db %s\n", dbPath, dbPath)
	return nil
}

// waitStored waits until the store holds n events.
func waitStored(ctx context.Context, store *analytics.Store, n int64) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var have int64
		if err := store.DB().QueryRowContext(ctx, `SELECT count(*) FROM calls`).Scan(&have); err != nil {
			return fmt.Errorf("count stored events: %w", err)
		}
		if have >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events stored after 2 minutes", have, n)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeAddrs finds n free loopback ports, so that the demo never collides
// with a daemon already running on the default ports. The listeners stay
// open until all n are found: the kernel may otherwise hand out a port it
// just freed again.
func freeAddrs(n int) ([]string, error) {
	var addrs []string
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		lns = append(lns, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}
