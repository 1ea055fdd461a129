package recommend

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/audit"
	"github.com/mcptrail/mcptrail/ingest"
)

// versionScopes are the servers s00, s01, … newVersionScopes stores.
const versionScopes = 60

// newVersionScopes stores calls of versionScopes servers whose policy
// versions begin and end anywhere around the five-day window (from, to]
// it returns: a last day without a versioned call, a version first seen
// after the first day or at the window's very start, two versions in use
// in the last hour, two first seen at the same instant, calls without a
// version, calls on the window's bounds, versioned calls around the
// window only.
func newVersionScopes(t *testing.T) (db *sql.DB, from, to time.Time) {
	t.Helper()
	ctx := context.Background()
	from = time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	to = from.Add(5 * 24 * time.Hour)
	rng := rand.New(rand.NewPCG(3, 5))
	var evs []audit.Event
	add := func(server, version string, ts time.Time) {
		evs = append(evs, audit.Event{ID: fmt.Sprintf("v%d", len(evs)), TS: ts, Server: server, Tool: "t",
			Method: "tools/call", Decision: audit.Allowed, Grant: "g", Agent: "a", Session: "s", PolicyVersion: version})
	}
	// at is an instant from a day before the window to a day after it.
	at := func() time.Time {
		return from.Add(-24*time.Hour + time.Duration(rng.Int64N(int64(7*24*time.Hour))))
	}
	for i := range versionScopes {
		server := fmt.Sprintf("s%02d", i)
		if i%20 == 19 { // versioned calls around the window only
			add(server, "v1", from.Add(-time.Hour))
			add(server, "v1", to.Add(time.Hour))
			add(server, "", to.Add(-time.Hour))
			continue
		}
		if i%20 == 18 { // two versions first seen together, both in use at the end
			for _, version := range []string{"v5", "v3"} {
				for at := from.Add(50 * time.Hour); at.Before(to); at = at.Add(7 * time.Hour) {
					add(server, version, at)
				}
				add(server, version, to.Add(-10*time.Minute))
			}
			add(server, "v1", from.Add(time.Hour))
			continue
		}
		for v := range 1 + rng.IntN(3) {
			version := fmt.Sprintf("v%d", v)
			a, b := at(), at()
			if b.Before(a) {
				a, b = b, a
			}
			switch rng.IntN(6) {
			case 0: // ends more than a day before the window's end
				b = to.Add(-time.Duration(25+rng.IntN(48)) * time.Hour)
			case 1: // begins after the window's first day
				a = from.Add(time.Duration(25+rng.IntN(48)) * time.Hour)
			}
			for range 1 + rng.IntN(40) {
				if b.After(a) {
					add(server, version, a.Add(time.Duration(rng.Int64N(int64(b.Sub(a))))))
				}
			}
			add(server, version, a)
		}
		switch rng.IntN(5) {
		case 0: // the window's bounds: from is outside it, to inside
			add(server, "v9", from)
			add(server, "v8", to)
		case 1: // a second version first seen at the same instant as v0
			first := evs[len(evs)-1].TS
			add(server, "v7", first)
			add(server, "v7", first.Add(time.Hour))
		case 2:
			add(server, "", at()) // no version
		}
	}
	store := tempStore(t)
	_, err := store.Append(ctx, ingest.Batch{Events: evs})
	require.NoError(t, err)
	return store.DB(), from, to
}

// TestNewestVersionIsTheOneQuerys holds newestVersion, which reads the
// window's last and first days alone where it can, to the one query over
// every call of the window its comment gives, over the scopes of
// newVersionScopes.
func TestNewestVersionIsTheOneQuerys(t *testing.T) {
	ctx := context.Background()
	db, from, to := newVersionScopes(t)
	found, none := 0, 0
	for i := range versionScopes {
		q := query{server: fmt.Sprintf("s%02d", i)}
		var want *versionChange
		var w versionChange
		err := db.QueryRowContext(ctx, `
SELECT version, since FROM (
	SELECT policy_version AS version, min(ts) AS since, max(ts) AS last, max(max(ts)) OVER () AS newest FROM calls
	WHERE `+q.scopeLit()+` AND ts > `+sqlTime(from)+` AND ts <= `+sqlTime(to)+` AND policy_version IS NOT NULL
	GROUP BY ALL)
WHERE last > newest - INTERVAL 1 HOUR
ORDER BY since DESC, version LIMIT 1`).Scan(&w.version, &w.since)
		if !errors.Is(err, sql.ErrNoRows) {
			require.NoError(t, err)
			w.since = w.since.UTC()
			want = &w
			found++
		} else {
			none++
		}
		got, err := newestVersion(ctx, db, q.scopeLit(), from, to)
		require.NoError(t, err)
		assert.Equal(t, want, got, "scope %s", q.server)
	}
	assert.Greater(t, found, versionScopes/2)
	assert.Positive(t, none, "a scope without a versioned call in the window")
}

// TestLastVersionIsTheOneQuerys holds lastVersion, which reads the
// window's last day first, to one query over every call of the window,
// over the scopes of newVersionScopes.
func TestLastVersionIsTheOneQuerys(t *testing.T) {
	ctx := context.Background()
	db, from, to := newVersionScopes(t)
	found := 0
	for i := range versionScopes {
		q := query{db: db, server: fmt.Sprintf("s%02d", i), from: from, to: to}
		var want string
		err := db.QueryRowContext(ctx, `SELECT policy_version FROM calls WHERE `+q.windowLit()+
			` AND policy_version IS NOT NULL ORDER BY ts DESC, id DESC LIMIT 1`).Scan(&want)
		if !errors.Is(err, sql.ErrNoRows) {
			require.NoError(t, err)
			found++
		}
		got, err := q.lastVersion(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, got, "scope %s", q.server)
	}
	assert.Greater(t, found, versionScopes/2)
}
