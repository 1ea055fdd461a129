// Package analytics is mcptrail's DuckDB store: schema migrations, fast batch
// append with de-duplication by event id, read-only query execution, and the
// aggregates other packages need.
package analytics

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/mcptrail/mcptrail/ingest"
	"github.com/mcptrail/mcptrail/internal/duckhash"
)

// DefaultMemoryLimit bounds DuckDB's memory (buffers, sorts, hash tables), so
// that the recommender over 10M calls stays within 2 GiB of RSS.
const DefaultMemoryLimit = "1GB"

// ErrLocked means another process holds the database file for writing.
var ErrLocked = errors.New("database is locked by another process")

// Options tune how the store is opened.
type Options struct {
	// ReadOnly opens the file in DuckDB's read-only mode: any write fails,
	// and several read-only processes may share one file. A file of an older
	// schema is migrated first, in a brief open for writing.
	ReadOnly bool
	// MemoryLimit bounds DuckDB's memory, e.g. "256MB" (DefaultMemoryLimit
	// when empty); larger sorts and aggregates spill to disk.
	MemoryLimit string
	// NoHugePages keeps DuckDB's memory in 4 KiB pages where the store
	// would ask for transparent huge pages (a store that does not
	// ReturnMemory; storage.huge_pages false). The advice is process-wide
	// and stays once given: a store opened without it after one with it
	// changes nothing.
	NoHugePages bool
	// ReturnMemory makes DuckDB give freed memory back to the system
	// promptly (a background thread, and a flush after any task that
	// allocated over 16 MB), so that a long-running daemon's RSS follows
	// its work: measured 450 instead of 510 MiB while draining a backlog.
	ReturnMemory bool
	// IngestThreads, when > 0, runs DuckDB on this many threads except while
	// a Boost is held. A daemon's appends share 2 cores with NATS and
	// decoding: on one DuckDB thread they were measured 1.4x faster than on
	// two, with a third less CPU per row.
	IngestThreads int
	// IngestMemoryLimit, when set, bounds DuckDB's memory below MemoryLimit
	// except while a Boost is held. DuckDB keeps the blocks it wrote or
	// scanned cached up to its limit, so a daemon's cache grew with every
	// million events until it met the limit (a 6M-event drain peaked at
	// 515 MiB RSS with 256 MB, 488 MiB with 160 MB, no slower).
	IngestMemoryLimit string
	// SessionGap is the longest pause within a derived session: an event
	// with no session, conversation or trace id continues the run of its
	// agent, grant and gateway when it comes at most this long after the
	// run's last call (DefaultSessionGap when 0; recommend.session_gap).
	SessionGap time.Duration
	// ArchiveDir, when set, is the one folder the sandboxed instance may
	// read and write files in (storage.archive): the Parquet archive.
	ArchiveDir string
	// StoreArgs (ingest.store_args) keeps the argument values of restored
	// calls: without it a restore drops them, as ingest does, whatever the
	// archive's files hold (a database that kept them wrote them).
	StoreArgs bool
}

// Store is one DuckDB database file. Appends are serialised on one dedicated
// connection; queries run on the pool.
type Store struct {
	path      string
	readOnly  bool
	db        *sql.DB
	connector driver.Connector // db's, for ArchiveDB

	mu     sync.Mutex // guards the write connection and its staging table
	wconn  *sql.Conn
	closed bool

	historyMu sync.Mutex // serialises the recorded recommend runs (RecordRuns)

	// threads: DuckDB's own default (all cores) and the ingest setting;
	// boosts counts the Boosts held.
	boostMu       sync.Mutex
	boosts        int
	queryThreads  int
	ingestThreads int
	// memory limits for queries (Boost) and appends; both "" when appends
	// run under the query limit too (no IngestMemoryLimit).
	queryMemory, ingestMemory string

	// tails are the keys of the sessions with a row in run_tails (guarded by
	// mu, like the write connection).
	tails tailKeys
	// upkeepBuffers build the records of each batch's aggregates;
	// callScratch holds the batch's calls and runs as collectCalls finds
	// them.
	upkeepBuffers bufferPool
	callScratch   callScratch
	// deleted are the days whose calls only the archive holds (guarded by mu).
	deleted deletedDays

	releaseFiles func() // see privateFiles
	sessionGap   time.Duration
	archiveDir   string // absolute; "" when no archive
	storeArgs    bool   // restored calls keep their argument values
}

