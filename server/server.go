package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/ingest"
)

// consumerPoll is how often the consumer's pending counts are refreshed for
// the metrics.
const consumerPoll = 5 * time.Second

// Run is `mcptrail serve`. With the store already open it starts, in this
// order: the HTTP listener (so that a taken http.listen fails first and
// /readyz answers 503 during start-up), the embedded NATS server or the
// connection to nats.url, the stream and durable consumer (JetStream mode)
// or the subscription (core mode), and the ingest loop; only then does
// /readyz answer 200 and ready (when not nil) get called.
//
// Run blocks until ctx is cancelled, then shuts down gracefully: it stops
// fetching, stores and acknowledges the batch in hand, stops HTTP and closes
// NATS (and the embedded server) and returns nil, within 10 s. The caller
// closes the store. Configuration errors are *ConfigError.
func Run(ctx context.Context, store *analytics.Store, opts Options, log *slog.Logger, ready func()) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if store == nil {
		return errors.New("serve: no database")
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return err
	}
	m := newMetrics(func() float64 { return float64(store.SizeBytes()) })
	for _, c := range opts.Collectors {
		if err := m.reg.Register(c); err != nil {
			return fmt.Errorf("serve: register metrics: %w", err)
		}
	}
	a := &httpAPI{log: log.With("component", "http"), m: m}
	guard, err := localGuard(opts.HTTPListen, opts.HTTPAllowedHosts)
	if err != nil {
		return &ConfigError{"http.listen", opts.HTTPListen, err.Error()}
	}
	a.guardLocal = guard
	if opts.Backend != nil {
		h, err := api.NewHandler(api.Options{Backend: opts.Backend, Ready: a.isReady, Token: opts.HTTPToken,
			Listen: opts.HTTPListen, AllowedHosts: opts.HTTPAllowedHosts, Log: log.With("component", "api")})
		if err != nil {
			return &ConfigError{"http.listen", opts.HTTPListen, err.Error()}
		}
		a.commands = h
	}

	// 1. HTTP.
	ln, err := listenSetting("http.listen", "MCPTRAIL_HTTP_LISTEN", opts.HTTPListen)
	if err != nil {
		return err
	}
	rt := readTimeout
	if opts.HTTPReadTimeout > 0 {
		rt = opts.HTTPReadTimeout
	}
	hs := &http.Server{Handler: a.handler(), ReadHeaderTimeout: min(readHeaderTimeout, rt), ReadTimeout: rt,
		IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		ErrorLog: slog.NewLogLogger(log.With("component", "http").Handler(), slog.LevelDebug)}
	var tlsConfig *tls.Config // the receivers' too
	if opts.HTTPTLSCert != "" {
		cert, err := tls.LoadX509KeyPair(opts.HTTPTLSCert, opts.HTTPTLSKey)
		if err != nil {
			_ = ln.Close()
			return &ConfigError{"http.tls.cert", opts.HTTPTLSCert, fmt.Sprintf("a PEM certificate with its key in http.tls.key: %v", err)}
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		// Each server gets its own copy: net/http writes the protocols it
		// speaks into the one it serves with.
		hs.TLSConfig = tlsConfig.Clone()
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		var err error
		if opts.HTTPTLSCert != "" {
			err = hs.ServeTLS(ln, "", "")
		} else {
			err = hs.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	})
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
		wg.Wait()
	}()
	log.Info("http api listening", "listen", ln.Addr().String(), "api", opts.Backend != nil, "tls", opts.HTTPTLSCert != "")
	if !isLoopback(opts.HTTPListen) && opts.HTTPTLSCert == "" {
		log.Warn("http.listen is reachable from other hosts without TLS: the API token and every answer cross the network in clear; "+
			"set http.tls.cert and http.tls.key, or listen on 127.0.0.1", "listen", opts.HTTPListen)
	}

	// 2. NATS.
	hooks := connHooks{
		slowConsumer: func() { m.slowConsumers.Inc() },
		connected: func(up bool) {
			if up {
				m.connected.Set(1)
			} else {
				m.connected.Set(0)
			}
		},
		reconnected: func() { m.reconnects.Inc() },
	}
	var nc *nats.Conn
	if opts.URL == "" {
		unlock, err := lockStoreDir(opts.EmbeddedStoreDir)
		if err != nil {
			return err
		}
		defer unlock()
		auth, err := newEmbeddedAuth(opts, store.Path(), log)
		if err != nil {
			return err
		}
		ns, err := startEmbedded(opts, auth, log)
		if err != nil {
			return err
		}
		defer shutdownEmbedded(ns, log)
		copts := connectOptions("mcptrail serve", log, hooks)
		copts = append(copts, nats.InProcessServer(ns), auth.daemon)
		if nc, err = nats.Connect(ns.ClientURL(), copts...); err != nil {
			return fmt.Errorf("connect to the embedded NATS server: %w", err)
		}
	} else {
		auth := Auth{Creds: opts.Creds, NKey: opts.NKey, Token: opts.Token, User: opts.User, Password: opts.Password, TLS: opts.TLS}
		if nc, err = connectExternal(ctx, opts.URL, auth, log, hooks); err != nil {
			if ctx.Err() != nil {
				return nil // stopped during start-up
			}
			return err
		}
	}
	defer func() {
		// Push out the last acknowledgements before closing.
		_ = nc.FlushTimeout(time.Second)
		nc.Close()
	}()
	m.connected.Set(1)
	a.live = nc.IsConnected

	if opts.otlpReceiver() {
		stopOTLP, err := startOTLP(opts, nc, m, a.isReady, tlsConfig, log)
		if err != nil {
			return err
		}
		defer stopOTLP()
	}

	// Ingestion's health: the sources report a missing stream or failing
	// commits, and the files the daemon writes are watched.
	var health ingest.Health
	a.health = health.State
	logHealth := func(ok bool, reason string) {
		if ok {
			log.Info("ingesting again: /readyz answers 200")
		} else {
			log.Warn("not ingesting: /readyz answers 503", "reason", reason)
		}
	}
	onHealth := func(_ bool, reason string) { health.Set("ingest", reason, logHealth) }
	watched := map[string]string{"storage.path": store.Path()}
	if opts.URL == "" {
		watched["nats.embedded.store_dir"] = opts.EmbeddedStoreDir
	}
	wctx, stopWatch := context.WithCancel(ctx)
	var watchers sync.WaitGroup
	defer watchers.Wait()
	defer stopWatch()
	watchers.Go(func() { watchFiles(wctx, watched, &health, logHealth) })

	// Background work starts once ready and stops before NATS closes.
	bgCtx, stopBackground := context.WithCancel(ctx)
	var bgOnce sync.Once
	var bg sync.WaitGroup
	defer func() {
		stopBackground()
		bg.Wait()
	}()
	markReady := func() {
		a.ready.Store(true)
		m.ready.Set(1)
		log.Info("ready: ingesting", "http", ln.Addr().String())
		if opts.Background != nil {
			bgOnce.Do(func() { bg.Go(func() { opts.Background(bgCtx, nc) }) })
		}
		if ready != nil {
			ready()
		}
	}
	defer func() {
		a.ready.Store(false)
		m.ready.Set(0)
	}()

	// 3 and 4. Stream, consumer and ingest loop.
	var runErr error
	if opts.JetStream {
		runErr = runJetStream(ctx, nc, store, opts, m, log, markReady, onHealth)
	} else {
		runErr = runCore(ctx, nc, store, opts, m, log, markReady, onHealth)
	}
	if runErr != nil && ctx.Err() == nil {
		return runErr
	}
	log.Info("shutting down")
	return nil
}

