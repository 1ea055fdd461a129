package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/internal/redact"
	"github.com/mcptrail/mcptrail/server"
	"github.com/mcptrail/mcptrail/simulate"
)

// publishSimulation publishes simulated traffic through JetStream, with
// publish acknowledgements, as a gateway would.
func (a *app) publishSimulation(cmd *cobra.Command, opts simulate.Options, po server.PublishOptions, stateless bool) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	events := make(chan audit.Event, 4096)
	genErr := make(chan error, 1)
	go func() {
		defer close(events)
		_, err := simulate.Generate(ctx, opts, statelessIf(stateless, func(e audit.Event) error {
			select {
			case events <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		genErr <- err
	}()
	next := func() (audit.Event, bool, error) {
		e, ok := <-events
		return e, ok, nil
	}
	st, err := server.Publish(ctx, po, next)
	cancel()
	for range events { // let the generator finish
	}
	if gerr := <-genErr; gerr != nil && err == nil && ctx.Err() == nil {
		err = gerr
	}
	if err != nil {
		return a.publishError(po.URL, err)
	}
	a.printPublished(st)
	return nil
}

// gatewayAuth is how simulate signs in to NATS, as a gateway would: the user
// and password file given (either defaults to the embedded server's default
// gateway); else, with nats.url, the configured credentials; else the
// embedded server's default gateway when its password file exists (so that
// simulating against `mcptrail serve` needs no flag); else the daemon's own
// nats.token or nats.user from the configuration.
func (a *app) gatewayAuth(user, passwordFile string) (server.Auth, error) {
	n := a.cfg.NATS
	configured := server.Auth{Creds: n.Creds, NKey: n.NKey, Token: n.Token, User: n.User, Password: n.Password,
		TLS: server.TLS{CA: n.TLSCA, Cert: n.TLSCert, Key: n.TLSKey}}
	explicit := user != "" || passwordFile != ""
	if !explicit && n.URL != "" {
		return configured, nil
	}
	if user == "" {
		user = server.DefaultGatewayUser
	}
	file := passwordFile
	if file == "" {
		file = a.gatewayPasswordFile()
	}
	pw, err := server.ReadPasswordFile(file)
	switch {
	case err == nil:
		return server.Auth{User: user, Password: pw, TLS: configured.TLS}, nil
	case explicit:
		return server.Auth{}, usageErrorf("--nats-password-file %s: %v", file, err)
	}
	return configured, nil
}

// gatewayPasswordFile is the embedded server's default gateway password file.
func (a *app) gatewayPasswordFile() string {
	return server.GatewayPasswordFile(a.cfg.NATS.GatewayPasswordFile, a.cfg.Storage.Path)
}

// publishError says where publishing failed and, for a refused sign-in,
// how to give a gateway user.
func (a *app) publishError(url string, err error) error {
	if errors.Is(err, nats.ErrAuthorization) {
		return fmt.Errorf("publish to %s: %w: give a gateway user with --nats-user and --nats-password-file "+
			"(the embedded server's default gateway is %s, its password in %s)", redact.URL(url), err, server.DefaultGatewayUser, a.gatewayPasswordFile())
	}
	return fmt.Errorf("publish to %s: %w", redact.URL(url), redact.Error(err, url))
}

// printPublished reports what Publish achieved.
func (a *app) printPublished(st server.PublishStats) {
	fmt.Fprintf(a.stdout, "published %d events in %d messages in %s (%.0f events/s), %d duplicates, %d messages sent again\n",
		st.Published, st.Messages, st.Duration.Round(time.Millisecond), st.Rate, st.Duplicates, st.Resent)
}
