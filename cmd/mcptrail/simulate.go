package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/duration"
	"github.com/mcptrail/mcptrail/otlp"
	"github.com/mcptrail/mcptrail/server"
	"github.com/mcptrail/mcptrail/simulate"
)

func newSimulateCmd(a *app) *cobra.Command {
	var (
		scenario  string
		seed      int64
		rate      float64
		dur       string
		count     int
		natsURL   string
		natsUser  string
		natsPass  string
		batch     int
		out       string
		format    string
		otlpURL   string
		otlpProto string
		stateless bool
	)
	cmd := &cobra.Command{
		Use:   "simulate [--scenario NAME] [--seed N] [--duration D] [--count N] [--nats URL | --otlp URL [--otlp-protocol http/protobuf|grpc] | --out FILE [--format jsonl|otlp]]",
		Short: "Generate realistic gateway traffic for the Proxmox MCP server",
		Long: `Generate deterministic, realistic MCP gateway audit events for the Proxmox MCP
server (its real catalog of 286 tools): several agents and grants over several
days, mostly reads, vm_agent_exec followed by vm_agent_exec_status polling, the
occasional runaway loop, rare destructive calls, denials and errors. Traffic
ends at --now (default: the clock); the same --seed, --count and --now give the
same events. Events go to --out (JSONL, "-" for stdout) or, with --nats, are
published through JetStream like a gateway would, signed in as the embedded
server's gateway user (see --nats-user). --format otlp writes them as OTLP/JSON
traces instead (one ExportTraceServiceRequest of up to 512 spans a line, as the
OpenTelemetry Collector's file exporter does), and --otlp URL sends such batches
as OTLP/HTTP protobuf to a receiver (serve's otlp.listen), or over OTLP/gRPC with
--otlp-protocol grpc (otlp.grpc_listen), with the exporters' token (otlp.token,
or the file otlp.token_file).`,
		Example: `  mcptrail simulate --count 100000 --out events.jsonl
  mcptrail simulate --scenario loops --seed 7 --out loops.jsonl
  mcptrail simulate --duration 1h --nats nats://127.0.0.1:4222 --rate 500
  mcptrail simulate --count 1000000 --nats nats://127.0.0.1:4222 --batch 64
  mcptrail simulate --count 10000 --format otlp --out traces.jsonl
  mcptrail simulate --count 10000 --otlp http://127.0.0.1:4318
  mcptrail simulate --count 10000 --otlp http://127.0.0.1:4317 --otlp-protocol grpc`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts := simulate.Options{Scenario: scenario, Seed: seed, Count: count, Now: a.now}
			if dur != "" {
				d, err := duration.Parse(dur)
				if err != nil || d <= 0 {
					return usageErrorf("--duration %q: want a positive duration such as 36h or 7d", dur)
				}
				opts.Duration = d
			}
			if dur != "" && count > 0 {
				opts.Count = count // both: exactly count events over the duration
			}
			if count < 0 {
				return usageErrorf("--count must be positive")
			}
			if (natsURL != "" && out != "") || (otlpURL != "" && (out != "" || natsURL != "")) {
				return usageErrorf("give one of --nats URL, --otlp URL or --out FILE")
			}
			if cmd.Flags().Changed("otlp-protocol") && otlpURL == "" {
				return usageErrorf("--otlp-protocol goes with --otlp URL")
			}
			if format != "jsonl" && format != "otlp" {
				return usageErrorf("--format %q: allowed values are jsonl and otlp", format)
			}
			if err := checkRateFlag(rate); err != nil {
				return err
			}
			if err := checkBatchFlag(batch); err != nil {
				return err
			}
			if err := checkScenario(scenario); err != nil {
				return err
			}
			if natsURL != "" {
				auth, err := a.gatewayAuth(natsUser, natsPass)
				if err != nil {
					return err
				}
				po := server.PublishOptions{URL: natsURL, Auth: auth, Subject: a.cfg.NATS.Subject, Rate: rate, Batch: batch, MaxMessageBytes: a.cfg.Ingest.MaxMessageBytes}
				return a.publishSimulation(cmd, opts, po, stateless)
			}
			if otlpURL != "" {
				return a.sendSimulationOTLP(cmd, opts, otlpURL, otlpProto, stateless)
			}
			return a.writeSimulation(cmd, opts, out, format == "otlp", stateless)
		},
	}
	cmd.Flags().StringVar(&scenario, "scenario", simulate.DefaultScenario, "traffic scenario (see the list below)")
	cmd.Flags().Int64Var(&seed, "seed", 1, "random seed: the same seed gives the same events")
	cmd.Flags().Float64Var(&rate, "rate", 0, "with --nats: events per second to publish (0: as fast as acknowledged)")
	cmd.Flags().StringVar(&dur, "duration", "", "span of simulated time ending at --now (e.g. 7d)")
	cmd.Flags().IntVar(&count, "count", 0, "exact number of events (with --duration: over that span)")
	cmd.Flags().StringVar(&natsURL, "nats", "", "publish to this NATS server through JetStream")
	cmd.Flags().IntVar(&batch, "batch", 1, "with --nats: events per message (application/x-ndjson, SPEC §2); 1: each event alone")
	cmd.Flags().StringVar(&natsUser, "nats-user", "", `with --nats: the gateway's NATS user (default "gateway" with a password file)`)
	cmd.Flags().StringVar(&natsPass, "nats-password-file", "", "with --nats: the file holding its password (default: the embedded server's\n"+
		"gateway password file, nats-gateway.password beside the database, when it exists)")
	cmd.Flags().StringVar(&out, "out", "", `write JSONL to this file ("-" or empty: stdout)`)
	cmd.Flags().StringVar(&format, "format", "jsonl", "what --out holds: jsonl (v1 events) or otlp (OTLP/JSON traces, 512 spans a line)")
	cmd.Flags().BoolVar(&stateless, "stateless", false, "stateless MCP (specification 2026-07-28): events carry no session id; as OTLP,\n"+
		"each session's calls share a trace instead (mcptrail correlates them, SPEC §3)")
	cmd.Flags().StringVar(&otlpURL, "otlp", "", "send OTLP protobuf traces to this receiver (e.g. http://127.0.0.1:4318)")
	cmd.Flags().StringVar(&otlpProto, "otlp-protocol", otlpHTTP, "with --otlp: "+otlpHTTP+" (serve's otlp.listen) or "+otlpGRPC+" (otlp.grpc_listen, e.g. http://127.0.0.1:4317)")
	cmd.Long += "\n\nScenarios:\n"
	for _, s := range simulate.Scenarios() {
		cmd.Long += fmt.Sprintf("  %-8s %s\n", s.Name, s.Description)
	}
	return cmd
}