// Open opens (creating if needed) the database at path and migrates its schema.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("storage.path is empty: set it to a file such as ./mcptrail.duckdb")
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("open database %s: folder %s does not exist: create it or set --db / storage.path", path, dir)
	}
	if opts.ReadOnly {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("open database %s: no such file: ingest events first (mcptrail ingest or mcptrail serve)", path)
		}
	}
	release := privateFiles()
	s, err := openSandboxed(ctx, path, opts)
	if err == nil && opts.ReadOnly {
		s, err = migrateBeforeReading(ctx, s, opts)
	}
	if err != nil {
		release()
		return nil, err
	}
	s.releaseFiles = release
	s.sessionGap, s.storeArgs = cmp.Or(opts.SessionGap, DefaultSessionGap), opts.StoreArgs
	if opts.ArchiveDir != "" {
		s.archiveDir = strings.TrimSuffix(archiveAllowed(opts.ArchiveDir), "/")
	}
	db := s.db
	if !opts.ReadOnly {
		if err := migrate(ctx, db); err != nil {
			_ = db.Close()
			release()
			return nil, wrapOpenError(path, fmt.Errorf("migrate: %w", err))
		}
		if err := s.openWriter(ctx); err != nil {
			_ = db.Close()
			release()
			return nil, err
		}
	}
	return s, nil
}

// wrapOpenError tells a file another process holds apart from a file that
// is not a database or is damaged, by DuckDB's messages: "Could not set lock
// on file ...: Conflicting lock is held ..." for the first; for the second
// "... is not a valid DuckDB database file", "Corrupt database file:
// computed checksum ... in block at location ..." (whose "block" once
// passed for a lock) and, for a truncated file, "Could not read enough
// bytes from file".
func wrapOpenError(path string, err error) error {
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Could not set lock") || strings.Contains(msg, "Conflicting lock"):
		return fmt.Errorf("open database %s: %w (%s)", path, ErrLocked, firstLine(msg))
	case isDamaged(msg):
		return &NotDatabaseError{Path: path, Reported: firstLine(strings.TrimPrefix(msg, "database/sql/driver: could not connect to database: "))}
	}
	return fmt.Errorf("open database %s: %w", path, err)
}

func isDamaged(msg string) bool {
	for _, m := range []string{"not a valid DuckDB database", "Corrupt database file", "Could not read enough bytes"} {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// ErrNotDatabase matches (errors.Is) a NotDatabaseError.
var ErrNotDatabase = errors.New("not a valid mcptrail database")

// NotDatabaseError is an Open of a file that is not a DuckDB database, or
// one that is truncated or fails its checksums.
type NotDatabaseError struct {
	Path     string
	Reported string // DuckDB's message
}

func (e *NotDatabaseError) Error() string {
	return fmt.Sprintf("storage.path %s is %s (DuckDB reported: %s); restore it from a backup or point storage.path elsewhere",
		e.Path, ErrNotDatabase, e.Reported)
}

// Is makes errors.Is(err, ErrNotDatabase) hold.
func (e *NotDatabaseError) Is(target error) bool { return target == ErrNotDatabase }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// openWriter reserves the connection that appends: each batch registers its
// staged rows on it (see columns.register), so batches never share staging
// state.
func (s *Store) openWriter(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("open write connection: %w", err)
	}
	if err := checkHashes(ctx, conn, duckhash.String, duckhash.Strings); err != nil {
		_ = conn.Close()
		return err
	}
	s.wconn = conn
	return nil
}

// Boost gives DuckDB all its threads and its full memory limit (see
// Options.IngestThreads and IngestMemoryLimit) until done is called: for
// queries and reports inside the daemon. Appends that run meanwhile use
// them too.
func (s *Store) Boost(ctx context.Context) (done func()) {
	if s.ingestThreads <= 0 && s.ingestMemory == "" {
		return func() {}
	}
	s.boostMu.Lock()
	defer s.boostMu.Unlock()
	if s.boosts++; s.boosts == 1 {
		if err := s.setLimits(ctx, s.queryThreads, s.queryMemory); err != nil {
			s.boosts--
			return func() {} // the query just runs with fewer resources
		}
	}
	return sync.OnceFunc(func() {
		s.boostMu.Lock()
		defer s.boostMu.Unlock()
		if s.boosts--; s.boosts == 0 {
			_ = s.setLimits(context.WithoutCancel(ctx), s.ingestThreads, s.ingestMemory)
		}
	})
}

// setLimits sets DuckDB's threads (when > 0) and memory limit (when not "").
func (s *Store) setLimits(ctx context.Context, threads int, memory string) error {
	if threads > 0 {
		if err := s.setThreads(ctx, threads); err != nil {
			return err
		}
	}
	if memory != "" {
		if _, err := s.db.ExecContext(ctx, memoryLimitSQL(memory)); err != nil {
			return fmt.Errorf("set DuckDB memory limit to %s: %w", memory, err)
		}
	}
	return nil
}

func (s *Store) setThreads(ctx context.Context, n int) error {
	if _, err := s.db.ExecContext(ctx, fmt.Sprintf("SET threads = %d", n)); err != nil {
		return fmt.Errorf("set DuckDB threads to %d: %w", n, err)
	}
	return nil
}

func memoryLimitSQL(limit string) string {
	return "SET memory_limit = '" + strings.ReplaceAll(limit, "'", "") + "'"
}

// ArchiveDir is the absolute archive folder the store may use, "" for none.
func (s *Store) ArchiveDir() string { return s.archiveDir }

// Path is the database file.
func (s *Store) Path() string { return s.path }

// DB exposes the pool for packages that run their own read queries.
func (s *Store) DB() *sql.DB { return s.db }

// Close checkpoints and closes the database.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.wconn != nil {
		if _, err := s.wconn.ExecContext(context.Background(), "CHECKPOINT"); err != nil {
			errs = append(errs, fmt.Errorf("checkpoint: %w", err))
		}
		errs = append(errs, s.wconn.Close())
	}
	errs = append(errs, s.db.Close())
	s.releaseFiles()
	return errors.Join(errs...)
}

