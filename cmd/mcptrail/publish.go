package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/server"
)

// maxBadLinesShown bounds the invalid lines publish names one by one.
const maxBadLinesShown = 20

func newPublishCmd(a *app) *cobra.Command {
	var (
		format, srv, natsURL, natsUser, natsPass string
		batch                                    int
		rate                                     float64
	)
	cmd := &cobra.Command{
		Use:   "publish FILE... | -",
		Short: "Send audit events from files through NATS, as a gateway does",
		Long: `Send audit events from files (the formats ingest reads, OTLP/JSON included)
through NATS JetStream to mcp.audit.<server>, as a careful gateway does: many
events per message (Content-Type: application/x-ndjson, up to
ingest.max_message_bytes), each message with a Nats-Msg-Id derived from its
events' ids, every publish acknowledged, and what was not acknowledged sent
again with the same id (SPEC §2). This is how events reach a database that a
running daemon holds.

Lines that are not valid events are not sent: each is named on stderr and the
command exits 1 after publishing the rest.

Without --nats it publishes to nats.url, else to the embedded server at
nats.embedded.listen, as the embedded server's gateway user.`,
		Example: `  mcptrail publish events.jsonl
  mcptrail publish --batch 256 --nats nats://nats-1:4222,nats://nats-2:4222 events.jsonl`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, files []string) error {
			f, forceOTLP, err := inputFormat(format)
			if err != nil {
				return err
			}
			if err := checkBatchFlag(batch); err != nil {
				return err
			}
			if err := checkRateFlag(rate); err != nil {
				return err
			}
			if err := checkInputFiles(files); err != nil {
				return err
			}
			url := natsURL
			if url == "" {
				url = a.cfg.NATS.URL
			}
			if url == "" {
				url = "nats://" + a.cfg.NATS.Listen
			}
			auth, err := a.gatewayAuth(natsUser, natsPass)
			if err != nil {
				return err
			}
			opts := audit.Options{Format: f, MaxEventBytes: a.cfg.Ingest.MaxEventBytes, StoreArgs: a.cfg.Ingest.StoreArgs, Server: srv}
			return a.publishFiles(cmd, files, opts, forceOTLP, server.PublishOptions{
				URL: url, Auth: auth, Subject: a.cfg.NATS.Subject, Rate: rate,
				Batch: batch, MaxMessageBytes: a.cfg.Ingest.MaxMessageBytes,
			})
		},
	}
	cmd.Flags().StringVar(&format, "format", "auto", "input format: auto, native, cloudevents, intercept, docker or otlp")
	cmd.Flags().StringVar(&srv, "server", "", "server name for every event (Intercept logs name only the upstream command)")
	cmd.Flags().IntVar(&batch, "batch", 64, "events per NATS message (1: each event alone, its id as Nats-Msg-Id)")
	cmd.Flags().Float64Var(&rate, "rate", 0, "events per second to publish (0: as fast as acknowledged)")
	cmd.Flags().StringVar(&natsURL, "nats", "", "NATS server URL(s), comma-separated (default: nats.url, else the embedded server)")
	cmd.Flags().StringVar(&natsUser, "nats-user", "", `the gateway's NATS user (default "gateway" with a password file)`)
	cmd.Flags().StringVar(&natsPass, "nats-password-file", "", "the file holding its password (default: the embedded server's\n"+
		"gateway password file, nats-gateway.password beside the database, when it exists)")
	return cmd
}

// checkBatchFlag checks --batch of publish and simulate.
func checkBatchFlag(batch int) error {
	if batch < 1 || batch > 100_000 {
		return usageErrorf("--batch %d: give the events per message, 1 to 100000 (1 sends each event alone)", batch)
	}
	return nil
}

// checkRateFlag checks --rate of publish and simulate.
func checkRateFlag(rate float64) error {
	if !(rate >= 0) || math.IsInf(rate, 0) {
		return usageErrorf("--rate %g: give events per second, 0 or more (0: as fast as acknowledged)", rate)
	}
	return nil
}

