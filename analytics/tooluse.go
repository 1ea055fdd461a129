package analytics

import (
	"context"
	"database/sql"
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/cespare/xxhash/v2"
	"golang.org/x/sync/errgroup"
)

// tool_day_use holds, per server, grant (empty for calls without one), tool
// and UTC day with a call, what the recommender's tool usage counts of the
// day's calls: calls by decision, those whose session the event carries
// and those with an agent, its first call, first and last allowed call and
// last refused call (what the view tool_days reads, migration 17), and the
// day's sessions and sessions with an allowed call as sets: sessions holds the
// SessionHash of each session key, sorted, 8 bytes each, little-endian;
// allowed_sessions one bit per session of sessions, in its order (bit i%8
// of byte i/8), set for those with an allowed call. A window's usage then reads a
// row per tool and day and merges sets of sessions in Go, instead of
// grouping every call of the window by tool and session (~1M groups over
// 5M calls: the costliest query of a recommendation).
//
// It is kept in the transaction that stores the calls; a day the archive
// restores is counted again from its calls, and a day storage.retention
// deletes keeps its rows, which a window reaching into the archive reads
// (a window within the retention never holds such a day). A key may have
// several rows, one per batch that stored calls of it: readers add them
// up, and Recluster merges a sealed day's into one. tool_day_use_from
// holds the first day it covers: migration 10 counted the stored calls,
// so the days the retention had deleted before it are read from the calls
// (the archive's, then).
const toolDayUseSchema = `
CREATE TABLE tool_day_use (
	server           VARCHAR NOT NULL,
	"grant"          VARCHAR NOT NULL,
	tool             VARCHAR NOT NULL,
	day              BIGINT NOT NULL,
	calls            BIGINT NOT NULL,
	allowed          BIGINT NOT NULL,
	denied           BIGINT NOT NULL,
	hidden           BIGINT NOT NULL,
	rate_limited     BIGINT NOT NULL,
	approval         BIGINT NOT NULL,
	with_session     BIGINT NOT NULL,
	with_agent       BIGINT NOT NULL,
	last_allowed     TIMESTAMPTZ,
	sessions         BLOB NOT NULL,
	allowed_sessions BLOB NOT NULL,
	first_call       TIMESTAMPTZ,
	first_allowed    TIMESTAMPTZ,
	last_refused     TIMESTAMPTZ
);
CREATE TABLE tool_day_use_from (day BIGINT NOT NULL);
INSERT INTO tool_day_use_from
SELECT coalesce(max("date" - DATE '1970-01-01') + 1, 0) FROM archive_days WHERE deleted_at IS NOT NULL;`

// SessionHash identifies a session key in tool_day_use's sets: a 64-bit
// hash, as DuckDB's hash() identifies sessions elsewhere (the chance that
// two of a million sessions share one is about 3 in 100 million).
func SessionHash(key string) uint64 { return xxhash.Sum64String(key) }

// UseCounts are a tool's calls counted by decision: a tool_day_use row's
// counts, or some of them.
type UseCounts struct {
	Calls, Allowed, Denied, Hidden, RateLimited, Approval int64
	WithSession, WithAgent                                int64
	// LastAllowed is the last allowed call's time in microseconds since
	// the epoch, 0 when none.
	LastAllowed int64
}

func (c *UseCounts) add(o UseCounts) {
	c.Calls += o.Calls
	c.Allowed += o.Allowed
	c.Denied += o.Denied
	c.Hidden += o.Hidden
	c.RateLimited += o.RateLimited
	c.Approval += o.Approval
	c.WithSession += o.WithSession
	c.WithAgent += o.WithAgent
	c.LastAllowed = max(c.LastAllowed, o.LastAllowed)
}

// dayTimes are the times of a tool day that tool_days reads from its
// tool_day_use rows: its first call, first and last allowed call and last
// refused call (not allowed). Unlike UseCounts.LastAllowed (0 for none,
// what WindowUse reads), each says whether it is set: a call may be at the
// epoch or before it.
type dayTimes struct {
	firstCall, firstAllowed, lastAllowed, lastRefused instant
}

