package main

import (
	"fmt"

	"github.com/mcptrail/mcptrail/render"
)

// answerLimit bounds what the daemon sends for one query (query.max_rows,
// query.max_bytes), so that a huge result costs neither its memory nor the
// client's. On the file the CLI prints everything.
type answerLimit struct {
	maxRows  int
	maxBytes int64
	rows     int
	bytes    int64
}

// truncatedError stops a query at the limit; runQuery prints it as a note.
type truncatedError struct {
	limit string // "100000 rows"
	key   string // the setting
	rows  int    // rows sent
}

func (e *truncatedError) Error() string {
	return fmt.Sprintf("the daemon sends at most %s (%s); the first %d rows were sent", e.limit, e.key, e.rows)
}

// answerLimit is nil (no limit) outside the daemon.
func (a *app) answerLimit() *answerLimit {
	if a.truncate == nil {
		return nil
	}
	return &answerLimit{maxRows: a.cfg.Query.MaxRows, maxBytes: a.cfg.Query.MaxBytes}
}

// take counts a row, refusing it once a limit is reached.
func (l *answerLimit) take(row []any) error {
	if l == nil {
		return nil
	}
	var n int64
	for _, v := range row {
		n += int64(len(render.Value(v)))
	}
	switch {
	case l.maxRows > 0 && l.rows >= l.maxRows:
		return &truncatedError{limit: fmt.Sprintf("%d rows", l.maxRows), key: "query.max_rows", rows: l.rows}
	case l.maxBytes > 0 && l.bytes+n > l.maxBytes:
		return &truncatedError{limit: fmt.Sprintf("%d bytes of values", l.maxBytes), key: "query.max_bytes", rows: l.rows}
	}
	l.rows++
	l.bytes += n
	return nil
}
