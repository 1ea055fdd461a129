package analytics

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/runtraffic"
)

// runsState is s's call_runs and run_tails as text (runtraffic.State).
func runsState(t *testing.T, s *Store) (runs, tails string) {
	t.Helper()
	runs, tails, err := runtraffic.State(context.Background(), s.DB())
	require.NoError(t, err)
	return runs, tails
}

// rebuiltState is s's runs and tails as kept (runsState), then those built
// from its stored calls at once, as the migration builds them.
func rebuiltState(t *testing.T, s *Store) (runs, tails, wantRuns, wantTails string) {
	t.Helper()
	ctx := context.Background()
	runs, tails = runsState(t, s)
	_, err := s.wconn.ExecContext(ctx, `DELETE FROM call_runs; DELETE FROM run_tails`)
	require.NoError(t, err)
	require.NoError(t, recordRuns(ctx, s.wconn, nil, "true"))
	wantRuns, wantTails = runsState(t, s)
	return runs, tails, wantRuns, wantTails
}

// sessionsFromIDs moves the sessions of evs, each wholly, into what a
// gateway that keeps no MCP session sends instead: a conversation id, a
// trace id (both attributes), or nothing but a gateway instance of its
// own (no agent either, so that the store derives none); a quarter of them
// each. The sessions by conversation and trace share the traffic's few
// gateways: filed under their gateway, their calls would mix.
func sessionsFromIDs(evs []audit.Event) {
	for i := range evs {
		e := &evs[i]
		if e.Session == "" {
			continue
		}
		switch hashID(e.Session) % 4 {
		case 0:
			e.Attrs = map[string]string{audit.AttrConversationID: e.Session}
		case 1:
			e.Attrs = map[string]string{audit.AttrTraceID: e.Session, "other": "x"}
		case 2:
			e.Agent, e.Gateway = "", "gw-"+e.Session
		default:
			continue
		}
		e.Session = ""
	}
}

// TestRunsIncremental: the runs kept batch by batch, whatever the batches,
// equal the runs the same stored calls give at once (as the migration
// builds them), and those of all the calls stored in one batch: in order in
// many small batches, and with the batches in a shuffled order, so that
// sessions receive calls earlier than their stored ones (late calls). Once
// with sessions derived by the store and calls sent twice (the batches go
// through recordRuns' SQL), once with every call's session given and each
// call sent once (most sessions go through the Go path), and with sessions
// of more grants than a batch's staging keeps apart (maxKeys).
func TestRunsIncremental(t *testing.T) {
	for _, c := range []struct {
		name                   string
		sessionless, redeliver bool
	}{{"derived sessions, calls sent twice", true, true}, {"sessions given, calls sent once", false, false},
		{"sessions from conversation, trace and gateway, calls sent once", false, false},
		{"sessions of more grants than a batch keeps apart, calls sent once", false, false}} {
		t.Run(c.name, func(t *testing.T) {
			evs, err := runtraffic.Generate(7, 12000, 36*time.Hour, time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), c.sessionless)
			require.NoError(t, err)
			if strings.HasPrefix(c.name, "sessions from") {
				sessionsFromIDs(evs)
			}
			if strings.HasPrefix(c.name, "sessions of more grants") {
				// Each session under one of 3*maxKeys grants: the calls
				// of the grants past maxKeys share the staging's chunks.
				for i := range evs {
					if evs[i].Session != "" {
						evs[i].Grant = fmt.Sprintf("g%03d", hashID(evs[i].Session)%(3*maxKeys))
					}
				}
			}
			checkRunsIncremental(t, evs, c.redeliver)
		})
	}
}

