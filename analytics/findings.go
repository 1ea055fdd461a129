package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// RecommendRun is one run of the recommender over one scope (server and
// grant, "" for a server whose calls carry none).
type RecommendRun struct {
	Server, Grant        string
	At                   time.Time // the run's now
	WindowFrom, WindowTo time.Time
	Source               string // recommend, report, schedule
}

// FindingRecord is one finding's history: when it was first and last seen,
// and its state (SPEC §5, "Finding history"; the states and their
// transitions are recommend's, recommend/history.go).
type FindingRecord struct {
	ID       string `json:"id"`
	Server   string `json:"server"`
	Grant    string `json:"grant"`
	Kind     string `json:"kind"`
	Tool     string `json:"tool"`
	State    string `json:"state"`
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Action   string `json:"-"` // the proposed change as JSON, compared between runs
	// Changes are a loosening's kinds of change (recommend.WideningKinds),
	// what a suppression of it accepts; nil for other kinds.
	Changes   []string  `json:"changes,omitempty"`
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	ChangedAt time.Time `json:"changed_at"`
	LastRunID int64     `json:"last_run_id"`
}

// FindingTransition is one state change of a finding, as finding_log keeps
// it; From is "" for a finding seen for the first time.
type FindingTransition struct {
	FindingID, From, To string
}

// RunHistory is what RecordRuns hands the state-transition logic: the run's
// id, the previous run of the same scope (0 for none) and the scope's
// findings as recorded before the run.
type RunHistory struct {
	RunID, PreviousRunID int64
	PreviousAt           time.Time // the previous run's now; zero for none
	Known                []FindingRecord
}

// ErrReadOnly means the store was opened read-only and cannot record.
var ErrReadOnly = errors.New("database opened read-only")

// ErrNoRuns means no run of the recommender was recorded for a scope.
var ErrNoRuns = errors.New("no recommend run recorded")

// ScopeRun is one scope's run of the recommender and how it advances the
// scope's history: advance is given the history and returns the scope's
// findings after the run and the state changes to log.
type ScopeRun struct {
	Run     RecommendRun
	Advance func(RunHistory) ([]FindingRecord, []FindingTransition)
}

// RecordRuns records the runs of one recommendation (one per scope, such as
// a policy per grant) in one transaction: all of them or, on an error, none,
// and one commit to wait for instead of one per scope. Runs are
// serialised, so that two runs of one scope (a schedule and an API request
// in the daemon) never read the same history.
func (s *Store) RecordRuns(ctx context.Context, runs []ScopeRun) error {
	if s.readOnly {
		return ErrReadOnly
	}
	if len(runs) == 0 {
		return nil
	}
	s.historyMu.Lock()
	defer s.historyMu.Unlock()
	// A connection of its own, so that the findings go in through DuckDB's
	// Appender inside the transaction (a statement with a parameter per
	// value took ~25 ms for a grant's ~290 findings, a run's serial end).
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("record recommend runs of %s: %w", runs[0].Run.Server, err)
	}
	defer conn.Close()
	return inTransaction(ctx, conn, func() error {
		for _, r := range runs {
			if err := recordRun(ctx, conn, r.Run, r.Advance); err != nil {
				return fmt.Errorf("record recommend run of %s, grant %q: %w", r.Run.Server, r.Run.Grant, err)
			}
		}
		return nil
	})
}