// call counts a call at us.
func (t *dayTimes) call(us int64, allowed bool) {
	at := instant{us: us, set: true}
	t.firstCall = t.firstCall.earliest(at)
	if allowed {
		t.firstAllowed = t.firstAllowed.earliest(at)
		t.lastAllowed = t.lastAllowed.latest(at)
	} else {
		t.lastRefused = t.lastRefused.latest(at)
	}
}

func (t *dayTimes) add(o dayTimes) {
	t.firstCall = t.firstCall.earliest(o.firstCall)
	t.firstAllowed = t.firstAllowed.earliest(o.firstAllowed)
	t.lastAllowed = t.lastAllowed.latest(o.lastAllowed)
	t.lastRefused = t.lastRefused.latest(o.lastRefused)
}

// instant is a time in microseconds since the epoch, if set; it scans
// a BIGINT or NULL (unset).
type instant struct {
	us  int64
	set bool
}

// earliest is the earlier of a and b, either if only one is set.
func (a instant) earliest(b instant) instant {
	if !a.set || b.set && b.us < a.us {
		return b
	}
	return a
}

// latest is the later of a and b, either if only one is set.
func (a instant) latest(b instant) instant {
	if !a.set || b.set && b.us > a.us {
		return b
	}
	return a
}

// Scan implements sql.Scanner.
func (a *instant) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*a = instant{}
	case int64:
		*a = instant{us: v, set: true}
	default:
		return fmt.Errorf("a time in microseconds: unexpected %T", src)
	}
	return nil
}

// DayUse is a tool_day_use row's figures: one day's, or, summed with Add,
// several rows'.
type DayUse struct {
	UseCounts
	// Sessions and AllowedSessions are sets of SessionHash, sorted and
	// distinct once Normalize has run.
	Sessions, AllowedSessions []uint64
	// times are kept for tool_days: set as tool_day_use's rows are
	// counted, not as WindowUse reads them.
	times dayTimes
}

// count adds calls of one session key, "" for calls without one.
func (u *DayUse) count(key string, c UseCounts) {
	u.add(c)
	if key == "" {
		return
	}
	h := SessionHash(key)
	u.Sessions = append(u.Sessions, h)
	if c.Allowed > 0 {
		u.AllowedSessions = append(u.AllowedSessions, h)
	}
}

// Add adds another row's figures (its sets not yet normalized is fine).
func (u *DayUse) Add(o *DayUse) {
	u.add(o.UseCounts)
	u.times.add(o.times)
	u.Sessions = append(u.Sessions, o.Sessions...)
	u.AllowedSessions = append(u.AllowedSessions, o.AllowedSessions...)
}

// Normalize sorts the sets and drops repeats.
func (u *DayUse) Normalize() {
	slices.Sort(u.Sessions)
	u.Sessions = slices.Compact(u.Sessions)
	slices.Sort(u.AllowedSessions)
	u.AllowedSessions = slices.Compact(u.AllowedSessions)
}

// countCall counts one call (its decision, whether its event carried its
// session and whether it has an agent, at µs).
func countCall(decision string, ownSession, agent bool, us int64) UseCounts {
	c := UseCounts{Calls: 1}
	switch decision {
	case "allowed":
		c.Allowed, c.LastAllowed = 1, us
	case "denied":
		c.Denied = 1
	case "hidden":
		c.Hidden = 1
	case "rate_limited":
		c.RateLimited = 1
	case "approval_required":
		c.Approval = 1
	}
	if ownSession {
		c.WithSession = 1
	}
	if agent {
		c.WithAgent = 1
	}
	return c
}

