package analytics

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// TestTailsOfSessionsThatComeBack: sessions that come back days after
// their last call, older than the recent tails a batch reads first, find
// their stored tail (the store's tail keys hold theirs, and the whole table
// is read for them): their new run starts from their stored last call,
// their old tail is replaced, and the runs and tails kept equal those
// rebuilt from the stored calls. Also with the store reopened before they
// come back (the keys read again from the table), and with their first
// tail stored by recordRuns' SQL (a batch with a redelivered call), whose
// recomputed sessions' keys are added.
func TestTailsOfSessionsThatComeBack(t *testing.T) {
	for _, c := range []struct {
		name           string
		reopen, viaSQL bool
	}{{"kept open", false, false}, {"reopened", true, false}, {"first tails stored by SQL", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			path := filepath.Join(t.TempDir(), "t.duckdb")
			s, err := Open(ctx, path, Options{})
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			t0 := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
			call := func(id, session, tool string, at time.Duration) audit.Event {
				return audit.Event{ID: id, TS: t0.Add(at), Server: "pve", Grant: "ops", Session: session, Tool: tool, ArgsHash: "x", Decision: audit.Allowed}
			}
			appendBatch := func(evs ...audit.Event) {
				t.Helper()
				_, err := s.Append(ctx, ingest.Batch{Events: evs})
				require.NoError(t, err)
			}
			first := []audit.Event{
				call("b1", "back", "vm_agent_exec", 0),
				call("b2", "back", "vm_agent_exec_status", 10*time.Second),
				call("b3", "back", "vm_agent_exec_status", 20*time.Second),
				call("g1", "gone", "get_task_status", 0),
				call("g2", "gone", "get_task_status", 30*time.Second),
			}
			// A first batch: the store reads the keys (none yet) and stores
			// one tail; the sessions above are added to the keys after.
			appendBatch(call("z1", "zero", "get_vm_status", -time.Hour))
			if c.viaSQL {
				appendBatch(first[0]) // a batch of the Go path
				appendBatch(first...) // b1 again: the whole batch goes through SQL
			} else {
				appendBatch(first...)
			}
			// Days of other sessions: the first ones' tails grow old.
			for d := 1; d <= 3; d++ {
				day := time.Duration(d) * 24 * time.Hour
				var evs []audit.Event
				for i := range 20 {
					evs = append(evs, call(fmt.Sprintf("f%d-%d", d, i), fmt.Sprintf("other-%d-%d", d, i%4), "get_vm_status", day+time.Duration(i)*time.Second))
				}
				appendBatch(evs...)
			}
			if c.reopen {
				require.NoError(t, s.Close())
				s, err = Open(ctx, path, Options{})
				require.NoError(t, err)
			}
			back := 4 * 24 * time.Hour
			appendBatch(
				call("b4", "back", "vm_agent_exec_status", back),
				call("b5", "back", "vm_agent_exec_status", back+10*time.Second),
				call("g3", "gone", "get_task_status", back+time.Minute),
				call("n1", "new", "get_task_status", back),
				call("n2", "new", "get_task_status", back+5*time.Second),
			)
			var prev time.Time
			require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT prev_ts FROM call_runs WHERE polls = 2 AND t0 = ? AND skh = hash('back')`,
				t0.Add(back).UnixMilli()).Scan(&prev))
			assert.Equal(t, t0.Add(20*time.Second), prev.UTC(), "the run that comes back starts from the stored last call")
			var tails, sessions int
			require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT count(*), count(DISTINCT pk) FROM run_tails`).Scan(&tails, &sessions))
			assert.Equal(t, sessions, tails, "one tail per session")

			gotRuns, gotTails, wantRuns, wantTails := rebuiltState(t, s)
			assert.Equal(t, wantRuns, gotRuns, "runs kept against rebuilt")
			assert.Equal(t, wantTails, gotTails, "tails kept against rebuilt")
		})
	}
}

// TestTailKeysMerge: the keys read from run_tails and those added since,
// before and after the added ones are merged into the sorted ones, are
// exactly the keys stored.
func TestTailKeysMerge(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	_, err := s.wconn.ExecContext(ctx, `INSERT INTO run_tails SELECT hash(i), 0, NULL, NULL, TIMESTAMPTZ '2026-11-01 00:00:00+00', 1, 2 FROM range(1000) r(i)`)
	require.NoError(t, err)
	var k tailKeys
	assert.True(t, k.has(42), "keys not read yet may be anything")
	require.NoError(t, k.use(ctx, s.wconn))
	stored := map[uint64]bool{}
	rows, err := s.DB().QueryContext(ctx, `SELECT hash(i) FROM range(1000) r(i)`)
	require.NoError(t, err)
	for rows.Next() {
		var pk uint64
		require.NoError(t, rows.Scan(&pk))
		stored[pk] = true
	}
	require.NoError(t, rows.Err())
	rows.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 3 << 16 { // three merges
		pk := rng.Uint64()
		k.add(pk)
		stored[pk] = true
		if i == 1<<16-2 {
			require.NotEmpty(t, k.recent, "not merged yet")
		}
	}
	require.Len(t, k.sorted, 1000+3<<16, "merged")
	require.True(t, slices.IsSorted(k.sorted))
	for pk := range stored {
		require.True(t, k.has(pk))
	}
	for range 10000 {
		pk := rng.Uint64()
		require.Equal(t, stored[pk], k.has(pk), "a key never stored")
	}
}
