package recommend

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRetryStormsSpanEveryBurst: a tool's retry storms are dated from the
// earliest burst's first call to the latest burst's last call, whatever
// order the runs come in (the runs are read in no order); a run that is no
// storm (no error) counts in neither.
func TestRetryStormsSpanEveryBurst(t *testing.T) {
	s := newState(nil, Options{Server: "s", Now: time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)})
	storm := func(session uint64, first, last int64) run {
		return run{SessionHash: session, Tool: "retry_me", Polls: 4, Errors: 4, LastErr: true, FirstMS: first, LastMS: last}
	}
	s.runs = runList{{
		storm(1, 5000, 9000),
		storm(2, 1000, 2000),
		{SessionHash: 4, Tool: "retry_me", Polls: 4, FirstMS: 500, LastMS: 20000},
		storm(3, 3000, 12000),
	}}
	sessions := s.detectRetryStorms()
	require.Len(t, s.findings, 1)
	ev := s.findings[0].Evidence
	assert.Equal(t, time.UnixMilli(1000).UTC(), ev["first"])
	assert.Equal(t, time.UnixMilli(12000).UTC(), ev["last"])
	assert.Equal(t, 3, ev["storms"])
	assert.Len(t, sessions, 3)
}
