package analytics

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// sessionOf reads back the session and its source of each stored event.
func sessionOf(t *testing.T, s *Store) map[string][2]string {
	t.Helper()
	rows, err := s.DB().Query(`SELECT id, coalesce(session, ''), coalesce(session_source, '') FROM calls`)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string][2]string{}
	for rows.Next() {
		var id, session, source string
		require.NoError(t, rows.Scan(&id, &session, &source))
		out[id] = [2]string{session, source}
	}
	require.NoError(t, rows.Err())
	return out
}

// TestDerivedSessions: calls without a session are grouped into runs of
// one agent, grant and gateway split at pauses longer than the gap, the
// same whether they arrive in one batch or many, across a restart.
func TestDerivedSessions(t *testing.T) {
	base := time.Date(2026, 11, 20, 9, 0, 0, 0, time.UTC)
	ev := func(id string, minutes int, agent, session string) audit.Event {
		e := audit.Event{ID: id, TS: base.Add(time.Duration(minutes) * time.Minute), Server: "srv", Tool: "list_vms",
			Method: "tools/call", Decision: audit.Allowed, Grant: "g", Gateway: "gw-1", Agent: agent, Session: session}
		return e
	}
	events := []audit.Event{
		ev("a1", 0, "bot", ""), ev("a2", 10, "bot", ""), ev("a3", 39, "bot", ""), // one run: pauses of 10 and 29 minutes
		ev("a4", 75, "bot", ""), ev("a5", 80, "bot", ""), // a pause of 36 minutes: a second run
		ev("b1", 5, "other", ""),             // another agent: its own run
		ev("s1", 20, "bot", "mcp-session-7"), // a protocol session is kept
		ev("n1", 30, "", ""),                 // no agent: left to the gateway fallback
	}
	conv := ev("c1", 31, "bot", "")
	conv.Attrs = map[string]string{audit.AttrConversationID: "conv-17", audit.AttrTraceID: "4bf92f35"}
	trace := ev("t1", 32, "bot", "")
	trace.Attrs = map[string]string{audit.AttrTraceID: "4bf92f35"}
	events = append(events, conv, trace)

	want := map[string][2]string{
		"a1": {"derived:a1", "derived"}, "a2": {"derived:a1", "derived"}, "a3": {"derived:a1", "derived"},
		"a4": {"derived:a4", "derived"}, "a5": {"derived:a4", "derived"},
		"b1": {"derived:b1", "derived"},
		"s1": {"mcp-session-7", "event"},
		"n1": {"", "gateway"},
		"c1": {"conversation:conv-17", "conversation"}, // before its trace
		"t1": {"trace:4bf92f35", "trace"},
	}
	t.Run("one batch", func(t *testing.T) {
		s := openTemp(t)
		_, err := s.Append(context.Background(), ingest.Batch{Events: events})
		require.NoError(t, err)
		assert.Equal(t, want, sessionOf(t, s))
	})
	t.Run("one event per batch, with a restart in the middle", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "d.duckdb")
		s, err := Open(context.Background(), path, Options{})
		require.NoError(t, err)
		for i, e := range events {
			if i == 2 { // between a2 and a3: the run must survive the restart
				require.NoError(t, s.Close())
				s, err = Open(context.Background(), path, Options{})
				require.NoError(t, err)
			}
			_, err := s.Append(context.Background(), ingest.Batch{Events: []audit.Event{e}})
			require.NoError(t, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		assert.Equal(t, want, sessionOf(t, s))
		// A late event from before the current run does not move it back.
		_, err = s.Append(context.Background(), ingest.Batch{Events: []audit.Event{ev("late", 1, "bot", "")}})
		require.NoError(t, err)
		assert.Equal(t, 1, count(t, s, `SELECT count(*) FROM derived_sessions WHERE agent = 'bot' AND session = 'derived:a4'`))
	})
	t.Run("the gap is a setting", func(t *testing.T) {
		s, err := Open(context.Background(), filepath.Join(t.TempDir(), "g.duckdb"), Options{SessionGap: 40 * time.Minute})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		_, err = s.Append(context.Background(), ingest.Batch{Events: events})
		require.NoError(t, err)
		got := sessionOf(t, s)
		assert.Equal(t, "derived:a1", got["a5"][0], "a pause of 36 minutes is within a gap of 40")
	})
	t.Run("a duplicate is not derived twice", func(t *testing.T) {
		s := openTemp(t)
		for range 2 {
			_, err := s.Append(context.Background(), ingest.Batch{Events: events})
			require.NoError(t, err)
		}
		assert.Equal(t, len(events), count(t, s, `SELECT count(*) FROM calls`))
		assert.Equal(t, want, sessionOf(t, s))
	})
}

// TestSessionSourceMigration: rows stored before session sources existed
// get one from what they carry.
func TestSessionSourceMigration(t *testing.T) {
	s := openTemp(t)
	_, err := s.Append(context.Background(), ingest.Batch{Events: sampleEvents(4, time.Now())})
	require.NoError(t, err)
	conn := s.wconn
	_, err = conn.ExecContext(context.Background(), `UPDATE calls SET session_source = NULL`)
	require.NoError(t, err)
	_, err = conn.ExecContext(context.Background(), backfillSessionSource)
	require.NoError(t, err)
	assert.Equal(t, 4, count(t, s, `SELECT count(*) FROM calls WHERE session_source = 'event'`))
}
