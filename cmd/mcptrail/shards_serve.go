package main

import (
	"context"
	"regexp"
	"runtime/debug"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/mcptrail/mcptrail/api"
	"github.com/mcptrail/mcptrail/server"
	"github.com/mcptrail/mcptrail/shardsvc"
)

// startShardService registers the daemon's API as the NATS service
// "mcptrail" once the daemon is ready, with the servers it owns, so that
// `mcptrail --nats` finds it; it is stopped when the daemon stops.
func (a *app) startShardService(backend api.Backend, token string, opts *server.Options) {
	o := shardsvc.Options{Backend: backend, Token: token, Servers: a.cfg.NATS.Servers,
		Stream: a.cfg.NATS.Stream, Consumer: a.cfg.NATS.Consumer, Version: binaryVersion(),
		Log: a.log.With("component", "shardsvc")}
	if !a.cfg.NATS.JetStream {
		o.Stream, o.Consumer = "", "" // core NATS: no consumer names this shard
	}
	addBackground(opts, func(ctx context.Context, nc *nats.Conn) {
		svc, err := shardsvc.Start(ctx, nc, o)
		if err != nil {
			// The daemon still ingests and serves HTTP: only --nats cannot find it.
			a.log.Error("NATS service not registered: the CLI's --nats will not find this daemon", "err", err)
			return
		}
		<-ctx.Done()
		if err := svc.Stop(); err != nil {
			a.log.Warn("stop the NATS service", "err", err)
		}
	})
}

var semver = regexp.MustCompile(`^\d+\.\d+\.\d+([-+][0-9A-Za-z.+-]+)?$`)

// binaryVersion is the module version the binary was built at, as SemVer
// (micro requires it); "0.0.0" for a development build.
func binaryVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := strings.TrimPrefix(bi.Main.Version, "v"); semver.MatchString(v) {
			return v
		}
	}
	return "0.0.0"
}
