package report

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/mcptrail/mcptrail/analytics"
)

// A suppression changed at the very end of a report's window belongs to
// the next report, which reads the log from that end on: listed once, not
// in both.
func TestASuppressionChangeAtTheWindowsEndIsListedOnce(t *testing.T) {
	end := fixedNow
	at := func(d time.Duration) analytics.SuppressionChange {
		return analytics.SuppressionChange{At: end.Add(d), FindingID: "dead_tool:srv:*:x", Action: "suppress"}
	}
	first := &Report{Window: Window{From: end.Add(-week), To: end}}
	c := changes(first, nil, "", []analytics.SuppressionChange{at(-time.Second), at(0)}, first.Window.From)
	assert.Equal(t, []analytics.SuppressionChange{at(-time.Second)}, c.SuppressionChanges)

	next := &Report{Window: Window{From: end, To: end.Add(week)}}
	c = changes(next, first, "previous", []analytics.SuppressionChange{at(0)}, next.Window.From) // the log from first's end on
	assert.Equal(t, []analytics.SuppressionChange{at(0)}, c.SuppressionChanges)
}