// WriteBack moves what is committed from the write-ahead log into the
// database file (DuckDB's CHECKPOINT), as Close does first: a command that
// has nothing more to write pays it beside its other work rather than at
// its exit.
func (s *Store) WriteBack(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint %s: %w", s.path, err)
	}
	return nil
}

// SizeBytes is the size of the database file and its write-ahead log.
func (s *Store) SizeBytes() int64 {
	var n int64
	for _, p := range []string{s.path, s.path + ".wal"} {
		if st, err := os.Stat(p); err == nil {
			n += st.Size()
		}
	}
	return n
}

// Checkpoint returns the last stream sequence committed for consumer, 0 if none.
func (s *Store) Checkpoint(ctx context.Context, consumer string) (uint64, error) {
	seq, _, err := s.CheckpointAt(ctx, consumer)
	return seq, err
}

// CheckpointAt is Checkpoint with when it was stored (zero without one):
// ingest.CheckpointTimer.
func (s *Store) CheckpointAt(ctx context.Context, consumer string) (uint64, time.Time, error) {
	var seq uint64
	var at time.Time
	err := s.db.QueryRowContext(ctx, `SELECT seq, updated_at FROM checkpoints WHERE consumer = ?`, consumer).Scan(&seq, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, time.Time{}, nil
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("read checkpoint of %s: %w", consumer, err)
	}
	return seq, at, nil
}

// Append stores a batch in one transaction: new events into calls (events
// whose id is already stored, or repeated within the batch, count as
// duplicates), dead letters, and the source checkpoint. Either all of it is
// committed or none.
//
// De-duplication compares ids against the stored calls whose ts lies in the
// batch's time range: a redelivered event carries its original ts, and the
// range lets DuckDB skip row groups by their min/max ts instead of keeping a
// unique index, which costs a third of the append throughput.
// It is written as NOT IN (calls.id is NOT NULL): as an ANTI JOIN, DuckDB
// built its hash table over the staged batch, all columns (60 MB for
// 122,880 rows in duckdb_memory()); NOT IN hashes the stored ids in range,
// which took the daemon from 86-90k to 95-108k events/s and 100 MiB less RSS.
func (s *Store) Append(ctx context.Context, b ingest.Batch) (ingest.Result, error) {
	var res ingest.Result
	if s.readOnly {
		return res, errors.New("append: database opened read-only")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return res, errors.New("append: database is closed")
	}
	conn := s.wconn
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return res, fmt.Errorf("append: begin: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			// A failed batch leaves nothing behind, not even staged rows.
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		}
	}()

	now := time.Now().UTC()
	st, err := stagingOf(b)
	if err != nil {
		return res, err
	}
	if b.Staged == nil {
		defer st.Release()
	}
	if st.n > 0 {
		derived := len(st.derive) > 0
		// The batch's calls sorted for its runs, beside DuckDB's insert
		// (not for sessions derived in SQL, which the staging lacks);
		// awaited before anything returns, for it reads the staged columns.
		var sorted chan *batchCalls
		if !derived && keepAggregates {
			sorted = make(chan *batchCalls, 1)
			go func() { sorted <- collectCalls(st.cols, &s.callScratch) }()
		}
		var calls *batchCalls
		collected := func() *batchCalls {
			if calls == nil && sorted != nil {
				calls = <-sorted
			}
			return calls
		}
		defer func() {
			if c := collected(); c != nil {
				s.callScratch.release(c)
			}
		}()
		if derived {
			if err := deriveSessions(ctx, conn, st.derive, st.lo, st.hi, s.sessionGap); err != nil {
				return res, err
			}
		}
		archived, err := s.archivedFiles(ctx, conn, st.lo, st.hi)
		if err != nil {
			return res, err
		}
		staged, release, err := st.cols.register(ctx, conn)
		if err != nil {
			return res, err
		}
		r, err := conn.ExecContext(ctx, insertCalls(staged, derived, archived), st.lo, st.hi, now)
		release()
		if err != nil {
			return res, fmt.Errorf("append: insert calls: %w", err)
		}
		// A late call of a day whose peaks are counted: count it again.
		if err := unlistSealedDays(ctx, conn, dayNumber(st.lo), dayNumber(st.hi)); err != nil {
			return res, fmt.Errorf("append: %w", err)
		}
		if derived {
			// Only a batch that derived sessions moves derived_sessions.
			if err := dropBatchSessions(ctx, conn); err != nil {
				return res, err
			}
			if err := recordDerivedSessions(ctx, conn, now); err != nil {
				return res, err
			}
		}
		n, _ := r.RowsAffected()
		switch {
		case !keepAggregates: // bench/aggregates.sh's measuring build only
		case derived || int(n) != st.n:
			// Sessions decided in SQL, or calls stored already: the
			// staged calls are not the batch's.
			err = recordToolDayUse(ctx, conn, "ingested_at = ?", now)
			if err == nil {
				err = recordRuns(ctx, conn, &s.tails, "ingested_at = ?", now)
			}
		default:
			err = recordBatchAggregates(ctx, conn, &s.tails, &s.upkeepBuffers, collected(), now)
		}
		if err != nil {
			return res, fmt.Errorf("append: %w", err)
		}
		res.Ingested = int(n)
		res.Duplicates = st.n + st.repeats - res.Ingested
	}
	if len(b.DeadLetters) > 0 {
		stored, err := appendDeadLetters(ctx, conn, b.DeadLetters, now)
		if err != nil {
			return res, err
		}
		res.Rejected = stored
		res.Duplicates += len(b.DeadLetters) - stored
	}
	if b.Checkpoint != nil {
		if _, err := conn.ExecContext(ctx, `INSERT OR REPLACE INTO checkpoints VALUES (?, ?, ?)`,
			b.Checkpoint.Consumer, b.Checkpoint.Seq, now); err != nil {
			return res, fmt.Errorf("append: checkpoint: %w", err)
		}
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return res, fmt.Errorf("append: commit: %w", err)
	}
	committed = true
	return res, nil
}

