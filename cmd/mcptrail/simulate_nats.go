package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mcptrail/mcptrail/simulate"
)

// publishSimulation publishes simulated traffic through JetStream.
func (a *app) publishSimulation(cmd *cobra.Command, opts simulate.Options, url string, rate float64) error {
	_, _, _, _ = cmd, opts, url, rate
	return fmt.Errorf("--nats is not available yet")
}
