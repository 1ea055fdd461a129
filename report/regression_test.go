package report

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/simulate"
)

// A report over a policy change shows the regression among its key
// findings, with its grant, in Markdown and JSON.
func TestReportShowsARegression(t *testing.T) {
	store := emptyStore(t)
	change := fixedNow.Add(-time.Hour)
	pc := simulate.PolicyChange{Server: server, Grant: "ops", Change: change, Refused: simulate.PolicyChangeUsedDaily, Days: 10}
	appendEvents(t, store, simulate.PolicyChangeEvents(pc, fixedNow)...)
	r, err := Build(context.Background(), store, Options{Server: server, Window: 7 * 24 * time.Hour, Now: fixedNow,
		Recommend: inputs(t, store)})
	require.NoError(t, err)
	var found bool
	for _, f := range r.Recommendation.Findings {
		if f.Kind == "regression" {
			found = true
			assert.Equal(t, "regression:"+server+":ops:"+simulate.PolicyChangeUsedDaily, f.ID)
			assert.Equal(t, "ops", f.Grant)
		}
	}
	require.True(t, found, "no regression finding in the report")
	md := Markdown(r, nil)
	assert.Contains(t, md, "| `ops` | high | regression | `list_backups` | revert | policy version v2 ")
	js, err := JSON(r)
	require.NoError(t, err)
	assert.Contains(t, string(js), `"kind": "regression"`)
}
