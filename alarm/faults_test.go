package alarm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/alarm"
	"github.com/mcptrail/mcptrail/analytics"
	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// faultEnv is an alarm over a real store, its clock and its alerts in the
// test's hands, and the store's alerts table taken away while break holds.
type faultEnv struct {
	t     *testing.T
	store *analytics.Store
	al    *alarm.Alarm
	now   time.Time
	sent  []alarm.Alert
	n     int
}

func newFaultEnv(t *testing.T) *faultEnv {
	store, err := analytics.Open(context.Background(), filepath.Join(t.TempDir(), "a.duckdb"), analytics.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = store.Close() })
	f := &faultEnv{t: t, store: store, now: time.Now().UTC()}
	f.al = &alarm.Alarm{Store: store, Config: liveConfig(), Now: func() time.Time { return f.now },
		Publish: func(_ string, data []byte) error {
			var a alarm.Alert
			require.NoError(t, json.Unmarshal(data, &a))
			f.sent = append(f.sent, a)
			return nil
		}}
	return f
}

// call is an allowed call of the session to tool at at, by grant ops and
// agent a1, with a new id.
func (f *faultEnv) call(session, tool string, at time.Time) audit.Event {
	f.n++
	return audit.Event{ID: fmt.Sprintf("ev-%d", f.n), TS: at, Server: testServer, Tool: tool, Method: audit.DefaultMethod,
		Decision: audit.Allowed, Status: "ok", Grant: "ops", Agent: "a1", Session: session, ArgsHash: "vmid-100"}
}

// save appends evs in one batch.
func (f *faultEnv) save(evs ...audit.Event) {
	_, err := f.store.Append(context.Background(), ingest.Batch{Events: evs})
	require.NoError(f.t, err)
}

// loop stores a start call and n polls a second apart, ending at f.now.
func (f *faultEnv) loop(session string, n int) {
	evs := []audit.Event{f.call(session, "vm_agent_exec", f.now.Add(-time.Duration(n+1)*time.Second))}
	for i := range n {
		evs = append(evs, f.call(session, "vm_agent_exec_status", f.now.Add(-time.Duration(n-i)*time.Second)))
	}
	f.save(evs...)
}

// evaluateThroughAFault evaluates with the alerts table away (it fails),
// then, a second later, with it back.
func (f *faultEnv) evaluateThroughAFault(ctx context.Context) {
	f.breakAlerts(true)
	require.Error(f.t, f.al.Evaluate(ctx))
	f.breakAlerts(false)
	f.now = f.now.Add(time.Second)
	require.NoError(f.t, f.al.Evaluate(ctx))
}

// breakAlerts takes the alerts table away (true) or gives it back.
func (f *faultEnv) breakAlerts(broken bool) {
	q := `ALTER TABLE alerts RENAME TO alerts_away`
	if !broken {
		q = `ALTER TABLE alerts_away RENAME TO alerts`
	}
	_, err := f.store.DB().Exec(q)
	require.NoError(f.t, err)
}

// running counts the running alerts sent for session.
func (f *faultEnv) running(session string) int { return f.count(session, alarm.StateRunning) }

// count counts the alerts of state sent for session.
func (f *faultEnv) count(session, state string) int {
	n := 0
	for _, a := range f.sent {
		if a.Session == session && a.State == state {
			n++
		}
	}
	return n
}

// A start that fails (the store fails for a moment) is tried again at the
// next evaluation: the alert a previous run left open, whose loop the
// calls no longer show, is closed then, and a loop found is alerted.
func TestAFailedStartIsTriedAgain(t *testing.T) {
	f := newFaultEnv(t)
	ctx := context.Background()
	_, err := f.store.RecordAlert(ctx, analytics.AlertRecord{ID: "old-run", Kind: alarm.KindRunawayLoop, Server: testServer,
		Session: "old", Tool: "vm_agent_exec_status", ArgsHash: "vmid-1", First: f.now.Add(-48 * time.Hour), Polls: 40, Threshold: 5,
		SentAt: f.now.Add(-47 * time.Hour)})
	require.NoError(t, err)
	f.loop("s1", 10)
	f.evaluateThroughAFault(ctx)
	assert.Equal(t, 1, f.running("s1"))
	ended := 0
	for _, a := range f.sent {
		if a.ID == "old-run" && a.State == alarm.StateEnded {
			ended++
		}
	}
	assert.Equal(t, 1, ended, "the alert left open is closed")
}

// A running alert that could not be recorded (the store failed for a
// moment) is recorded and sent at the next evaluation, not lost.
func TestAnAlertNotRecordedIsSentLater(t *testing.T) {
	f := newFaultEnv(t)
	ctx := context.Background()
	require.NoError(t, f.al.Evaluate(ctx)) // started, nothing to alert
	f.loop("s1", 10)
	f.evaluateThroughAFault(ctx)
	assert.Equal(t, 1, f.running("s1"))
}

