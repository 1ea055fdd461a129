package simulate

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
)

// TestLoopsPlantsItsGroundTruth finds every planted item in the stream, and
// nothing else that looks like one.
func TestLoopsPlantsItsGroundTruth(t *testing.T) {
	truth := LoopsTruth
	evs, _ := collect(t, Options{Scenario: "loops", Seed: 5, Now: testNow})
	sessions := bySession(evs)
	at := func(ago time.Duration) time.Time { return testNow.Add(-ago) }
	planted := map[string]bool{}

	checkLoop := func(t *testing.T, l PlantedLoop) {
		planted[l.Session] = true
		s := sessions[l.Session]
		require.Len(t, s, l.Polls+2, "start, polls, closing read")
		assert.Equal(t, l.StartTool, s[0].Tool)
		assert.Equal(t, at(l.Ago), s[0].TS)
		assert.Equal(t, l.Agent, s[0].Agent)
		assert.Equal(t, l.Grant, s[0].Grant)
		lo := time.Duration(float64(l.Interval)*(1-l.Jitter)) - time.Millisecond
		hi := time.Duration(float64(l.Interval) * (1 + l.Jitter))
		for i, e := range s[1 : l.Polls+1] {
			assert.Equal(t, l.PollTool, e.Tool)
			assert.Equal(t, s[1].ArgsHash, e.ArgsHash)
			assert.Equal(t, audit.Allowed, e.Decision)
			assert.Equal(t, "ok", e.Status)
			d := e.TS.Sub(s[i].TS)
			assert.True(t, d >= lo && d <= hi, "interval %s outside [%s, %s]", d, lo, hi)
		}
		assert.NotEqual(t, l.PollTool, s[l.Polls+1].Tool)
	}
	for _, pair := range truth.Polling {
		require.NotEmpty(t, pair.Loops)
		for _, l := range pair.Loops {
			assert.Equal(t, pair.StartTool, l.StartTool)
			assert.Equal(t, pair.PollTool, l.PollTool)
			checkLoop(t, l)
		}
	}
	assert.ElementsMatch(t, [][2]string{{"vm_agent_exec", "vm_agent_exec_status"}, {"clone_vm", "get_task_status"}},
		[][2]string{{truth.Polling[0].StartTool, truth.Polling[0].PollTool}, {truth.Polling[1].StartTool, truth.Polling[1].PollTool}})

	require.NotEmpty(t, truth.Runaway)
	for _, l := range truth.Runaway {
		checkLoop(t, l)
		for _, pair := range truth.Polling {
			if pair.PollTool == l.PollTool {
				polls := pair.PollCounts()
				slices.Sort(polls)
				p95 := polls[(len(polls)*95+99)/100-1]
				assert.Greater(t, l.Polls, 3*p95, "runaway by SPEC's default factor")
			}
		}
	}

	for _, st := range truth.RetryStorms {
		planted[st.Session] = true
		s := sessions[st.Session]
		require.Len(t, s, st.Calls+1)
		assert.Equal(t, "get_vm_status", s[0].Tool)
		assert.Equal(t, at(st.Ago), s[1].TS)
		for i, e := range s[1:] {
			assert.Equal(t, st.Tool, e.Tool)
			assert.Equal(t, s[1].ArgsHash, e.ArgsHash)
			assert.Equal(t, "error", e.Status)
			require.NotNil(t, e.ErrorCode)
			assert.Equal(t, st.ErrorCode, *e.ErrorCode)
			if i > 0 {
				assert.LessOrEqual(t, e.TS.Sub(s[i].TS), time.Duration(float64(st.Interval)*(1+st.Jitter)))
			}
		}
	}

	for _, pr := range truth.DeniedProbes {
		planted[pr.Session] = true
		s := sessions[pr.Session]
		require.Len(t, s, len(pr.Calls))
		assert.Equal(t, at(pr.Ago), s[0].TS)
		assert.LessOrEqual(t, s[len(s)-1].TS.Sub(s[0].TS), pr.Within)
		for i, c := range pr.Calls {
			assert.Equal(t, c.Tool, s[i].Tool)
			assert.Equal(t, c.Decision, s[i].Decision, c.Tool)
		}
	}

	for _, c := range append(slices.Clone(truth.RareRisky), truth.UsedOnce, truth.Unknown) {
		planted[c.Session] = true
		var calls []audit.Event
		for _, e := range evs {
			if e.Tool == c.Tool {
				calls = append(calls, e)
			}
		}
		require.Len(t, calls, c.Calls, c.Tool)
		assert.Equal(t, at(c.Ago), calls[0].TS, c.Tool)
		for _, e := range calls {
			assert.Equal(t, c.Session, e.Session)
			assert.Equal(t, c.Decision, e.Decision)
			if c.Decision == audit.Allowed {
				assert.Equal(t, "ok", e.Status)
			}
		}
	}
	assert.Equal(t, 20*day, truth.UsedOnce.Ago)

	// Nothing else in the stream looks like a loop, a storm or a probe, and
	// the background only reads.
	for _, r := range runs(evs, 3) {
		assert.True(t, planted[r.session], "unplanted streak of %d %s after %s", len(r.calls), r.tool(), r.start.Tool)
	}
	for _, e := range evs {
		if planted[e.Session] {
			continue
		}
		require.Equal(t, audit.Allowed, e.Decision, e.ID)
		require.Equal(t, catRead, tools[e.Tool].cat, e.Tool)
		require.NotContains(t, []string{"get_task_status", "vm_agent_exec_status", "get_node_report"}, e.Tool)
	}
}

// TestLoopsTruthIgnoresTheSeed: another seed changes the background, never
// the planted sessions.
func TestLoopsTruthIgnoresTheSeed(t *testing.T) {
	strip := func(evs []audit.Event) map[string][]audit.Event {
		m := bySession(evs)
		for id, s := range m {
			for i := range s {
				s[i].ID = ""
			}
			m[id] = s
		}
		return m
	}
	a, _ := collect(t, Options{Scenario: "loops", Seed: 1, Now: testNow, Duration: 30 * day})
	b, _ := collect(t, Options{Scenario: "loops", Seed: 2, Now: testNow})
	sa, sb := strip(a), strip(b)
	ids := []string{truth().RetryStorms[0].Session, truth().DeniedProbes[0].Session, truth().UsedOnce.Session, truth().Unknown.Session}
	for _, p := range truth().Polling {
		for _, l := range p.Loops {
			ids = append(ids, l.Session)
		}
	}
	for _, l := range truth().Runaway {
		ids = append(ids, l.Session)
	}
	for _, id := range ids {
		require.NotEmpty(t, sa[id])
		assert.Equal(t, sa[id], sb[id])
	}
	assert.NotEqual(t, len(a), len(b), "the background differs")
}

func truth() LoopsGroundTruth { return LoopsTruth }
