package analytics

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/mcptrail/mcptrail/ingest"
)

// appendDeadLetters stores dls in the batch's transaction on conn, but for
// a stream message's dead letters stored already, and returns how many it
// stored. A stream message can be delivered again after its batch was
// stored (read again from the stream's start) or twice into one batch (a
// consumer that acknowledges redelivers what a stalled commit held past its
// ack wait): its events de-duplicate by id, its dead letters by their
// subject, stream sequence, line and bytes. A file's or a core NATS
// message's dead letters (no sequence) are always stored: nothing
// redelivers them, and nothing else tells two of them apart.
func appendDeadLetters(ctx context.Context, conn *sql.Conn, dls []ingest.DeadLetter, now time.Time) (int, error) {
	fresh, err := newDeadLetters(ctx, conn, dls)
	if err != nil {
		return 0, fmt.Errorf("append: dead letters: %w", err)
	}
	if len(fresh) == 0 {
		return 0, nil
	}
	err = AppendRows(conn, "", "dead_letters", fresh, func(d *ingest.DeadLetter) []driver.Value {
		at := d.At
		if at.IsZero() {
			at = now
		}
		var line, seq driver.Value
		if d.Line > 0 {
			line = d.Line
		}
		if d.Seq > 0 {
			seq = d.Seq
		}
		return []driver.Value{at.UTC(), deadLetterSource(d), line, seq, nullable(d.Format), d.Reason,
			nullable(strings.ToValidUTF8(d.Detail, "\uFFFD")), d.Raw}
	}, func(d *ingest.DeadLetter) string { return "dead letter from " + d.Source })
	if err != nil {
		return 0, fmt.Errorf("append: dead letters: %w", err)
	}
	return len(fresh), nil
}

// deadLetterSource is d's source as stored: a subject or file name need
// not be UTF-8 (a gateway may publish on such a subject), nor a detail
// quoting one; DuckDB would take the text for NULL and refuse the batch,
// and every retry of it.
func deadLetterSource(d *ingest.DeadLetter) string { return strings.ToValidUTF8(d.Source, "\uFFFD") }

// deadLetterKey tells a stream message's dead letter from any other: its
// bytes by their SHA-256, not a copy (up to the event size limit each).
type deadLetterKey struct {
	source string
	seq    uint64
	line   int64
	raw    [sha256.Size]byte
}

// newDeadLetters is dls without the stream messages' dead letters stored
// already or repeated among dls. Dead letters are rare: the stored ones
// are read by the batch's range of sequences, which DuckDB skips row
// groups by.
func newDeadLetters(ctx context.Context, conn *sql.Conn, dls []ingest.DeadLetter) ([]ingest.DeadLetter, error) {
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for i := range dls {
		if s := dls[i].Seq; s > 0 {
			lo, hi = min(lo, s), max(hi, s)
		}
	}
	if hi == 0 {
		return dls, nil
	}
	seen := map[deadLetterKey]bool{}
	rows, err := conn.QueryContext(ctx, `SELECT source, seq, coalesce(line, 0), coalesce(raw, ''::BLOB) FROM dead_letters WHERE seq BETWEEN ? AND ?`, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("read the stored ones: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k deadLetterKey
		var raw []byte
		if err := rows.Scan(&k.source, &k.seq, &k.line, &raw); err != nil {
			return nil, fmt.Errorf("read the stored ones: %w", err)
		}
		k.raw = sha256.Sum256(raw)
		seen[k] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the stored ones: %w", err)
	}
	// Each is marked (the caller's batch: its report counts them), afresh
	// on every attempt of a batch retried.
	fresh := make([]ingest.DeadLetter, 0, len(dls))
	for i := range dls {
		d := &dls[i]
		d.Duplicate = false
		if d.Seq > 0 {
			k := deadLetterKey{source: deadLetterSource(d), seq: d.Seq, line: d.Line, raw: sha256.Sum256(d.Raw)}
			if seen[k] {
				d.Duplicate = true
				continue
			}
			seen[k] = true
		}
		fresh = append(fresh, *d)
	}
	return fresh, nil
}
