package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	duckdb "github.com/duckdb/duckdb-go/v2"

	"github.com/mcptrail/mcptrail/internal/duckalloc"
	"github.com/mcptrail/mcptrail/internal/goheap"
)

// The sandbox. DuckDB keeps one database instance per file in a process
// (duckdb-go's instance cache hands a second Open of the same file the same
// instance), and the settings below are all global to that instance, so
// user SQL cannot get a sandbox of its own next to the ingest: the whole
// store runs sandboxed. Nothing the store does needs more: its own file,
// WAL and spill files stay reachable without external access, Arrow
// batches are scanned from memory, and every extension it uses (json, icu,
// parquet, core_functions) is linked in and loaded at start.
//
//   - enable_external_access=false: no table function, replacement scan,
//     COPY, EXPORT, ATTACH or LOAD reads or writes a file or the network;
//     DuckDB refuses them when it binds, before creating anything.
//   - autoinstall/autoload_known_extensions=false: a URL or a file name
//     in a query never downloads or loads an extension.
//
// These three are set when the instance is created (the DSN), so they
// hold from its first statement. With an archive folder (Options.ArchiveDir)
// external access is switched off by the store's first statement instead,
// right after allowed_directories names that folder: DuckDB 1.5 refuses
// allowed_directories in the DSN ("before the database is started") and
// once external access is off, and only reads and writes files under it
// (COPY TO, read_parquet, glob) after that. Nothing else has run on the
// instance by then. Then the store makes its own global
// settings (time zone, memory, threads) and sets lock_configuration, after
// which no statement can change a setting, except the two that Boost
// changes at run time (allowed_configs): memory_limit and threads.
var sandboxDSN = url.Values{
	"enable_external_access":       {"false"},
	"autoinstall_known_extensions": {"false"},
	"autoload_known_extensions":    {"false"},
	// The format of a file this build creates; one that exists keeps its own.
	"storage_compatibility_version": {StorageVersion},
}

// boostSettings are the settings that stay changeable once the
// configuration is locked: Boost lends and takes back threads and memory.
const boostSettings = `['memory_limit', 'threads']`

// openSandboxed opens the DuckDB instance of path with the sandbox and the
// store's settings, and locks the configuration.
func openSandboxed(ctx context.Context, path string, opts Options) (*Store, error) {
	params := maps.Clone(sandboxDSN)
	if opts.ReadOnly {
		params.Set("access_mode", "read_only")
	}
	if opts.ArchiveDir != "" {
		params.Del("enable_external_access") // set below, after allowed_directories
	}
	// Before DuckDB starts: every mapping of its memory goes through the
	// hooks.
	if !opts.ReturnMemory && !opts.NoHugePages {
		if err := hugePages(); err != nil {
			return nil, fmt.Errorf("open database %s: %w", path, err)
		}
	}
	connector, err := duckdb.NewConnector(path+"?"+params.Encode(), nil)
	if err != nil {
		return nil, wrapOpenError(path, err)
	}
	db := sql.OpenDB(connector)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, wrapOpenError(path, err)
	}
	fail := func(err error) (*Store, error) {
		_ = db.Close()
		return nil, err
	}
	limit := opts.MemoryLimit
	if limit == "" {
		limit = DefaultMemoryLimit
	}
	s := &Store{path: path, readOnly: opts.ReadOnly, db: db, connector: connector, ingestThreads: opts.IngestThreads}
	if opts.IngestMemoryLimit != "" {
		s.queryMemory, s.ingestMemory = limit, opts.IngestMemoryLimit
		limit = s.ingestMemory
	}
	var locked bool
	if err := db.QueryRowContext(ctx, "SELECT current_setting('lock_configuration')").Scan(&locked); err != nil {
		return fail(fmt.Errorf("open database %s: read lock_configuration: %w", path, err))
	}
	// A second store on a file this process already holds shares its
	// instance, locked by the first: only the changeable settings apply.
	var settings []string
	if !locked && opts.ArchiveDir != "" {
		settings = append(settings,
			"SET allowed_directories = ['"+sqlQuote(archiveAllowed(opts.ArchiveDir))+"']",
			"SET enable_external_access = false")
	}
	if !locked {
		// Every connection works in UTC: date_trunc and friends on
		// TIMESTAMPTZ follow the session time zone, and policy windows are
		// calendar-aligned in UTC. Set globally, so that connections the
		// pool opens after the lock inherit it.
		settings = append(settings, "SET GLOBAL TimeZone = 'UTC'")
		if opts.ReturnMemory {
			settings = append(settings, "SET allocator_flush_threshold = '16MB'", "SET allocator_background_threads = true")
		}
		if err := keepFreedPages(); err != nil {
			return fail(fmt.Errorf("open database %s: %w", path, err))
		}
	}
	// DuckDB would otherwise use up to 80% of the machine's memory; with a
	// limit, large sorts and aggregates spill to disk instead.
	settings = append(settings, memoryLimitSQL(limit))
	for _, q := range settings {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return fail(fmt.Errorf("open database %s: %s: %w", path, q, err))
		}
	}
	if s.ingestThreads > 0 {
		if err := db.QueryRowContext(ctx, "SELECT current_setting('threads')").Scan(&s.queryThreads); err != nil {
			return fail(fmt.Errorf("open database %s: read threads: %w", path, err))
		}
		if err := s.setThreads(ctx, s.ingestThreads); err != nil {
			return fail(err)
		}
	}
	// Whatever the path above, the store never runs with external access on.
	var external bool
	if err := db.QueryRowContext(ctx, "SELECT current_setting('enable_external_access')").Scan(&external); err != nil || external {
		return fail(fmt.Errorf("open database %s: external access is not off (%v): refusing to run unsandboxed", path, err))
	}
	if !locked {
		for _, q := range []string{"SET allowed_configs = " + boostSettings, "SET lock_configuration = true"} {
			if _, err := db.ExecContext(ctx, q); err != nil {
				return fail(fmt.Errorf("open database %s: %s: %w", path, q, err))
			}
		}
	}
	return s, nil
}

