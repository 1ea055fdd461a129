//go:build tools

// This file pins modules that packages under construction will import, so that
// concurrent work does not race on go.mod. Remove entries once imported for real.
package mcptrail

import (
	_ "github.com/aymanbagabas/go-udiff"
	_ "github.com/evanphx/json-patch/v5"
	_ "github.com/go-analyze/charts"
	_ "github.com/goccy/go-json"
	_ "github.com/mattn/go-isatty"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/olekukonko/tablewriter"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/robfig/cron/v3"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	_ "github.com/stretchr/testify/require"
	_ "github.com/wI2L/jsondiff"
	_ "github.com/duckdb/duckdb-go/v2"
	_ "gopkg.in/yaml.v3"
)
