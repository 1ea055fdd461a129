package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/server"
	"github.com/mcptrail/mcptrail/simulate"
)

// publishSimulation publishes simulated traffic through JetStream, with
// publish acknowledgements, as a gateway would.
func (a *app) publishSimulation(cmd *cobra.Command, opts simulate.Options, url string, rate float64) error {
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	events := make(chan audit.Event, 4096)
	genErr := make(chan error, 1)
	go func() {
		defer close(events)
		_, err := simulate.Generate(ctx, opts, func(e audit.Event) error {
			select {
			case events <- e:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		genErr <- err
	}()
	next := func() (audit.Event, bool, error) {
		e, ok := <-events
		return e, ok, nil
	}
	n := a.cfg.NATS
	st, err := server.Publish(ctx, server.PublishOptions{URL: url, Rate: rate,
		Auth: server.Auth{Creds: n.Creds, NKey: n.NKey, Token: n.Token, User: n.User, Password: n.Password,
			TLS: server.TLS{CA: n.TLSCA, Cert: n.TLSCert, Key: n.TLSKey}}}, next)
	cancel()
	for range events { // let the generator finish
	}
	if gerr := <-genErr; gerr != nil && err == nil && ctx.Err() == nil {
		err = gerr
	}
	if err != nil {
		return fmt.Errorf("publish to %s: %w", url, err)
	}
	fmt.Fprintf(a.stdout, "published %d events in %s (%.0f events/s), %d duplicates\n",
		st.Published, st.Duration.Round(1e6), st.Rate, st.Duplicates)
	return nil
}