// useGroupsSQL counts the calls of tools that where selects per server,
// grant, tool, day and session key, in readUseGroups' columns: with times,
// then their dayTimes too.
func useGroupsSQL(where string, times bool) string {
	timesColumns := ""
	if times {
		timesColumns = `,
       epoch_us(min(ts)), epoch_us(min(ts) FILTER (decision = 'allowed')),
       epoch_us(max(ts) FILTER (decision = 'allowed')), epoch_us(max(ts) FILTER (decision <> 'allowed'))`
	}
	return `
SELECT server, coalesce("grant", ''), tool, epoch_ms(ts) // 86400000, ` + SessionKey + `,
       count(*), count(*) FILTER (decision = 'allowed'), count(*) FILTER (decision = 'denied'),
       count(*) FILTER (decision = 'hidden'), count(*) FILTER (decision = 'rate_limited'),
       count(*) FILTER (decision = 'approval_required'), count(*) FILTER (session_source = 'event'),
       count(*) FILTER (agent IS NOT NULL), coalesce(epoch_us(max(ts) FILTER (decision = 'allowed')), 0)` + timesColumns + `
FROM calls WHERE tool IS NOT NULL AND (` + where + `)
GROUP BY ALL`
}

// readUseGroups counts into uses the calls of tools that where (with args)
// selects, and with times their dayTimes.
func readUseGroups(ctx context.Context, q execQuerier, uses map[toolDayKey]*DayUse, times bool, where string, args ...any) error {
	rows, err := q.QueryContext(ctx, useGroupsSQL(where, times), args...)
	if err != nil {
		return fmt.Errorf("tool day use: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k toolDayKey
		var key string
		var c UseCounts
		var t dayTimes
		dest := []any{&k.server, &k.grant, &k.tool, &k.day, &key, &c.Calls, &c.Allowed, &c.Denied, &c.Hidden,
			&c.RateLimited, &c.Approval, &c.WithSession, &c.WithAgent, &c.LastAllowed}
		if times {
			dest = append(dest, &t.firstCall, &t.firstAllowed, &t.lastAllowed, &t.lastRefused)
		}
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("tool day use: %w", err)
		}
		u := uses[k]
		if u == nil {
			u = &DayUse{}
			uses[k] = u
		}
		u.count(key, c)
		u.times.add(t)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("tool day use: %w", err)
	}
	return nil
}

// recordToolDayUse adds to tool_day_use the calls of tools that where
// (with args) selects, on conn inside the caller's transaction.
func recordToolDayUse(ctx context.Context, conn *sql.Conn, where string, args ...any) error {
	uses := map[toolDayKey]*DayUse{}
	if err := readUseGroups(ctx, conn, uses, true, where, args...); err != nil {
		return err
	}
	v := &arrowViews{ctx: ctx, conn: conn}
	defer v.close()
	return appendToolDayUse(v, uses)
}

// recountToolDayUse counts server's day in tool_day_use again from its
// calls: after the archive restored them.
func recountToolDayUse(ctx context.Context, conn *sql.Conn, server string, day time.Time) error {
	d, _ := ToolDay(day)
	if _, err := conn.ExecContext(ctx, `DELETE FROM tool_day_use WHERE server = ? AND day = ?`, server, d); err != nil {
		return fmt.Errorf("tool day use: %w", err)
	}
	return recordToolDayUse(ctx, conn, dayWhere(server, day))
}