func checkRunsIncremental(t *testing.T, evs []audit.Event, redeliver bool) {
	ctx := context.Background()

	one := openTemp(t)
	_, err := one.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	require.Greater(t, count(t, one, `SELECT count(*) FROM call_runs WHERE polls >= 3`), 100, "the traffic has polling loops")
	require.Greater(t, count(t, one, `SELECT count(DISTINCT "grant") FROM call_runs`), 1, "runs of several grants")
	oneRuns, oneTails, wantRuns, wantTails := rebuiltState(t, one)
	t.Log("session start runs", count(t, one, `SELECT count(*) FROM call_runs WHERE prev_th IS NULL`))
	assert.Equal(t, wantRuns, oneRuns, "runs kept in one batch")
	assert.Equal(t, wantTails, oneTails, "tails kept in one batch")

	var batches [][]audit.Event
	for lo, size := 0, 1; lo < len(evs); lo, size = lo+size, size%97+13 {
		batch := evs[lo:min(lo+size, len(evs))]
		if redeliver && lo > 50 {
			batch = append(batch[:len(batch):len(batch)], evs[lo-50:lo-40]...) // redelivered calls: duplicates
		}
		batches = append(batches, batch)
	}
	inOrder := openTemp(t)
	for _, b := range batches {
		_, err := inOrder.Append(ctx, ingest.Batch{Events: b})
		require.NoError(t, err)
	}
	gotRuns, gotTails, _, _ := rebuiltState(t, inOrder)
	assert.Equal(t, wantRuns, gotRuns, "runs kept in order, batch by batch")
	assert.Equal(t, wantTails, gotTails, "tails kept in order, batch by batch")

	// Out of order, sessions are derived differently (SPEC §3): the runs
	// kept are compared with those of the same stored calls.
	shuffled := openTemp(t)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(batches), func(i, j int) { batches[i], batches[j] = batches[j], batches[i] })
	for _, b := range batches {
		_, err := shuffled.Append(ctx, ingest.Batch{Events: b})
		require.NoError(t, err)
	}
	gotRuns, gotTails, wantRuns, wantTails = rebuiltState(t, shuffled)
	assert.Equal(t, wantRuns, gotRuns, "runs kept with batches out of order")
	assert.Equal(t, wantTails, gotTails, "tails kept with batches out of order")
}

// TestRunsAtTheEdgesOfTheirDefinition: calls exactly the polling interval
// apart continue a run, a millisecond more ends it, within a batch and
// across two; calls of one millisecond are ordered as DuckDB orders them
// (by its hashes of tool and arguments), not by name. Stored batch by
// batch, the runs equal those built from the stored calls at once and the
// ones expected.
func TestRunsAtTheEdgesOfTheirDefinition(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	// Two tools whose names and hashes sort in opposite orders.
	var byHash []string
	rows, err := s.DB().QueryContext(ctx, `SELECT t FROM unnest(['get_task_status', 'list_vms', 'get_vm_status', 'list_nodes', 'vm_agent_exec_status']) u(t) ORDER BY hash(t)`)
	require.NoError(t, err)
	for rows.Next() {
		var tool string
		require.NoError(t, rows.Scan(&tool))
		byHash = append(byHash, tool)
	}
	require.NoError(t, rows.Err())
	var p, q string // q before p by hash, after it by name
	for i := range byHash {
		for j := i + 1; j < len(byHash); j++ {
			if byHash[i] > byHash[j] {
				q, p = byHash[i], byHash[j]
			}
		}
	}
	require.NotEmpty(t, q, "two tools in opposite orders among %v", byHash)
	t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	call := func(id, session, tool, args string, at time.Duration) audit.Event {
		return audit.Event{ID: id, TS: t0.Add(at), Server: "pve", Session: session, Tool: tool, ArgsHash: args, Decision: audit.Allowed}
	}
	first := []audit.Event{
		call("a1", "interval", "get_vm_status", "x", 0),
		call("a2", "interval", "get_vm_status", "x", time.Minute),                    // exactly the interval: continues
		call("a3", "interval", "get_vm_status", "x", 2*time.Minute+time.Millisecond), // a millisecond more: a new run
		call("a4", "interval", "get_vm_status", "x", 3*time.Minute+time.Millisecond), // with this one
		call("t1", "tie", p, "y", 0),
		call("t2", "tie", q, "z", 0), // same millisecond: q comes first, p between it and the next q
		call("t3", "tie", q, "z", 5*time.Second),
	}
	second := []audit.Event{
		call("a5", "interval", "get_vm_status", "x", 4*time.Minute+time.Millisecond), // continues across the batches
		call("a6", "interval", "get_vm_status", "x", 6*time.Minute),
	}
	for _, b := range [][]audit.Event{first, second} {
		_, err := s.Append(ctx, ingest.Batch{Events: b})
		require.NoError(t, err)
	}
	polls := func() string {
		var out string
		require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT coalesce(string_agg(polls::VARCHAR, ',' ORDER BY skh, t0), '') FROM call_runs`).Scan(&out))
		return out
	}
	// interval: a1-a2, then a3-a5; tie: none (q, p, q).
	assert.Equal(t, "2,3", polls(), "runs kept batch by batch")
	gotRuns, gotTails, wantRuns, wantTails := rebuiltState(t, s)
	assert.Equal(t, wantRuns, gotRuns)
	assert.Equal(t, wantTails, gotTails)
}