// archiveAllowed is the archive folder as allowed_directories wants it:
// absolute, with a trailing slash (a prefix; without the slash
// /archive would also allow /archive2).
func archiveAllowed(dir string) string {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	return strings.TrimSuffix(dir, "/") + "/"
}

// sqlQuote escapes s for a single-quoted SQL string literal.
func sqlQuote(s string) string { return strings.ReplaceAll(s, "'", "''") }

// freedPagesDecay is about how long DuckDB's allocator keeps freed pages
// before handing them back to the system (jemalloc purges them gradually
// over it), for every store. With DuckDB's own 1 s, much of what one batch
// freed was already handed back when the next batches of a long ingest or
// a drain allocated again, so they touched new pages: 12-32k more page
// faults per 1M single-event messages drained by serve (bench/jetstream.sh,
// README); a replay that reads its window a day at a time took 170-190k
// faults against ~100k. Idle memory still goes back, within ~13 s.
const freedPagesDecay = 10 * time.Second

// hugePages has DuckDB's allocator ask for transparent huge pages,
// process-wide, for the stores that answer queries (a no-op where DuckDB is
// built without jemalloc), and advises a span of the Go heap for them
// (goheap). A page fault costs ~8 µs on this project's
// 2-core virtual machine, and one grouped scan of 5M calls touched ~49k
// pages: 2 MiB pages took that to ~5k. The stores that give memory back
// (ingest's, serve's) keep 4 KiB pages: they hand freed memory back every
// few seconds, which breaks huge pages apart, and they keep to a memory
// ceiling that pages of 2 MiB would round up.
func hugePages() error {
	// The Go heap too: a recommendation over 5M calls took ~20,000 page
	// faults, half of them the Go heap's (its sets of sessions, runs and
	// findings, the JSON it prints), and with this ~11,000, for 0.71
	// against 0.76 s (five alternating runs). The advice is a hint: where
	// the system refuses it (a seccomp profile's EPERM), the heap keeps
	// 4 KiB pages and the store opens all the same (the command logs the
	// refusal, goheap.Refusal).
	_ = adviseGoHeap(goHeapAdvised)
	if !duckalloc.Supported() {
		return nil
	}
	return duckalloc.UseHugePages()
}

// adviseGoHeap is goheap.AdviseHugePages, a variable so that a test can
// have the system refuse the advice.
var adviseGoHeap = goheap.AdviseHugePages

// goHeapAdvised is how much of the Go heap hugePages advises: more than a
// recommendation over 5M calls holds at its peak (~40 MB); 32 MiB left
// ~13,500 of those faults, 128 MiB as many as 64.
const goHeapAdvised = 64 << 20

// HugePagesInUse says whether DuckDB's memory in this process is advised
// for transparent huge pages from now on (a store asked for them).
func HugePagesInUse() bool {
	n, err := duckalloc.HugePagesArenas() // an error where DuckDB has no jemalloc
	return err == nil && n > 0
}

// keepFreedPages sets freedPagesDecay on DuckDB's allocator, process-wide
// (a no-op where DuckDB is built without jemalloc).
func keepFreedPages() error {
	if !duckalloc.Supported() {
		return nil
	}
	return duckalloc.SetDecay(duckalloc.Decay{Dirty: freedPagesDecay, Muzzy: freedPagesDecay})
}