func runJetStream(ctx context.Context, nc *nats.Conn, store *analytics.Store, opts Options, m *metrics, log *slog.Logger,
	markReady func(), onHealth func(bool, string)) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	sspec := ingest.StreamSpec{
		Name:     opts.Stream,
		Subjects: []string{opts.Subject},
		MaxAge:   opts.StreamMaxAge,
		MaxBytes: opts.StreamMaxBytes,
		Replicas: opts.StreamReplicas,
	}
	cspec := ingest.ConsumerSpec{
		Stream:    opts.Stream,
		Durable:   opts.Consumer,
		BatchSize: opts.BatchSize,
		FetchSize: opts.FetchSize,
		Acks:      opts.Acks,
	}
	if len(opts.Servers) > 0 {
		cspec.FilterSubjects = opts.subjects()
	}
	setup := streamSetup{js: js, nc: nc, stream: sspec, cons: cspec, timeout: opts.StartupTimeout, m: m, log: log, onHealth: onHealth}
	stream, cons, err := setup.run(ctx)
	if err != nil {
		return err
	}
	log.Info("stream and consumer ready", "stream", opts.Stream, "subjects", opts.Subject,
		"consumer", opts.Consumer, "filter", cspec.FilterSubjects, "ack_policy", cons.CachedInfo().Config.AckPolicy.String())

	pctx, stopPoll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopPoll()
	wg.Go(func() { pollConsumer(pctx, cons, m) })

	prefix := strings.TrimSuffix(opts.Subject, ">")
	src := &ingest.JetStreamSource{
		Consumer:        cons,
		JS:              js,
		Stream:          stream,
		Sink:            store,
		CheckpointKey:   opts.Stream + "/" + opts.Consumer,
		BatchSize:       opts.BatchSize,
		FetchSize:       opts.FetchSize,
		MaxMessageBytes: opts.MaxMessageBytes,
		MaxWait:         opts.FlushInterval,
		Decode:          opts.Decode,
		Workers:         ingest.DefaultDecodeWorkers,
		Log:             log.With("component", "ingest"),
		Started:         markReady,
		OnBatch:         func(r ingest.BatchReport) { m.observe(r, prefix); opts.stored(r) },
		OnError:         func(stage string, _ error) { m.errors.WithLabelValues(stage).Inc() },
		Recreate: func(ctx context.Context) (jetstream.Consumer, error) {
			return ingest.EnsureConsumer(ctx, js, cspec)
		},
		RecreateStream: func(ctx context.Context) (jetstream.Stream, error) {
			return ingest.EnsureStream(ctx, js, sspec)
		},
		OnRecreate:  func(what string) { m.recreated.WithLabelValues(what).Inc() },
		OnHealth:    onHealth,
		StoreThread: opts.StoreThread,
	}
	return src.Run(ctx)
}