// appendToolDayUse adds uses (a batch's, or whole days counted from their
// calls) to tool_day_use as rows of their own, through an Arrow view (a
// statement with a parameter per value took ~0.1 s a batch to bind): a
// key already stored gets a second row, which readers add up (WindowUse)
// and Recluster merges into one once its day is sealed
// (compactToolDayUse). Merging as batches arrive read the stored rows back
// and rewrote them: ~30–70 ms a batch.
func appendToolDayUse(v *arrowViews, uses map[toolDayKey]*DayUse) error {
	if len(uses) == 0 {
		return nil
	}
	mem := v.allocator()
	strs := [3]*array.StringBuilder{array.NewStringBuilder(mem), array.NewStringBuilder(mem), array.NewStringBuilder(mem)}
	var ints [9]*array.Int64Builder
	for i := range ints {
		ints[i] = array.NewInt64Builder(mem)
	}
	// last_allowed, then first_call, first_allowed and last_refused: the
	// row's times (dayTimes), every row appended has them.
	var times [4]*array.TimestampBuilder
	for i := range times {
		times[i] = array.NewTimestampBuilder(mem, tsType)
	}
	blobs := [2]*array.BinaryBuilder{array.NewBinaryBuilder(mem, arrow.BinaryTypes.Binary), array.NewBinaryBuilder(mem, arrow.BinaryTypes.Binary)}
	for k, u := range uses {
		u.Normalize()
		strs[0].Append(k.server)
		strs[1].Append(k.grant)
		strs[2].Append(k.tool)
		for i, v := range []int64{k.day, u.Calls, u.Allowed, u.Denied, u.Hidden, u.RateLimited, u.Approval, u.WithSession, u.WithAgent} {
			ints[i].Append(v)
		}
		for i, at := range []instant{u.times.lastAllowed, u.times.firstCall, u.times.firstAllowed, u.times.lastRefused} {
			if at.set {
				times[i].Append(arrow.Timestamp(at.us))
			} else {
				times[i].AppendNull()
			}
		}
		blobs[0].Append(packSessions(u.Sessions))
		blobs[1].Append(packAllowed(u.Sessions, u.AllowedSessions))
	}
	fields := []arrow.Field{{Name: "server", Type: arrow.BinaryTypes.String}, {Name: "g", Type: arrow.BinaryTypes.String}, {Name: "tool", Type: arrow.BinaryTypes.String}}
	builders := []array.Builder{strs[0], strs[1], strs[2]}
	for i, name := range []string{"day", "calls", "allowed", "denied", "hidden", "rate_limited", "approval", "with_session", "with_agent"} {
		fields = append(fields, arrow.Field{Name: name, Type: arrow.PrimitiveTypes.Int64})
		builders = append(builders, ints[i])
	}
	fields = append(fields, arrow.Field{Name: "last_allowed", Type: tsType, Nullable: true},
		arrow.Field{Name: "sessions", Type: arrow.BinaryTypes.Binary}, arrow.Field{Name: "allowed_sessions", Type: arrow.BinaryTypes.Binary},
		arrow.Field{Name: "first_call", Type: tsType, Nullable: true}, arrow.Field{Name: "first_allowed", Type: tsType, Nullable: true},
		arrow.Field{Name: "last_refused", Type: tsType, Nullable: true})
	builders = append(builders, times[0], blobs[0], blobs[1], times[1], times[2], times[3])
	names, err := v.add(arrow.NewSchema(fields, nil), "tool_day_use_new", 1, builders...)
	if err != nil {
		return err
	}
	if _, err := v.conn.ExecContext(v.ctx, `INSERT INTO tool_day_use SELECT * FROM `+names[0]); err != nil {
		return fmt.Errorf("tool day use: %w", err)
	}
	return nil
}