// recordRun records one scope's run, inside RecordRuns' transaction on conn.
func recordRun(ctx context.Context, conn *sql.Conn, run RecommendRun, advance func(RunHistory) ([]FindingRecord, []FindingTransition)) error {
	var h RunHistory
	var prev sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT coalesce(max(run_id), 0) + 1,
	(SELECT max(run_id) FROM recommend_runs WHERE server = ? AND "grant" = ?) FROM recommend_runs`,
		run.Server, run.Grant).Scan(&h.RunID, &prev); err != nil {
		return err
	}
	if h.PreviousRunID = prev.Int64; prev.Valid {
		if err := conn.QueryRowContext(ctx, `SELECT "at" FROM recommend_runs WHERE run_id = ?`, prev.Int64).Scan(&h.PreviousAt); err != nil {
			return err
		}
		h.PreviousAt = h.PreviousAt.UTC()
	}
	rows, err := conn.QueryContext(ctx, findingColumns+` WHERE server = ? AND "grant" = ? ORDER BY finding_id`, run.Server, run.Grant)
	if err != nil {
		return err
	}
	if h.Known, err = scanFindings(rows); err != nil {
		return err
	}
	next, log := advance(h)
	at := run.At.UTC()
	if _, err := conn.ExecContext(ctx, `INSERT INTO recommend_runs VALUES (?, ?, ?, ?, ?, ?, ?)`, h.RunID, run.Server, run.Grant, at,
		run.WindowFrom.UTC(), run.WindowTo.UTC(), run.Source); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `DELETE FROM findings WHERE server = ? AND "grant" = ?`, run.Server, run.Grant); err != nil {
		return err
	}
	if err := AppendRows(conn, "", "findings", next, func(r *FindingRecord) []driver.Value {
		return []driver.Value{r.ID, run.Server, run.Grant, r.Kind, nullable(r.Tool), r.FirstSeen.UTC(), r.LastSeen.UTC(), r.State, r.Severity,
			nullable(r.Summary), nullable(r.Action), r.LastRunID, r.ChangedAt.UTC(), jsonList(r.Changes)}
	}, func(r *FindingRecord) string { return "finding " + r.ID }); err != nil {
		return err
	}
	return AppendRows(conn, "", "finding_log", log, func(t *FindingTransition) []driver.Value {
		return []driver.Value{at, t.FindingID, nullable(t.From), t.To, h.RunID}
	}, func(t *FindingTransition) string { return "transition of " + t.FindingID })
}

// jsonList stores a list as JSON text; nil as NULL.
func jsonList(l []string) driver.Value {
	if l == nil {
		return nil
	}
	b, _ := json.Marshal(l)
	return string(b)
}

// parseJSONList reads what jsonList stored.
func parseJSONList(s sql.NullString) ([]string, error) {
	if !s.Valid {
		return nil, nil
	}
	l := []string{}
	if err := json.Unmarshal([]byte(s.String), &l); err != nil {
		return nil, err
	}
	return l, nil
}

const findingColumns = `SELECT finding_id, server, "grant", kind, coalesce(tool, ''), state, severity, coalesce(summary, ''),
	coalesce(action, ''), first_seen, last_seen, changed_at, last_run_id, changes FROM findings`

func scanFindings(rows *sql.Rows) ([]FindingRecord, error) {
	defer rows.Close()
	var out []FindingRecord
	for rows.Next() {
		var r FindingRecord
		var changes sql.NullString
		if err := rows.Scan(&r.ID, &r.Server, &r.Grant, &r.Kind, &r.Tool, &r.State, &r.Severity, &r.Summary, &r.Action,
			&r.FirstSeen, &r.LastSeen, &r.ChangedAt, &r.LastRunID, &changes); err != nil {
			return nil, err
		}
		var err error
		if r.Changes, err = parseJSONList(changes); err != nil {
			return nil, fmt.Errorf("finding %s: changes: %w", r.ID, err)
		}
		r.FirstSeen, r.LastSeen, r.ChangedAt = r.FirstSeen.UTC(), r.LastSeen.UTC(), r.ChangedAt.UTC()
		out = append(out, r)
	}
	return out, rows.Err()
}

// FindingFilter selects recorded findings: of Server, of one Grant when
// AnyGrant is false, in one State when it is not empty.
type FindingFilter struct {
	Server, Grant string
	AnyGrant      bool
	State         string
}

// Findings returns the recorded findings that match, by grant and id. It
// wraps ErrNoRuns when no run of the scope was recorded.
func (s *Store) Findings(ctx context.Context, f FindingFilter) ([]FindingRecord, error) {
	var runs int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM recommend_runs WHERE server = ? AND (? OR "grant" = ?)`,
		f.Server, f.AnyGrant, f.Grant).Scan(&runs); err != nil {
		return nil, fmt.Errorf("read findings of %s: %w", f.Server, err)
	}
	if runs == 0 {
		return nil, ErrNoRuns
	}
	rows, err := s.db.QueryContext(ctx, findingColumns+` WHERE server = ? AND (? OR "grant" = ?) AND (? = '' OR state = ?)`,
		f.Server, f.AnyGrant, f.Grant, f.State, f.State)
	if err != nil {
		return nil, fmt.Errorf("read findings of %s: %w", f.Server, err)
	}
	out, err := scanFindings(rows)
	if err != nil {
		return nil, fmt.Errorf("read findings of %s: %w", f.Server, err)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Grant != out[j].Grant {
			return out[i].Grant < out[j].Grant
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Finding returns the recorded finding with id (ids name their server and
// grant), or nil when none was recorded.
func (s *Store) Finding(ctx context.Context, id string) (*FindingRecord, error) {
	rows, err := s.db.QueryContext(ctx, findingColumns+` WHERE finding_id = ? ORDER BY last_seen DESC LIMIT 1`, id)
	if err != nil {
		return nil, fmt.Errorf("read finding %s: %w", id, err)
	}
	out, err := scanFindings(rows)
	if err != nil || len(out) == 0 {
		return nil, err
	}
	return &out[0], nil
}

// FindingLogEntry is one recorded state change.
type FindingLogEntry struct {
	At        time.Time `json:"at"`
	FindingID string    `json:"finding_id"`
	From      string    `json:"from_state"`
	To        string    `json:"to_state"`
	RunID     int64     `json:"run_id"`
}

// FindingLog returns the state changes of server's findings (every server's
// when empty), oldest first.
func (s *Store) FindingLog(ctx context.Context, server string) ([]FindingLogEntry, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT l."at", l.finding_id, coalesce(l.from_state, ''), l.to_state, l.run_id
FROM finding_log l JOIN recommend_runs r USING (run_id)
WHERE ? = '' OR r.server = ? ORDER BY l.run_id, l.rowid`, server, server)
	if err != nil {
		return nil, fmt.Errorf("read finding log: %w", err)
	}
	defer rows.Close()
	var out []FindingLogEntry
	for rows.Next() {
		var e FindingLogEntry
		if err := rows.Scan(&e.At, &e.FindingID, &e.From, &e.To, &e.RunID); err != nil {
			return nil, fmt.Errorf("read finding log: %w", err)
		}
		e.At = e.At.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}
