package analytics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"time"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/runtraffic"
	"github.com/mcptrail/mcptrail/simulate"
)

// BenchmarkAppend measures the store's batch append (Arrow records
// registered as a view, de-duplicating insert, commit) in events per second.
func BenchmarkAppend(b *testing.B) {
	for _, size := range []int{5000, 32768, 122880} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s, err := Open(context.Background(), filepath.Join(b.TempDir(), "b.duckdb"), Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
			lat := 12.5
			batch := make([]audit.Event, size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range batch {
					n := i*size + j
					batch[j] = audit.Event{ID: fmt.Sprintf("sim-1-%d", n), TS: base.Add(time.Duration(n) * time.Millisecond),
						Server: "proxmox-mcp", Tool: "get_vm_status", Method: "tools/call", Decision: audit.Allowed, Status: "ok",
						Gateway: "gw-1", Grant: "ops-bot", Agent: "agent", Session: "4f1c2d7e-5b9a-4c1e-8f3d-2a6b7c8d9e0f",
						RequestID: "17", LatencyMS: &lat, ArgsHash: "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a",
						ArgKeys: []string{"node", "vmid"}, PolicyVersion: "2025-03-14.2"}
				}
				if _, err := s.Append(context.Background(), ingest.Batch{Events: batch}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkCollectCalls measures what keeping the aggregates costs a batch
// in Go beside DuckDB's insert (collectCalls: the calls sorted per session,
// their runs, tool days and tool day use), for one batch of ingest's size:
// "shuffled", generated traffic whose calls come in no order; "file", the
// third batch of bench/ingest.sh's file as `ingest` stages it (its
// sessions' calls in time order, a call's session often the one before's).
func BenchmarkCollectCalls(b *testing.B) {
	shuffled, err := runtraffic.Generate(7, 122880, 36*time.Hour, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), false)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		evs  []audit.Event
	}{{"shuffled", shuffled}, {"file", ingestFileBatches(b, 3)[2]}} {
		b.Run(c.name, func(b *testing.B) {
			st := newStaging(len(c.evs))
			st.Add(c.evs, nil)
			defer st.Release()
			b.ReportAllocs()
			var x callScratch // kept from batch to batch, as the store does
			for b.Loop() {
				x.release(collectCalls(st.cols, &x))
			}
		})
	}
}

// ingestFileBatches is the first n batches of bench/ingest.sh's file
// (`simulate --count 1000000 --seed 1`) as `ingest` reads them.
func ingestFileBatches(b *testing.B, n int) [][]audit.Event {
	const size = ingest.FileBatchLines
	var evs []audit.Event
	enough := errors.New("enough batches")
	_, err := simulate.Generate(context.Background(), simulate.Options{Seed: 1, Count: 1_000_000, Now: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)},
		func(e audit.Event) error {
			if len(evs) == n*size {
				return enough
			}
			evs = append(evs, e)
			return nil
		})
	if !errors.Is(err, enough) {
		b.Fatal(err)
	}
	batches := make([][]audit.Event, n)
	for i := range batches {
		batches[i] = evs[i*size : (i+1)*size]
	}
	return batches
}

// BenchmarkStagingAdd stages one batch of ingest's size as the file source
// does, in chunks of 8,192 events: ids checked against the batch's and the
// events' columns filled.
func BenchmarkStagingAdd(b *testing.B) {
	evs, err := runtraffic.Generate(7, 122880, 36*time.Hour, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), false)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		st := newStaging(len(evs))
		for at := 0; at < len(evs); at += 8192 {
			st.Add(evs[at:min(at+8192, len(evs))], nil)
		}
		st.Release()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}

// BenchmarkBatchUpkeep measures what keeping the aggregates costs the
// appending thread for one batch beside its insert: tool_days, tool_day_use
// and the runs recorded from the batch's calls counted in Go
// (recordBatchAggregates; collectCalls is BenchmarkCollectCalls). The
// batch is the third of bench/ingest.sh's file (`simulate --count 1000000
// --seed 1`) as `ingest` reads it, after the two before it, whose sessions
// it continues. Each run is rolled back, so that every run does the same.
func BenchmarkBatchUpkeep(b *testing.B) {
	ctx := context.Background()
	batches := ingestFileBatches(b, 3)
	s, err := Open(ctx, filepath.Join(b.TempDir(), "b.duckdb"), Options{IngestThreads: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	for _, batch := range batches[:2] {
		if _, err := s.Append(ctx, ingest.Batch{Events: batch}); err != nil {
			b.Fatal(err)
		}
	}
	// The third batch's calls stored without their aggregates.
	st := newStaging(len(batches[2]))
	st.Add(batches[2], nil)
	defer st.Release()
	calls := collectCalls(st.cols, nil)
	now := time.Now().UTC()
	exec := func(q string, args ...any) {
		if _, err := s.wconn.ExecContext(ctx, q, args...); err != nil {
			b.Fatal(err)
		}
	}
	staged, release, err := st.cols.register(ctx, s.wconn)
	if err != nil {
		b.Fatal(err)
	}
	exec(insertCalls(staged, false, nil), st.lo, st.hi, now)
	release()
	// The tails' keys as the first two batches left them: a rolled-back
	// run's keys would stay, and send the next run's sessions to the whole
	// table.
	keys := s.tails
	for b.Loop() {
		b.StopTimer()
		s.tails = tailKeys{built: keys.built, sorted: keys.sorted, recent: maps.Clone(keys.recent)}
		b.StartTimer()
		exec("BEGIN TRANSACTION")
		if err := recordBatchAggregates(ctx, s.wconn, &s.tails, &s.upkeepBuffers, calls, now); err != nil {
			b.Fatal(err)
		}
		exec("ROLLBACK")
	}
	b.ReportMetric(float64(len(calls.sessions)), "sessions")
}
