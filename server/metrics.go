package server

import (
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/mcptrail/mcptrail/ingest"
)

// maxServerLabels caps the distinct values of the server label: event
// payloads choose it, and an unbounded label would let any publisher grow
// the metrics without limit. Further servers are counted as "_other".
const maxServerLabels = 500

// metrics is the daemon's own Prometheus registry.
type metrics struct {
	reg *prometheus.Registry

	ingested    *prometheus.CounterVec
	duplicates  *prometheus.CounterVec
	rejected    *prometheus.CounterVec
	skipped     prometheus.Counter
	redelivered prometheus.Counter
	batchSize   prometheus.Histogram
	commit      prometheus.Histogram
	errors      *prometheus.CounterVec

	pending    prometheus.Gauge
	ackPending prometheus.Gauge
	storedSeq  prometheus.Gauge

	connected     prometheus.Gauge
	reconnects    prometheus.Counter
	slowConsumers prometheus.Counter
	dropped       prometheus.Counter
	recreated     *prometheus.CounterVec
	ready         prometheus.Gauge

	mu      sync.Mutex
	servers map[string]bool
}

func newMetrics(dbSize func() float64) *metrics {
	m := &metrics{
		reg:     prometheus.NewRegistry(),
		servers: map[string]bool{},
		ingested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_events_ingested_total",
			Help: "Events stored in the database, by input format and MCP server.",
		}, []string{"format", "server"}),
		duplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_events_duplicate_total",
			Help: "Events received again and not stored twice (redelivery, or an id already stored), by input format and MCP server.",
		}, []string{"format", "server"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_events_rejected_total",
			Help: "Messages rejected into dead_letters, by detected format, MCP server (from the subject) and reason.",
		}, []string{"format", "server", "reason"}),
		skipped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcptrail_events_skipped_total",
			Help: "Payloads that are not tool calls (such as Intercept startup lines), counted and not stored.",
		}),
		redelivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcptrail_messages_redelivered_skipped_total",
			Help: "JetStream messages at or below the stored checkpoint (committed before a lost ack), skipped.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mcptrail_batch_messages",
			Help:    "Messages per ingested batch.",
			Buckets: []float64{1, 10, 100, 500, 1000, 2000, 5000, 10000, 20000},
		}),
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mcptrail_commit_seconds",
			Help:    "Time to store one batch in DuckDB (one transaction, checkpoint included).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_ingest_errors_total",
			Help: "Errors the ingest loop survived, by stage (fetch, append, ack).",
		}, []string{"stage"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcptrail_consumer_pending_messages",
			Help: "Messages in the stream not yet delivered to the durable consumer (polled).",
		}),
		storedSeq: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcptrail_stored_stream_sequence",
			Help: "Highest stream sequence stored (the checkpoint), as of the last batch; the stream's last sequence minus it is what is left to store.",
		}),
		ackPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcptrail_consumer_ack_pending_messages",
			Help: "Messages delivered to the durable consumer and not yet acknowledged (polled; always 0 where it acknowledges nothing, on a limits stream).",
		}),
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcptrail_nats_connected",
			Help: "1 while connected to NATS.",
		}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcptrail_nats_reconnects_total",
			Help: "Reconnections to NATS.",
		}),
		slowConsumers: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcptrail_nats_slow_consumer_events_total",
			Help: "Slow-consumer events: the core-mode subscription hit its pending limits and NATS dropped messages.",
		}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcptrail_core_dropped_messages_total",
			Help: "Core-mode messages dropped at the pending limits (core mode is at-most-once).",
		}),
		recreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcptrail_nats_recreated_total",
			Help: "JetStream streams and consumers found missing (deleted) while the daemon ran and created again, by what.",
		}, []string{"what"}),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mcptrail_ready",
			Help: "1 once the ingest loop runs (/readyz also needs NATS connected and ingestion working).",
		}),
	}
	m.reg.MustRegister(m.ingested, m.duplicates, m.rejected, m.skipped, m.redelivered, m.batchSize, m.commit,
		m.errors, m.pending, m.ackPending, m.storedSeq, m.connected, m.reconnects, m.slowConsumers, m.dropped, m.recreated, m.ready,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcptrail_database_size_bytes",
			Help: "Size of the DuckDB file and its write-ahead log.",
		}, dbSize),
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	for _, stage := range []string{"fetch", "append", "ack", "stream_setup"} {
		m.errors.WithLabelValues(stage) // export zeros so that rate() works from the start
	}
	for _, what := range []string{"stream", "consumer"} {
		m.recreated.WithLabelValues(what)
	}
	return m
}

// server returns the label value for an MCP server name.
func (m *metrics) server(s string) string {
	if s == "" {
		return "unknown"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.servers[s] {
		return s
	}
	if len(m.servers) >= maxServerLabels {
		return "_other"
	}
	m.servers[s] = true
	return s
}

// observe counts one stored batch. Append reports only totals, so when it
// found duplicates the split by label is exact for repeats within the batch
// and proportional for ids stored by earlier batches (rare: publishers'
// Nats-Msg-Id and the checkpoint catch almost all redelivery first).
func (m *metrics) observe(rep ingest.BatchReport, subjectPrefix string) {
	m.batchSize.Observe(float64(rep.Messages))
	if rep.Checkpoint > 0 {
		m.storedSeq.Set(float64(rep.Checkpoint))
	}
	if rep.Commit > 0 {
		m.commit.Observe(rep.Commit.Seconds())
	}
	m.skipped.Add(float64(rep.Skipped))
	m.redelivered.Add(float64(rep.Redelivered))

	for _, d := range rep.Dead {
		srv := m.server(serverFromSubject(d.Source, subjectPrefix))
		if d.Duplicate { // a redelivered message's, stored already
			m.duplicates.WithLabelValues(d.Format, srv).Inc()
			continue
		}
		m.rejected.WithLabelValues(d.Format, srv, d.Reason).Inc()
	}

	// Events handed over that the store found already stored (Result says
	// how many, not which) are spread over the labels in proportion.
	keys := make([]ingest.EventLabel, 0, len(rep.Labels))
	handed := 0
	for k, c := range rep.Labels {
		keys = append(keys, k)
		handed += c.Handed
	}
	slices.SortFunc(keys, func(a, b ingest.EventLabel) int {
		return strings.Compare(string(a.Format)+"\x00"+a.Server, string(b.Format)+"\x00"+b.Server)
	})
	stored := handed - rep.Result.Ingested
	left, unspread := stored, handed
	for _, k := range keys {
		c := rep.Labels[k]
		dup := 0
		if stored > 0 && c.Handed > 0 {
			dup = c.Handed * stored / handed
			if unspread -= c.Handed; unspread == 0 {
				dup = left // the last label with handed events takes the rest
			}
			dup = min(dup, c.Handed, left)
			left -= dup
		}
		srv := m.server(k.Server)
		if c.Handed > 0 {
			m.ingested.WithLabelValues(string(k.Format), srv).Add(float64(c.Handed - dup))
		}
		if d := dup + c.Repeats + c.Redelivered; d > 0 {
			m.duplicates.WithLabelValues(string(k.Format), srv).Add(float64(d))
		}
	}
}

// serverFromSubject takes the server from mcp.audit.<server>, the subject's
// last token (as ingest checks it): a rejected payload has no trustworthy
// server field.
func serverFromSubject(subject, prefix string) string {
	rest, ok := strings.CutPrefix(subject, prefix)
	if !ok || rest == "" {
		return ""
	}
	return rest[strings.LastIndexByte(rest, '.')+1:]
}
