package analytics

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// peaksEpochDays is how many days of session_peaks' rows are kept
// together, sorted by server and grant (clusterPeaks): a window of up to
// a month meets at most two such runs per grant. A day's rows, counted
// one sealed day at a time, hold every grant's sessions (~34,000 rows a
// day over 5M calls in 30 days, a quarter of a row group), so that without
// the sort every row group held every grant and each grant's reads went
// through every row; with it a grant's reads skip the others' row groups.
const peaksEpochDays = 32

// peaksClusteredSchema is migration 14's: the epochs (day / peaksEpochDays)
// whose session_peaks rows are sorted by server and grant. It starts
// empty, so that the next recluster sorts every epoch once.
const peaksClusteredSchema = `
CREATE TABLE peaks_clustered (epoch BIGINT PRIMARY KEY);`

// unclusterPeaksDay takes day's epoch off peaks_clustered: its rows were
// just counted again, at the table's end. On conn, inside the caller's
// transaction.
func unclusterPeaksDay(ctx context.Context, conn *sql.Conn, day int64) error {
	if _, err := conn.ExecContext(ctx, `DELETE FROM peaks_clustered WHERE epoch = ?`, day/peaksEpochDays); err != nil {
		return fmt.Errorf("peaks' order: %w", err)
	}
	return nil
}

// clusterPeaks rewrites, sorted by server, grant, day, tool and session,
// the session_peaks rows of every epoch not listed in peaks_clustered,
// an epoch per transaction that holds the store's writer (~0.5 s for an
// epoch of 625,000 rows here), and lists it.
func (s *Store) clusterPeaks(ctx context.Context) error {
	for {
		sorted, err := s.clusterNextEpoch(ctx)
		if err != nil || !sorted {
			return err
		}
	}
}

// clusterNextEpoch sorts the first epoch of session_peaks not listed in
// peaks_clustered, holding the writer; false when none is left.
func (s *Store) clusterNextEpoch(ctx context.Context) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, errors.New("peaks' order: database is closed")
	}
	conn := s.wconn
	var epoch *int64
	if err := conn.QueryRowContext(ctx, `SELECT min(day // $days) FROM session_peaks
WHERE day // $days NOT IN (SELECT epoch FROM peaks_clustered)`, sql.Named("days", peaksEpochDays)).Scan(&epoch); err != nil {
		return false, fmt.Errorf("peaks' order: %w", err)
	}
	if epoch == nil {
		return false, nil
	}
	lo, hi := *epoch*peaksEpochDays, (*epoch+1)*peaksEpochDays-1
	err := inTransaction(ctx, conn, func() error {
		for _, q := range []string{
			`CREATE OR REPLACE TEMP TABLE peaks_epoch AS SELECT * FROM session_peaks WHERE day BETWEEN ? AND ?
ORDER BY server, "grant", day, tool, session`,
			`DELETE FROM session_peaks WHERE day BETWEEN ? AND ?`,
		} {
			if _, err := conn.ExecContext(ctx, q, lo, hi); err != nil {
				return err
			}
		}
		for _, q := range []string{`INSERT INTO session_peaks SELECT * FROM peaks_epoch`, `DROP TABLE peaks_epoch`} {
			if _, err := conn.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		_, err := conn.ExecContext(ctx, `INSERT OR IGNORE INTO peaks_clustered VALUES (?)`, *epoch)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("peaks' order: epoch of days %d to %d: %w", lo, hi, err)
	}
	return true, nil
}