// A run alerted before a restart that ended while the daemon was down (a
// call of another tool came) is closed by the next daemon with the run as
// its calls show it: every poll, its last call, its grant and start tool,
// not the figures the alert was sent with.
func TestARunEndedWhileDownIsClosedWithItsCalls(t *testing.T) {
	f := newFaultEnv(t)
	ctx := context.Background()
	f.now = f.now.Add(-40 * time.Second)
	f.loop("s1", 10)
	require.NoError(t, f.al.Evaluate(ctx))
	require.Equal(t, 1, f.running("s1"))

	// Down: 20 more polls, then another tool's call ends the run.
	var evs []audit.Event
	for i := range 20 {
		evs = append(evs, f.call("s1", "vm_agent_exec_status", f.now.Add(time.Duration(i+1)*time.Second)))
	}
	last := f.now.Add(20 * time.Second).Truncate(time.Microsecond) // as stored
	f.save(append(evs, f.call("s1", "get_vm_status", last.Add(time.Second)))...)

	f.now = f.now.Add(30 * time.Second)
	next := &alarm.Alarm{Store: f.store, Config: f.al.Config, Now: f.al.Now, Publish: f.al.Publish}
	require.NoError(t, next.Evaluate(ctx))
	var ended []alarm.Alert
	for _, a := range f.sent {
		if a.Session == "s1" && a.State == alarm.StateEnded {
			ended = append(ended, a)
		}
	}
	require.Len(t, ended, 1)
	assert.EqualValues(t, 30, ended[0].Polls, "every poll, those while down too")
	assert.True(t, ended[0].Last.Equal(last), "its last poll: %s, not %s", last, ended[0].Last)
	assert.Equal(t, "ops", ended[0].Grant)
	assert.Equal(t, "vm_agent_exec", ended[0].StartTool)
	assert.Equal(t, 1, f.running("s1"), "not sent again")
}

// A call stamped in the future (a gateway whose clock runs ahead) does not
// blind its session: the calls that follow it, stamped right, still make
// a runaway loop that is alerted.
func TestACallFromTheFutureDoesNotBlindItsSession(t *testing.T) {
	f := newFaultEnv(t)
	ctx := context.Background()
	f.save(f.call("s1", "get_vm_status", f.now.Add(time.Hour)))
	require.NoError(t, f.al.Evaluate(ctx))
	f.now = f.now.Add(20 * time.Second)
	f.loop("s1", 10)
	require.NoError(t, f.al.Evaluate(ctx))
	assert.Equal(t, 1, f.running("s1"))
}

// A gateway whose clock runs steadily ahead (every call two minutes in the
// future) is still watched: its runaway loop is alerted.
func TestAGatewayAheadOfTheClockIsStillWatched(t *testing.T) {
	f := newFaultEnv(t)
	ctx := context.Background()
	f.now = f.now.Add(2 * time.Minute)
	f.loop("s1", 10) // stamped as the gateway's clock says
	f.now = f.now.Add(-2 * time.Minute)
	require.NoError(t, f.al.Evaluate(ctx))
	assert.Equal(t, 1, f.running("s1"))
}

// ended counts the ended alerts sent for session.
func (f *faultEnv) ended(session string) int { return f.count(session, alarm.StateEnded) }

// A runaway loop that crosses the threshold and is ended by another
// tool's call between two evaluations still gets both its messages, with
// every poll it made.
func TestALoopOverAndEndedBetweenEvaluationsIsAlerted(t *testing.T) {
	f := newFaultEnv(t)
	ctx := context.Background()
	require.NoError(t, f.al.Evaluate(ctx)) // started, nothing to alert
	evs := []audit.Event{f.call("s1", "vm_agent_exec", f.now.Add(-12*time.Second))}
	for i := range 10 {
		evs = append(evs, f.call("s1", "vm_agent_exec_status", f.now.Add(time.Duration(i-11)*time.Second)))
	}
	f.save(append(evs, f.call("s1", "get_vm_status", f.now))...)
	f.now = f.now.Add(time.Second)
	require.NoError(t, f.al.Evaluate(ctx))
	require.Equal(t, 1, f.running("s1"))
	require.Equal(t, 1, f.ended("s1"))
	for _, a := range f.sent {
		assert.EqualValues(t, 10, a.Polls, "%s: every poll", a.State)
		assert.Equal(t, alarm.KindRunawayLoop, a.Kind)
	}
	require.NoError(t, f.al.Evaluate(ctx))
	assert.Len(t, f.sent, 2, "nothing sent twice")
}

// A runaway loop that went quiet before the alarm saw it (the alarm was
// behind, or down) gets both its messages at once, and a restarted alarm
// sends neither again.
func TestALoopOverThatWentQuietUnseenIsAlerted(t *testing.T) {
	f := newFaultEnv(t)
	ctx := context.Background()
	f.loop("s1", 10)
	f.now = f.now.Add(10 * time.Second) // past poll_max_interval (5 s) by its calls and by their storing
	require.NoError(t, f.al.Evaluate(ctx))
	require.Equal(t, 1, f.running("s1"))
	require.Equal(t, 1, f.ended("s1"))

	next := &alarm.Alarm{Store: f.store, Config: f.al.Config, Now: f.al.Now, Publish: f.al.Publish}
	require.NoError(t, next.Evaluate(ctx))
	assert.Len(t, f.sent, 2, "nothing sent twice")
}