// recordBatchAggregates keeps tool_day_use (and with it tool_days) and the
// runs for a batch whose staged calls, b, are all stored (at ingested_at
// now), from b's figures counted in Go, on conn inside the batch's
// transaction.
func recordBatchAggregates(ctx context.Context, conn *sql.Conn, tails *tailKeys, mem memory.Allocator, b *batchCalls, now time.Time) error {
	// The Arrow records of both are dropped in one statement.
	v := &arrowViews{ctx: ctx, conn: conn, mem: mem}
	defer v.close()
	if err := appendToolDayUse(v, b.days); err != nil {
		return err
	}
	return recordBatchRuns(v, tails, b, "ingested_at = ?", now)
}

// stagingOf is the batch's staging: the one it carries, or one made from
// its events (the caller releases that one).
func stagingOf(b ingest.Batch) (*staging, error) {
	if b.Staged != nil {
		st, ok := b.Staged.(*staging)
		if !ok {
			return nil, fmt.Errorf("append: batch staged by another sink (%T)", b.Staged)
		}
		return st, nil
	}
	st := newStaging(len(b.Events))
	st.Add(b.Events, nil)
	return st, nil
}

// inTransaction runs f in a transaction on conn: committed when f
// succeeds, rolled back when f or the commit fails. f's statements all go
// through conn (Arrow views and the Appender live on a connection, which
// a sql.Tx does not hand out).
func inTransaction(ctx context.Context, conn *sql.Conn, f func() error) error {
	if _, err := conn.ExecContext(ctx, "BEGIN TRANSACTION"); err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	err := f()
	if err == nil {
		_, err = conn.ExecContext(ctx, "COMMIT")
	}
	if err != nil {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	}
	return err
}

func nullable(s string) driver.Value {
	if s == "" {
		return nil
	}
	return s
}

// AppendRows adds one row per item to table ("temp" catalog for a
// temporary table) through DuckDB's Appender on conn, in the connection's
// transaction if one is open: far faster than an INSERT per row. An item's
// error is named by what.
func AppendRows[T any](conn *sql.Conn, catalog, table string, items []T, row func(*T) []driver.Value, what func(*T) string) error {
	return conn.Raw(func(dc any) error {
		a, err := duckdb.NewAppender(dc.(driver.Conn), catalog, "main", table)
		if err != nil {
			return fmt.Errorf("open appender on %s: %w", table, err)
		}
		for i := range items {
			if err := a.AppendRow(row(&items[i])...); err != nil {
				_ = a.Close()
				return fmt.Errorf("%s: %w", what(&items[i]), err)
			}
		}
		if err := a.Close(); err != nil {
			return fmt.Errorf("flush %s: %w", table, err)
		}
		return nil
	})
}
