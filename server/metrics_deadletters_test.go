package server

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"

	"github.com/mcptrail/mcptrail/ingest"
)

// A dead letter the store found stored already (a redelivered message's)
// counts as a duplicate, as SPEC §1 says, not as another rejection.
func TestARedeliveredDeadLetterCountsAsADuplicate(t *testing.T) {
	m := newMetrics(func() float64 { return 0 })
	bad := ingest.DeadLetter{Source: "mcp.audit.pve", Seq: 7, Format: "auto", Reason: "malformed_json"}
	again := bad
	again.Duplicate = true
	m.observe(ingest.BatchReport{Dead: []ingest.DeadLetter{bad, again}}, "mcp.audit.")
	assert.Equal(t, 1.0, testutil.ToFloat64(m.rejected.WithLabelValues("auto", "pve", "malformed_json")))
	assert.Equal(t, 1.0, testutil.ToFloat64(m.duplicates.WithLabelValues("auto", "pve")))
}
