package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// The live alarm (package alarm) reads the calls as they are stored and
// records the alerts it sent in the alerts table, so that a restarted daemon
// neither repeats an alert nor forgets to close one.

// AlarmCall is one stored call as the live alarm follows it.
type AlarmCall struct {
	Server     string
	Session    string // the session, else "gateway:" and the gateway (as the analyses key sessions), else ""
	Tool       string
	ArgsHash   string // "" when the event had none: such a call never continues a run
	Grant      string
	Agent      string
	TS         time.Time
	Error      bool // status = 'error'
	IngestedAt time.Time
}

// AlarmCalls returns the tool calls stored after ingestedAfter (exclusive)
// whose ts is at or after since, in the order the alarm follows them: by
// server, session and time; and the newest ingested_at of every call stored
// after ingestedAfter (ingestedAfter when none), which is where the next
// read starts even when no call passed since. Appends hold the write lock
// from their ingested_at to their commit, so no later read finds a call
// stored before that mark.
func (s *Store) AlarmCalls(ctx context.Context, ingestedAfter, since time.Time) ([]AlarmCall, time.Time, error) {
	var newest sql.NullTime
	if err := s.db.QueryRowContext(ctx, `SELECT max(ingested_at) FROM calls WHERE ingested_at > ?`,
		ingestedAfter.UTC()).Scan(&newest); err != nil {
		return nil, ingestedAfter, fmt.Errorf("alarm: newest call: %w", err)
	}
	if !newest.Valid {
		return nil, ingestedAfter, nil
	}
	rows, err := s.db.QueryContext(ctx, `
SELECT server, `+SessionKey+` AS skey, tool, coalesce(args_hash, ''),
       coalesce("grant", ''), coalesce(agent, ''), ts, coalesce(status = 'error', false), ingested_at
FROM calls WHERE ingested_at > ? AND ingested_at <= ? AND ts >= ? AND tool IS NOT NULL
ORDER BY server, skey, ts, tool, args_hash`, ingestedAfter.UTC(), newest.Time.UTC(), since.UTC())
	if err != nil {
		return nil, ingestedAfter, fmt.Errorf("alarm: read calls: %w", err)
	}
	defer rows.Close()
	var out []AlarmCall
	for rows.Next() {
		var c AlarmCall
		if err := rows.Scan(&c.Server, &c.Session, &c.Tool, &c.ArgsHash, &c.Grant, &c.Agent, &c.TS, &c.Error, &c.IngestedAt); err != nil {
			return nil, ingestedAfter, fmt.Errorf("alarm: read calls: %w", err)
		}
		c.TS, c.IngestedAt = c.TS.UTC(), c.IngestedAt.UTC()
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, ingestedAfter, fmt.Errorf("alarm: read calls: %w", err)
	}
	return out, newest.Time.UTC(), nil
}

// AlertRecord is an alert the alarm sent (table alerts).
type AlertRecord struct {
	ID        string
	Kind      string
	Server    string
	Session   string
	Tool      string
	ArgsHash  string
	First     time.Time // the run's first call
	Polls     int64     // when sent; when ended, the final count
	Threshold int64
	SentAt    time.Time
	EndedAt   *time.Time
}

// RecordAlert records an alert unless its id is recorded already; it
// reports whether it was new (only a new alert is sent). A running alert
// has no EndedAt; a one-off alert (a regression) is recorded ended.
func (s *Store) RecordAlert(ctx context.Context, a AlertRecord) (bool, error) {
	var ended any
	if a.EndedAt != nil {
		ended = a.EndedAt.UTC()
	}
	res, err := s.db.ExecContext(ctx, `INSERT INTO alerts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		a.ID, a.Kind, a.Server, a.Session, a.Tool, nullable(a.ArgsHash), a.First.UTC(), a.Polls, a.Threshold, a.SentAt.UTC(), ended)
	if err != nil {
		return false, fmt.Errorf("record alert: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// AlertSent reports whether an alert with this id was recorded.
func (s *Store) AlertSent(ctx context.Context, id string) (bool, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM alerts WHERE id = ?`, id).Scan(&n); err != nil {
		return false, fmt.Errorf("alert %s: %w", id, err)
	}
	return n > 0, nil
}

// EndAlert marks an alert ended with the run's final count; it reports
// whether it was still open (only then is the closing alert sent).
func (s *Store) EndAlert(ctx context.Context, id string, polls int64, at time.Time) (bool, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE alerts SET ended_at = ?, polls = ? WHERE id = ? AND ended_at IS NULL`, at.UTC(), polls, id)
	if err != nil {
		return false, fmt.Errorf("end alert: %w", err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// OpenAlerts lists the alerts sent and not yet ended, oldest run first.
func (s *Store) OpenAlerts(ctx context.Context) ([]AlertRecord, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT id, kind, server, session, tool, coalesce(args_hash, ''), first_ts, polls, threshold, sent_at
FROM alerts WHERE ended_at IS NULL ORDER BY first_ts, id`)
	if err != nil {
		return nil, fmt.Errorf("open alerts: %w", err)
	}
	defer rows.Close()
	var out []AlertRecord
	for rows.Next() {
		var a AlertRecord
		if err := rows.Scan(&a.ID, &a.Kind, &a.Server, &a.Session, &a.Tool, &a.ArgsHash, &a.First, &a.Polls, &a.Threshold, &a.SentAt); err != nil {
			return nil, fmt.Errorf("open alerts: %w", err)
		}
		a.First, a.SentAt = a.First.UTC(), a.SentAt.UTC()
		out = append(out, a)
	}
	return out, rows.Err()
}

// CallServers lists the servers with calls at or after since.
func (s *Store) CallServers(ctx context.Context, since time.Time) ([]string, error) {
	out, err := QueryColumn[string](ctx, s.db, `SELECT DISTINCT server FROM calls WHERE ts >= ? ORDER BY 1`, since.UTC())
	if err != nil {
		return nil, fmt.Errorf("servers: %w", err)
	}
	return out, nil
}
