package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/threadprio"
	"github.com/mcptrail/mcptrail/otlp"
)

// ingestMemoryLimit bounds DuckDB's memory while `ingest` appends. A batch
// being stored holds ~110 MB of it (one uncompressed row group); the rest
// caches table blocks, which grow with the file: 10M events peaked at
// 616 MiB of RSS at 256 MB, 553 at 192, 504-521 at 160 and 476-482 at
// 128, no slower; on a later, busier day 510-519 at 128 and 502-503 at 96
// (1M: 428-438 and 419-435), again no slower. DuckDB's own use beyond the
// limit (~300 MiB of the peak at 10M, the Go heap ~200) moves little with
// it. A batch larger than the limit (argument values kept, 2 KB each) is
// stored all the same: DuckDB spills what does not fit.
const ingestMemoryLimit = "96MB"

// ingestThreads is DuckDB's thread count while `ingest` appends: the
// Arrow scan that feeds an insert is one stream, and a second DuckDB thread
// only took the core the decoders need, as in `serve` (1M events: 4.9-5.2 s
// and 351-407 MiB on one thread, 5.5-6.4 s and 460-498 MiB on two; 10M:
// 46-48 s against 60 s). On one thread a batch is also stored in the order
// it was staged, chunk by chunk, every time; two interleaved them.
const ingestThreads = 1

// ingestFavor is how far below the appending thread `ingest` and `serve`
// lower their other threads (threadprio.Favor): on this project's 2 cores,
// left to fair shares, the decoders and the collector (and serve's NATS)
// took part of the appending thread's core although they had time to
// spare (1M events, three alternating pairs: 4.81-5.02 s and 373-380 MiB
// lowered by 10 against 5.24-5.81 s and 406-443 MiB; by 3 and by 19
// alike).
const ingestFavor = 10

// ingestExtraProcs is how many more Ps than cores `ingest` runs Go with
// (GOMAXPROCS overrides it): DuckDB's Arrow scan calls back into Go for
// each record of a batch, on the appending thread, and each call waits for
// a free P; with as many Ps as cores the decoders held them all, and a
// statement over a few hundred rows took 8-17 ms instead of 2 (1M events,
// four alternating runs each: 4.86-5.00 s with 2 Ps, 4.57-4.79 with 3,
// 4.48-4.70 with 4, 6 and 8 alike).
const ingestExtraProcs = 2

// ingestGCPercent is Go's GC target while `ingest` runs (GOGC overrides it),
// and ingestSoftLimit its soft memory limit (GOMEMLIMIT overrides it). The
// limit is a ceiling the heap does not reach at this target: a limit it
// reaches makes the runtime hand pages back to the system and touch them
// again (10M events at 50 under 384 MiB: 13.6 s of system time; under 448
// MiB 4.4-4.7 s). Against 25 under 384 MiB, three alternating pairs: 10M
// events 43.2-44.9 s against 47.1-48.7 s, peak RSS 411-419 against 377-381
// MiB; 1M alike in time (bench/ingest.sh), 367-382 against 344-350 MiB.
const (
	ingestGCPercent = 50
	ingestSoftLimit = 448 << 20
)

// otlpGCPercent and otlpSoftLimit replace them while an OTLP/JSON file is
// read: protojson allocates about 14 KB per span, which at GOGC=25 kept the
// collector busy for about half of the command's CPU. A higher target under
// a lower limit keeps the heap as small for half the collections (200,000
// spans: 12.4 s at 25 and 384 MiB, 7.9 s at 200 and 256 MiB, both ~470 MiB
// peak RSS; bench/otlp-file.sh).
const (
	otlpGCPercent = 200
	otlpSoftLimit = 256 << 20
)

