package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/otlp"
	"github.com/mcptrail/mcptrail/otlpreceiver"
)

// startOTLP serves the OTLP/HTTP receiver on otlp.listen, publishing with
// the daemon's NATS connection, and returns what stops it.
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
		return nil, &ConfigError{"otlp.listen", opts.OTLPListen, err.Error()}
	}
	for _, c := range rc.Collectors() {
		if err := m.reg.Register(c); err != nil {
			return nil, fmt.Errorf("serve: register metrics: %w", err)
		}
	}
	ln, err := net.Listen("tcp", opts.OTLPListen)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, errAddrInUse("otlp.listen", "MCPTRAIL_OTLP_LISTEN", opts.OTLPListen, syscall.EADDRINUSE)
		}
		return nil, fmt.Errorf("otlp.listen %s: %w", opts.OTLPListen, err)
	}
	hs := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(api.IdentHeader, "1")
		rc.ServeHTTP(w, r)
	}), ReadHeaderTimeout: readHeaderTimeout, ReadTimeout: readTimeout, IdleTimeout: idleTimeout, MaxHeaderBytes: maxHeaderBytes,
		TLSConfig: tlsConfig, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
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
	if !isLoopback(opts.OTLPListen) && tlsConfig == nil {
		log.Warn("otlp.listen is reachable from other hosts without TLS: the token and the events cross the network in clear; "+
			"set http.tls.cert and http.tls.key, or listen on 127.0.0.1", "listen", opts.OTLPListen)
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
		<-done
	}, nil
}