// pollConsumer refreshes the pending gauges from the consumer's info.
func pollConsumer(ctx context.Context, cons jetstream.Consumer, m *metrics) {
	t := time.NewTicker(consumerPoll)
	defer t.Stop()
	for {
		ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if info, err := cons.Info(ictx); err == nil {
			m.pending.Set(float64(info.NumPending))
			m.ackPending.Set(float64(info.NumAckPending))
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func runCore(ctx context.Context, nc *nats.Conn, store *analytics.Store, opts Options, m *metrics, log *slog.Logger,
	markReady func(), onHealth func(bool, string)) error {
	prefix := strings.TrimSuffix(opts.Subject, ">")
	src := &ingest.CoreSource{
		Conn:      nc,
		Subjects:  opts.subjects(),
		Queue:     opts.Queue,
		Sink:      store,
		BatchSize: opts.BatchSize,
		MaxWait:   opts.FlushInterval,
		Decode:    opts.Decode,
		Workers:   ingest.DefaultDecodeWorkers,
		Log:       log.With("component", "ingest"),
		Started:   markReady,
		OnBatch:   func(r ingest.BatchReport) { m.observe(r, prefix); opts.stored(r) },
		OnError:   func(stage string, _ error) { m.errors.WithLabelValues(stage).Inc() },
		OnDropped: func(n int) { m.dropped.Add(float64(n)) },
		OnHealth:  onHealth,
		// Core mode stores on Run's goroutine, which favoring keeps on
		// its thread.
		StoreThread: opts.StoreThread,
	}
	return src.Run(ctx)
}

// fileCheck is how often watchFiles looks.
var fileCheck = time.Second

// watchFiles marks ingestion unhealthy while a file or folder the daemon
// writes (keyed by its setting) is missing: deleted under the running daemon,
// what it writes there is lost, and only a restart recreates it.
func watchFiles(ctx context.Context, paths map[string]string, h *ingest.Health, report func(bool, string)) {
	t := time.NewTicker(fileCheck)
	defer t.Stop()
	for {
		for key, path := range paths {
			reason := ""
			if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
				reason = fmt.Sprintf("%s %s was deleted while the daemon runs: what it writes there is lost; restart the daemon", key, path)
			}
			h.Set(key, reason, report)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func shutdownEmbedded(ns *natsserver.Server, log *slog.Logger) {
	ns.Shutdown()
	done := make(chan struct{})
	go func() {
		ns.WaitForShutdown()
		close(done)
	}()
	select {
	case <-done:
		log.Info("embedded NATS server stopped")
	case <-time.After(3 * time.Second):
		log.Warn("embedded NATS server still stopping after 3 s")
	}
}