func newIngestCmd(a *app) *cobra.Command {
	var (
		format string
		server string
		strict bool
	)
	cmd := &cobra.Command{
		Use:   "ingest FILE... | -",
		Short: "Load audit events from JSONL files (or stdin) into the database",
		Long: `Load audit events, one JSON object per line, into the database. The format is
detected per line (native v1, CloudEvents, Intercept JSONL, docker/mcp-gateway)
unless --format names one. A file whose first line is an OTLP/JSON traces or logs
request (the OpenTelemetry Collector's file exporter: one request a line) is read
as OTLP: its MCP tool-call spans and log records become events. Rejected lines go to the dead_letters table and are
reported; they fail the command only with --strict.`,
		Example: `  mcptrail ingest events.jsonl
  mcptrail ingest --format intercept --server proxmox-mcp ~/.intercept/events/*.jsonl
  zcat old.jsonl.gz | mcptrail ingest -`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			f, forceOTLP, err := inputFormat(format)
			if err != nil {
				return err
			}
			if err := checkInputFiles(files); err != nil {
				return err
			}
			// Staged batches keep Go's live heap near 115 MB; DuckDB's buffer
			// pool would otherwise keep every block it wrote up to its 1 GB
			// default (1M events: 1.1 GB RSS before staging, 0.65 GB after;
			// 10M: 1.03 GB, 0.71 GB with DuckDB at 256 MB). The staged
			// columns hold no pointers, so a collection costs little: at
			// GOGC=50 instead of 100 the heap stays well below its peak at
			// 100 (1M events: 367-382 against 434-462 MiB of RSS).
			gcPercent(ingestGCPercent)
			softMemoryLimit(ingestSoftLimit)
			a.goHeapHugePages()
			workers := runtime.GOMAXPROCS(0)
			extraProcs(ingestExtraProcs)
			store, closeStore, err := a.openStoreWith(cmd.Context(), analytics.Options{MemoryLimit: ingestMemoryLimit, ReturnMemory: true, IngestThreads: ingestThreads})
			if err != nil {
				if errors.Is(err, analytics.ErrLocked) && a.daemonHoldsDB(cmd.Context()) {
					return fmt.Errorf("mcptrail serve is running and holds %s: send the events through NATS for it to ingest with `mcptrail publish %s`, or stop it first", a.dbPath(), strings.Join(files, " "))
				}
				if errors.Is(err, analytics.ErrLocked) {
					return fmt.Errorf("%w; ingest needs the file for writing", err)
				}
				return err
			}
			defer closeStore()
			// This goroutine appends every batch, on DuckDB's one thread
			// (ingestThreads): its thread keeps its core while the
			// decoders and the collector take the rest.
			defer threadprio.Favor(ingestFavor)()

			opts := audit.Options{Format: f, MaxEventBytes: a.cfg.Ingest.MaxEventBytes, StoreArgs: a.cfg.Ingest.StoreArgs, Server: server}
			bar := a.progressBar(files)
			var tot ingest.Totals
			for _, name := range files {
				t, err := ingestOne(cmd, a, name, opts, forceOTLP, store, bar, workers)
				tot.Result.Add(t.Result)
				tot.Skipped += t.Skipped
				tot.Lines += t.Lines
				if err != nil {
					return err
				}
			}
			if bar != nil {
				_ = bar.Finish()
				fmt.Fprintln(a.stderr)
			}
			if tot.Skipped > 0 {
				a.log.Info("skipped lines that are not tool calls", "lines", tot.Skipped)
			}
			fmt.Fprintf(a.stdout, "ingested %d, duplicates %d, rejected %d\n", tot.Ingested, tot.Duplicates, tot.Rejected)
			if strict && tot.Rejected > 0 {
				return fmt.Errorf("%d line(s) rejected (--strict): see mcptrail query dead_letters", tot.Rejected)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&format, "format", "auto", "input format: auto, native, cloudevents, intercept, docker or otlp")
	cmd.Flags().StringVar(&server, "server", "", "server name for every event (Intercept logs name only the upstream command)")
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 1 when any line is rejected")
	return cmd
}

func ingestOne(cmd *cobra.Command, a *app, name string, opts audit.Options, forceOTLP bool, sink ingest.Sink, bar *progressbar.ProgressBar, workers int) (ingest.Totals, error) {
	var r io.Reader = a.stdin
	var file *os.File
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return ingest.Totals{}, fmt.Errorf("open %s: %w", name, err)
		}
		defer f.Close()
		r = f
		// A regular file is read from its start (mapped) whatever the
		// sniffing below read of it; anything else only through br,
		// which holds what the sniffing took.
		if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
			file = f
		}
	}
	fo := ingest.FileOptions{Name: name, Log: a.log}
	if bar != nil {
		fo.Progress = bar
	}
	br := bufio.NewReaderSize(r, 1<<20)
	var tot ingest.Totals
	var err error
	if forceOTLP || (opts.Format == audit.FormatAuto && ingest.SniffOTLP(br)) {
		conv := otlp.Options{Server: opts.Server, StoreArgs: opts.StoreArgs, MaxArgsBytes: opts.MaxEventBytes}
		gcPercent(otlpGCPercent)
		softMemoryLimit(otlpSoftLimit)
		tot, err = ingest.ReadOTLP(cmd.Context(), br, conv, opts.MaxEventBytes, sink, fo)
		gcPercent(ingestGCPercent)
		softMemoryLimit(ingestSoftLimit)
	} else {
		dec := &ingest.Decoder{Opts: opts, Workers: workers}
		if file != nil {
			tot, err = ingest.ReadFile(cmd.Context(), file, dec, sink, fo)
		} else {
			tot, err = ingest.ReadStream(cmd.Context(), br, dec, sink, fo)
		}
	}
	if err != nil {
		return tot, err
	}
	if tot.Lines == 0 {
		a.log.Warn("input is empty", "file", name)
	}
	return tot, nil
}

// inputFormat parses --format of ingest and publish: an audit format, or
// otlp (forceOTLP).
func inputFormat(format string) (f audit.Format, forceOTLP bool, err error) {
	if format == ingest.FormatOTLP {
		return audit.FormatAuto, true, nil
	}
	if f, err = audit.ParseFormat(format); err != nil {
		return f, false, usageErrorf("--format: %v (or otlp)", err)
	}
	return f, false, nil
}

// checkInputFiles fails on a file that cannot be read before any is.
func checkInputFiles(files []string) error {
	for _, name := range files {
		if name == "-" {
			continue
		}
		st, err := os.Stat(name)
		if err != nil {
			return fmt.Errorf("cannot read %s: %w", name, errors.Unwrap(err))
		}
		if st.IsDir() {
			return fmt.Errorf("%s is a folder: give the JSONL files in it", name)
		}
	}
	return nil
}

// progressBar shows progress on a terminal only; pipes and CI stay quiet.
func (a *app) progressBar(files []string) *progressbar.ProgressBar {
	f, ok := a.stderr.(*os.File)
	if !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return nil
	}
	var total int64
	for _, name := range files {
		if name == "-" {
			total = -1
			break
		}
		if st, err := os.Stat(name); err == nil {
			total += st.Size()
		}
	}
	return progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(a.stderr),
		progressbar.OptionShowBytes(true),
		progressbar.OptionSetDescription("ingest"),
		progressbar.OptionThrottle(100_000_000),
		progressbar.OptionClearOnFinish(),
	)
}
