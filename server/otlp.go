package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/otlp"
	"github.com/mcptrail/mcptrail/otlpreceiver"
)

// startOTLP serves the OTLP receiver, over HTTP on otlp.listen and over
// gRPC on otlp.grpc_listen, publishing with the daemon's NATS connection,
// and returns what stops it.
func startOTLP(opts Options, nc *nats.Conn, m *metrics, ready func() bool, tlsConfig *tls.Config, log *slog.Logger) (stop func(), err error) {
	log = log.With("component", "otlp")
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("otlp: jetstream: %w", err)
	}
	rc, err := otlpreceiver.New(otlpreceiver.Options{
		Token: opts.OTLPToken, APIToken: opts.HTTPToken, JS: js, Subject: strings.TrimSuffix(opts.Subject, ">"),
		Convert:       otlp.Options{Server: opts.OTLPServer, StoreArgs: opts.Decode.StoreArgs, MaxArgsBytes: opts.Decode.MaxEventBytes},
		MaxEventBytes: opts.Decode.MaxEventBytes, MaxMessageBytes: opts.MaxMessageBytes, MaxRequestBytes: opts.OTLPMaxRequestBytes,
		Ready: ready, Log: log,
	})
	if err != nil {
		return nil, &ConfigError{"otlp.token", "", err.Error()}
	}
	for _, c := range rc.Collectors() {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: register metrics: %w", err)
		}
	}
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	if opts.OTLPListen != "" {
		s, err := serveOTLPHTTP(opts, rc, tlsConfig, log)
		if err != nil {
			return nil, err
		}
		stops = append(stops, s)
	}
	if opts.OTLPGRPCListen != "" {
		s, err := serveOTLPGRPC(opts, rc, tlsConfig, log)
		if err != nil {
			stop()
			return nil, err
		}
		stops = append(stops, s)
	}
	return stop, nil
}

// warnClear warns of a receiver reachable from other hosts without TLS.
func warnClear(log *slog.Logger, key, addr string, tlsConfig *tls.Config) {
	if !isLoopback(addr) && tlsConfig == nil {
		log.Warn(key+" is reachable from other hosts without TLS: the token and the events cross the network in clear; "+
			"set http.tls.cert and http.tls.key, or listen on 127.0.0.1", "listen", addr)
	}
}

// serveOTLPHTTP serves OTLP/HTTP on otlp.listen.
func serveOTLPHTTP(opts Options, rc *otlpreceiver.Receiver, tlsConfig *tls.Config, log *slog.Logger) (stop func(), err error) {
	ln, err := listenSetting("otlp.listen", "MCPTRAIL_OTLP_LISTEN", opts.OTLPListen)
	if err != nil {
		return nil, err
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.IdentHeader, "1")
		rc.ServeHTTP(w, r)
	}), ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		TLSConfig: tlsConfig.Clone(), ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		var err error
		if tlsConfig != nil {
			err = hs.ServeTLS(ln, "", "")
		} else {
			err = hs.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("otlp receiver stopped", "err", err)
		}
	}()
	if opts.OTLPListening != nil {
		opts.OTLPListening(ln.Addr().String())
	}
	log.Info("otlp receiver listening", "listen", ln.Addr().String(), "paths", otlpreceiver.PathTraces+" "+otlpreceiver.PathLogs, "tls", tlsConfig != nil)
	warnClear(log, "otlp.listen", opts.OTLPListen, tlsConfig)
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
		<-done
	}, nil
}

// serveOTLPGRPC serves OTLP/gRPC on otlp.grpc_listen, with the API's TLS
// when it has one.
func serveOTLPGRPC(opts Options, rc *otlpreceiver.Receiver, tlsConfig *tls.Config, log *slog.Logger) (stop func(), err error) {
	ln, err := listenSetting("otlp.grpc_listen", "MCPTRAIL_OTLP_GRPC_LISTEN", opts.OTLPGRPCListen)
	if err != nil {
		return nil, err
	}
	// The HTTP server's bounds, as gRPC has them: a connection has 10 s
	// to begin, one idle for 2 min is closed, metadata is held to 64 KiB.
	sopts := []grpc.ServerOption{
		grpc.ConnectionTimeout(readHeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: idleTimeout}),
		grpc.MaxHeaderListSize(maxHeaderBytes),
	}
	if tlsConfig != nil {
		sopts = append(sopts, grpc.Creds(credentials.NewTLS(tlsConfig.Clone())))
	}
	gs := rc.GRPCServer(sopts...)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := gs.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			log.Error("otlp/grpc receiver stopped", "err", err)
		}
	}()
	if opts.OTLPGRPCListening != nil {
		opts.OTLPGRPCListening(ln.Addr().String())
	}
	log.Info("otlp/grpc receiver listening", "listen", ln.Addr().String(), "tls", tlsConfig != nil)
	warnClear(log, "otlp.grpc_listen", opts.OTLPGRPCListen, tlsConfig)
	return func() {
		// Requests under way finish (their events are acknowledged or
		// they fail), for at most 2 s, as over HTTP.
		stopped := make(chan struct{})
		go func() { gs.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			gs.Stop()
		}
		<-done
	}, nil
}
