//go:build !duckdb_arrow

package analytics

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/mcptrail/mcptrail/audit"
)

// StagingPath names how batches reach DuckDB in this build.
const StagingPath = "appender"

// columns holds a batch's events for the Appender. (Builds with the
// duckdb_arrow tag hand DuckDB Arrow columns instead: the Appender's
// per-value cgo calls are its cost.)
type columns struct{ events []audit.Event }

func newColumns(capacity int) *columns {
	return &columns{events: make([]audit.Event, 0, capacity)}
}

func (c *columns) add(e *audit.Event) { c.events = append(c.events, *e) }

// id is the id of the i-th event added.
func (c *columns) id(i int) string { return c.events[i].ID }

func (c *columns) release() { c.events = nil }

// register writes the events into a fresh temporary table with the Appender
// and returns its name.
func (c *columns) register(ctx context.Context, conn *sql.Conn) (string, func(), error) {
	events := c.events
	// A fresh staging table per batch: deleting the previous batch's rows
	// would leave them behind as deleted versions that later scans skip over.
	if _, err := conn.ExecContext(ctx, `CREATE OR REPLACE TEMP TABLE staging AS SELECT * FROM calls LIMIT 0`); err != nil {
		return "", nil, fmt.Errorf("append: staging table: %w", err)
	}
	err := conn.Raw(func(dc any) error {
		a, err := duckdb.NewAppender(dc.(driver.Conn), "temp", "main", "staging")
		if err != nil {
			return fmt.Errorf("append: open appender: %w", err)
		}
		for i := range events {
			if err := a.AppendRow(eventRow(&events[i])...); err != nil {
				_ = a.Close()
				return fmt.Errorf("append: event %q: %w", events[i].ID, err)
			}
		}
		if err := a.Close(); err != nil {
			return fmt.Errorf("append: flush: %w", err)
		}
		return nil
	})
	return "staging", func() {}, err
}
