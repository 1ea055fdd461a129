package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/config"
)

// The settings a CLI sends with recommend, backtest and replay carry every
// key the recommender reads, so that the daemon answers as the file would:
// a daemon configured otherwise ends up with the client's values.
func TestSettingsCarryEveryRecommenderKey(t *testing.T) {
	v := config.New()
	v.Set("recommend.window", "10d")
	v.Set("recommend.min_days", 3)
	v.Set("regression.watch", "6h")
	v.Set("regression.baseline", "3d")
	v.Set("regression.min_refused", 4)
	v.Set("regression.min_share", 0.5)
	client, err := config.Load(v)
	require.NoError(t, err)
	daemonCfg, err := config.Load(config.New())
	require.NoError(t, err)
	s, err := (&app{cfg: client}).settings()
	require.NoError(t, err)
	daemon := &app{cfg: daemonCfg}
	daemon.applySettings(s)
	assert.Equal(t, client.Recommend, daemon.cfg.Recommend)
	assert.Equal(t, client.Regression.Watch, daemon.cfg.Regression.Watch)
	assert.Equal(t, 6*time.Hour, daemon.recommendParams().RegressionWatch)
	assert.Equal(t, (&app{cfg: client}).recommendParams(), daemon.recommendParams())
}