// statelessIf wraps emit so that, for stateless traffic, events reach it
// without their session.
func statelessIf(stateless bool, emit func(audit.Event) error) func(audit.Event) error {
	if !stateless {
		return emit
	}
	return func(e audit.Event) error {
		e.Session = ""
		return emit(e)
	}
}

func checkScenario(name string) error {
	for _, s := range simulate.Scenarios() {
		if s.Name == name {
			return nil
		}
	}
	names := ""
	for i, s := range simulate.Scenarios() {
		if i > 0 {
			names += ", "
		}
		names += s.Name
	}
	return usageErrorf("unknown --scenario %q: allowed values are %s", name, names)
}

func (a *app) writeSimulation(cmd *cobra.Command, opts simulate.Options, out string, asOTLP, stateless bool) error {
	var w io.Writer = a.stdout
	var f *os.File
	if out != "" && out != "-" {
		var err error
		f, err = os.Create(out)
		if err != nil {
			return fmt.Errorf("create %s: %w", out, err)
		}
		defer f.Close()
		w = f
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	enc := json.NewEncoder(bw)
	emit := statelessIf(stateless, func(e audit.Event) error { return enc.Encode(e) })
	batch := otlpBatcher{opts: otlp.EncodeOptions{Stateless: stateless}}
	if asOTLP {
		batch.send = func(req *coltrace.ExportTraceServiceRequest, _ int) error {
			line, err := otlp.MarshalJSON(req)
			if err != nil {
				return err
			}
			_, err = bw.Write(append(line, '\n'))
			return err
		}
		emit = batch.add
	}
	start := time.Now()
	stats, err := simulate.Generate(cmd.Context(), opts, emit)
	if err == nil && asOTLP {
		err = batch.flush()
	}
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write events: %w", err)
	}
	if f != nil {
		if err := f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", out, err)
		}
		a.log.Info("simulated traffic written", "file", out, "events", stats.Events, "sessions", stats.Sessions,
			"from", stats.From.Format(time.RFC3339), "to", stats.To.Format(time.RFC3339), "took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}