// compactToolDayUse merges the rows of each key with several in the days
// of [from, to) into one, on conn inside the caller's transaction.
func compactToolDayUse(ctx context.Context, conn *sql.Conn, from, to time.Time) error {
	d0, _ := ToolDay(from)
	d1, _ := ToolDay(to.Add(-time.Microsecond))
	const repeated = `day BETWEEN $d0 AND $d1 AND (server, "grant", tool, day) IN (
	SELECT (server, "grant", tool, day) FROM tool_day_use WHERE day BETWEEN $d0 AND $d1 GROUP BY ALL HAVING count(*) > 1)`
	args := []any{sql.Named("d0", d0), sql.Named("d1", d1)}
	rows, err := conn.QueryContext(ctx, `SELECT server, "grant", tool, day, `+dayUseColumns+`, `+dayTimesColumns+` FROM tool_day_use WHERE `+repeated, args...)
	if err != nil {
		return fmt.Errorf("compact tool day use: %w", err)
	}
	uses := map[toolDayKey]*DayUse{}
	for rows.Next() {
		var k toolDayKey
		u := &DayUse{}
		if err := scanDayUse(rows, u, []any{&k.server, &k.grant, &k.tool, &k.day}, &u.times.firstCall, &u.times.firstAllowed, &u.times.lastAllowed, &u.times.lastRefused); err != nil {
			rows.Close()
			return err
		}
		if w := uses[k]; w != nil {
			w.Add(u)
		} else {
			uses[k] = u
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("compact tool day use: %w", err)
	}
	if len(uses) == 0 {
		return nil
	}
	if _, err := conn.ExecContext(ctx, `DELETE FROM tool_day_use WHERE `+repeated, args...); err != nil {
		return fmt.Errorf("compact tool day use: %w", err)
	}
	v := &arrowViews{ctx: ctx, conn: conn}
	defer v.close()
	return appendToolDayUse(v, uses)
}

// dayUseColumns are tool_day_use's figures, in scanDayUse's order.
const dayUseColumns = `calls, allowed, denied, hidden, rate_limited, approval, with_session, with_agent,
       coalesce(epoch_us(last_allowed), 0), sessions, allowed_sessions`

// dayTimesColumns are a tool_day_use row's times (dayTimes), which only
// tool_days reads: the first call, first and last allowed call and last
// refused call, NULL for none (a row stored before migration 17 has only
// its last_allowed).
const dayTimesColumns = `epoch_us(first_call), epoch_us(first_allowed), epoch_us(last_allowed), epoch_us(last_refused)`

// scanDayUse reads dayUseColumns into u, after the columns given first
// and before those given after.
func scanDayUse(rows *sql.Rows, u *DayUse, first []any, after ...any) error {
	var sessions, allowed []byte
	if err := rows.Scan(slices.Concat(first, []any{&u.Calls, &u.Allowed, &u.Denied, &u.Hidden, &u.RateLimited, &u.Approval,
		&u.WithSession, &u.WithAgent, &u.LastAllowed, &sessions, &allowed}, after)...); err != nil {
		return fmt.Errorf("tool day use: %w", err)
	}
	u.setSessions(sessions, allowed)
	return nil
}

// dayUseKinds are the kinds of the columns of a query of grant, tool and
// dayUseColumns, for ScanChunks and readDayUse.
var dayUseKinds = []ColumnKind{VarcharColumn, VarcharColumn,
	Int64Column, Int64Column, Int64Column, Int64Column, Int64Column, Int64Column, Int64Column, Int64Column,
	Int64Column, BlobColumn, BlobColumn}

// readDayUse reads dayUseColumns, from column first on, of a chunk's row.
func readDayUse(c *Chunk, first, row int) *DayUse {
	col := func(i int) int64 { return c.Int64(first + i)[row] }
	u := &DayUse{UseCounts: UseCounts{Calls: col(0), Allowed: col(1), Denied: col(2), Hidden: col(3), RateLimited: col(4),
		Approval: col(5), WithSession: col(6), WithAgent: col(7), LastAllowed: col(8)}}
	u.setSessions(c.Bytes(first+9, row), c.Bytes(first+10, row))
	return u
}

// setSessions unpacks a row's sets: its sessions' blob, and the bits
// that mark the allowed ones among them (packAllowed).
//
// Each set gets one allocation of its size: a window's rows hold ~1M
// hashes, and grown by append they took twice the memory, each new page of
// it a page fault.
func (u *DayUse) setSessions(sessions, allowed []byte) {
	u.Sessions = unpackSessions(u.Sessions, sessions)
	n := 0
	for _, b := range allowed {
		n += bits.OnesCount8(b)
	}
	u.AllowedSessions = slices.Grow(u.AllowedSessions, n)
	for i, h := range u.Sessions {
		if i/8 < len(allowed) && allowed[i/8]&(1<<(i%8)) != 0 {
			u.AllowedSessions = append(u.AllowedSessions, h)
		}
	}
}

// packAllowed marks, one bit per session of sessions (both sorted and
// distinct), those in allowed: a second list of hashes would double what
// a window's read moves, for sets that are nearly the same.
func packAllowed(sessions, allowed []uint64) []byte {
	b := make([]byte, (len(sessions)+7)/8)
	j := 0
	for i, h := range sessions {
		for j < len(allowed) && allowed[j] < h {
			j++
		}
		if j < len(allowed) && allowed[j] == h {
			b[i/8] |= 1 << (i % 8)
		}
	}
	return b
}

// packSessions is a set as its blob.
func packSessions(set []uint64) []byte {
	b := make([]byte, 8*len(set))
	for i, h := range set {
		binary.LittleEndian.PutUint64(b[8*i:], h)
	}
	return b
}

// unpackSessions appends a blob's set to set.
func unpackSessions(set []uint64, b []byte) []uint64 {
	set = slices.Grow(set, len(b)/8)
	for i := 0; i+8 <= len(b); i += 8 {
		set = append(set, binary.LittleEndian.Uint64(b[i:]))
	}
	return set
}

// ToolUse is one tool's use in a window (WindowUse): a DayUse's counts
// over its days, and how many distinct sessions used it, and used it
// allowed (the sets themselves are left out).
type ToolUse struct {
	DayUse
	SessionCount, AllowedSessionCount int64
}

// WindowUse is every tool's use in the window (from, to] of server (and
// of grant, unless it is ""), by grant when byGrant is set (else every
// row under ""): the days wholly inside the window from tool_day_use, the
// window's first and last days from their calls. A window that starts at
// midnight takes its first day from tool_day_use too when no call of the
// scope is at that very instant (the only one of the day outside it).
func WindowUse(ctx context.Context, q *sql.DB, server, grant string, from, to time.Time, byGrant bool) (map[string]map[string]*ToolUse, error) {
	type part struct {
		u                 *DayUse
		sessions, allowed [][]uint64 // each day's set, counted at the end
	}
	parts := map[string]map[string]*part{}
	add := func(k toolDayKey, u *DayUse) {
		g := ""
		if byGrant {
			g = k.grant
		}
		if parts[g] == nil {
			parts[g] = map[string]*part{}
		}
		p := parts[g][k.tool]
		if p == nil {
			p = &part{u: &DayUse{}}
			parts[g][k.tool] = p
		}
		p.sessions, p.allowed = append(p.sessions, u.Sessions), append(p.allowed, u.AllowedSessions)
		u.Sessions, u.AllowedSessions = nil, nil
		p.u.Add(u)
	}
	firstDay, firstStart := ToolDay(from)
	firstEnd := firstStart.Add(24 * time.Hour)
	lastDay, lastStart := ToolDay(to)
	var covered int64
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(day), 0) FROM tool_day_use_from`).Scan(&covered); err != nil {
		return nil, fmt.Errorf("window use: %w", err)
	}
	if covered > firstDay+1 {
		// The days before the table covers are read from the calls, as
		// the window's first day is.
		firstDay = min(covered-1, lastDay)
		firstEnd = DayStart(firstDay + 1)
	}
	scope, scopeArgs := `server = ? AND (? = '' OR "grant" = ?)`, []any{server, grant, grant}
	wholeFirst := false
	if from.Equal(firstStart) && firstDay < lastDay && covered <= firstDay {
		at, err := callAt(ctx, q, server, grant, `tool IS NOT NULL`, from)
		if err != nil {
			return nil, fmt.Errorf("window use: %w", err)
		}
		wholeFirst = !at
	}
	tableFrom := firstDay + 1
	if wholeFirst {
		tableFrom = firstDay
	}
	// The days in two halves read side by side, each on a connection of
	// its own (DuckDB reads a table this small on one thread), a result
	// chunk at a time: a window's rows hold ~1M session hashes (8 MB of
	// sets over 5M calls), which row by row through database/sql were
	// copied twice on their way in. The first and last days' calls are
	// grouped beside them, on a third connection: that query's threads
	// take the time the halves leave while they decode their chunks in Go.
	type dayRow struct {
		k toolDayKey
		u *DayUse
	}
	mid := tableFrom + (lastDay-tableFrom)/2
	halves := [2][]dayRow{}
	var eg errgroup.Group
	for i, r := range [2][2]int64{{tableFrom, mid}, {mid, lastDay}} {
		eg.Go(func() error {
			return ScanChunks(ctx, q, `SELECT "grant", tool, `+dayUseColumns+` FROM tool_day_use
WHERE `+scope+` AND day >= ? AND day < ?`, slices.Concat(scopeArgs, []any{r[0], r[1]}), dayUseKinds, func(c *Chunk) error {
				for row := range c.Len() {
					halves[i] = append(halves[i], dayRow{toolDayKey{grant: c.String(0, row), tool: c.String(1, row)}, readDayUse(c, 2, row)})
				}
				return nil
			})
		})
	}
	// The first and last days, each in part, from their calls.
	edges := map[toolDayKey]*DayUse{}
	var where string
	var args []any
	switch {
	case firstDay == lastDay:
		where, args = ` AND ts > ? AND ts <= ?`, []any{from, to}
	case wholeFirst:
		where, args = ` AND ts >= ? AND ts <= ?`, []any{lastStart, to}
	default:
		where, args = ` AND ((ts > ? AND ts < ?) OR (ts >= ? AND ts <= ?))`, []any{from, firstEnd, lastStart, to}
	}
	eg.Go(func() error { return readUseGroups(ctx, q, edges, false, scope+where, append(scopeArgs, args...)...) })
	if err := eg.Wait(); err != nil {
		return nil, fmt.Errorf("window use: %w", err)
	}
	for _, half := range halves {
		for _, r := range half {
			add(r.k, r.u)
		}
	}
	for k, u := range edges {
		add(k, u)
	}
	out := make(map[string]map[string]*ToolUse, len(parts))
	var counts [2][]distinctCount
	var sizes [2]int
	for g, tools := range parts {
		out[g] = make(map[string]*ToolUse, len(tools))
		for tool, p := range tools {
			u := &ToolUse{DayUse: *p.u}
			out[g][tool] = u
			// Each to the goroutine with fewer hashes so far.
			i := 0
			if sizes[1] < sizes[0] {
				i = 1
			}
			counts[i] = append(counts[i], distinctCount{p.sessions, &u.SessionCount}, distinctCount{p.allowed, &u.AllowedSessionCount})
			sizes[i] += setsLen(p.sessions) + setsLen(p.allowed)
		}
	}
	// Counted on two goroutines: ~20 ms of one core over 5M calls, which
	// was the only work running at the time.
	var wg sync.WaitGroup
	for _, c := range counts {
		wg.Go(func() {
			var set hashSet
			for _, d := range c {
				*d.into = set.distinct(d.sets)
			}
		})
	}
	wg.Wait()
	return out, nil
}

// distinctCount is a count of distinct session hashes to make: of sets,
// into into.
type distinctCount struct {
	sets [][]uint64
	into *int64
}

// setsLen is how many hashes sets hold together.
func setsLen(sets [][]uint64) int {
	n := 0
	for _, s := range sets {
		n += len(s)
	}
	return n
}

// hashSet counts distinct session hashes: open addressing, reused from
// one count to the next. One tool's sessions over a window fit in the
// caches, where sorting or merging every day's sets moved each hash
// several times (measured over 5M calls: ~0.1–0.18 s against ~0.02 s).
type hashSet struct {
	slots []uint64 // 0: empty (a hash of 0 is counted apart)
}

// distinct is the number of distinct values in sets.
func (h *hashSet) distinct(sets [][]uint64) int64 {
	n := setsLen(sets)
	size := 16
	for size < 2*n {
		size *= 2
	}
	if cap(h.slots) < size {
		h.slots = make([]uint64, size)
	}
	h.slots = h.slots[:size]
	clear(h.slots)
	mask := uint64(size - 1)
	var count int64
	zero := false
	for _, s := range sets {
		for _, v := range s {
			if v == 0 {
				if !zero {
					zero, count = true, count+1
				}
				continue
			}
			// The values are hashes already: their low bits index.
			for i := v & mask; ; i = (i + 1) & mask {
				if h.slots[i] == v {
					break
				}
				if h.slots[i] == 0 {
					h.slots[i] = v
					count++
					break
				}
			}
		}
	}
	return count
}