// publishFiles decodes the files as ingest does and hands their valid events
// to server.Publish.
func (a *app) publishFiles(cmd *cobra.Command, files []string, opts audit.Options, forceOTLP bool, po server.PublishOptions) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	sink := newHandOff()
	readErr := make(chan error, 1)
	go func() {
		defer sink.close()
		for _, name := range files {
			if _, err := ingestOne(cmd, a, name, opts, forceOTLP, sink, nil, runtime.GOMAXPROCS(0)); err != nil {
				readErr <- err
				return
			}
		}
		readErr <- nil
	}()
	st, err := server.Publish(ctx, po, sink.next)
	cancel()
	sink.abandon()
	if rerr := <-readErr; rerr != nil && err == nil && !errors.Is(rerr, context.Canceled) {
		err = rerr
	}
	if err != nil {
		return a.publishError(po.URL, err)
	}
	a.printPublished(st)
	for i, d := range sink.dead {
		if i == maxBadLinesShown {
			fmt.Fprintf(a.stderr, "... and %d more\n", len(sink.dead)-i)
			break
		}
		fmt.Fprintf(a.stderr, "%s:%d: %s: %s\n", d.Source, d.Line, d.Reason, d.Detail)
	}
	if n := len(sink.dead); n > 0 {
		return fmt.Errorf("%d line(s) were not published: they are not valid events", n)
	}
	return nil
}

// handOff is an ingest.Sink that hands each batch's events to server.Publish
// and returns once they are all taken, so the reader never runs ahead of
// the publisher by more than a batch.
type handOff struct {
	batches chan []audit.Event
	taken   chan struct{}
	done    chan struct{}
	once    sync.Once

	cur     []audit.Event       // the batch being taken
	holding bool                // Append waits for cur to be taken
	dead    []ingest.DeadLetter // lines that are not valid events
}

func newHandOff() *handOff {
	return &handOff{batches: make(chan []audit.Event), taken: make(chan struct{}), done: make(chan struct{})}
}

// Append waits until the publisher has taken every event of b.
func (h *handOff) Append(ctx context.Context, b ingest.Batch) (ingest.Result, error) {
	h.dead = append(h.dead, b.DeadLetters...)
	if len(b.Events) == 0 {
		return ingest.Result{Rejected: len(b.DeadLetters)}, nil
	}
	select {
	case h.batches <- b.Events:
	case <-h.done:
		return ingest.Result{}, context.Canceled
	case <-ctx.Done():
		return ingest.Result{}, ctx.Err()
	}
	select {
	case <-h.taken:
	case <-h.done:
		return ingest.Result{}, context.Canceled
	case <-ctx.Done():
		return ingest.Result{}, ctx.Err()
	}
	return ingest.Result{Ingested: len(b.Events), Rejected: len(b.DeadLetters)}, nil
}

// Checkpoint: files have no positions.
func (h *handOff) Checkpoint(context.Context, string) (uint64, error) { return 0, nil }

// next is server.Publish's source of events.
func (h *handOff) next() (audit.Event, bool, error) {
	if len(h.cur) == 0 && h.holding {
		// Every event of the batch is taken: Append may return.
		h.holding = false
		select {
		case h.taken <- struct{}{}:
		case <-h.done:
			return audit.Event{}, false, nil
		}
	}
	if len(h.cur) == 0 {
		select {
		case b, ok := <-h.batches:
			if !ok {
				return audit.Event{}, false, nil
			}
			h.cur, h.holding = b, true
		case <-h.done:
			return audit.Event{}, false, nil
		}
	}
	e := h.cur[0]
	h.cur = h.cur[1:]
	return e, true, nil
}

// close ends the events: the reader is done.
func (h *handOff) close() { close(h.batches) }

// abandon releases a reader still waiting once publishing has stopped.
func (h *handOff) abandon() { h.once.Do(func() { close(h.done) }) }
