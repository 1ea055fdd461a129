package analytics

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
)

// StorageVersion is the DuckDB storage format of the database files this
// build creates (DuckDB's storage_compatibility_version, given when the
// file is opened; an existing file keeps the format it was created in).
// DuckDB's default is still v1.0.0, for readers as old as DuckDB 1.0; this
// format needs DuckDB 1.5 or newer to read it, and stores the calls with
// DICT_FSST, one string compression where v1.0.0 weighs dictionary, FSST and
// the rest per column: 1M events stored with 10-20% less CPU, the file a
// tenth smaller (bench/ingest.sh). bench/readjson creates its file in the
// same format, so that the yardstick measures the same storage.
const StorageVersion = "v1.5.0"

// dictFSSTSince is the first storage version with DICT_FSST, the version
// from which DuckDB refuses to compress with dictionary or FSST.
var dictFSSTSince = [3]int{1, 3, 0}

// currentStorage is StorageVersion, parsed.
var currentStorage, _ = parseStorageVersion(StorageVersion)

// fileStorageVersion is the storage format of the database q is on, as
// DuckDB tags it ("v1.5.0+"), parsed.
func fileStorageVersion(ctx context.Context, q querier) ([3]int, error) {
	var tag sql.NullString
	if err := q.QueryRowContext(ctx, `SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()`).Scan(&tag); err != nil {
		return [3]int{}, fmt.Errorf("read the database's storage version: %w", err)
	}
	v, ok := parseStorageVersion(tag.String)
	if !ok {
		return [3]int{}, fmt.Errorf("read the database's storage version: DuckDB tagged it %q, not vX.Y.Z", tag.String)
	}
	return v, nil
}

// parseStorageVersion parses "v1.5.0" or "v1.5.0+".
func parseStorageVersion(s string) ([3]int, bool) {
	var v [3]int
	parts := strings.Split(strings.TrimSuffix(strings.TrimPrefix(s, "v"), "+"), ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}

// storageTag writes v as DuckDB tags a file's format ("v1.5.0+").
func storageTag(v [3]int) string { return fmt.Sprintf("v%d.%d.%d+", v[0], v[1], v[2]) }

func versionAtLeast(v, min [3]int) bool {
	for i := range v {
		if v[i] != min[i] {
			return v[i] > min[i]
		}
	}
	return true
}

// The compressions a migration declares for its columns, as written in
// migrations: the methods of storage versions before v1.3.0.
const (
	declareDictionary = "USING COMPRESSION dictionary"
	declareFSST       = "USING COMPRESSION fsst"
)

// declaredCompression adapts a migration's declared compressions to the
// storage version of its file: from v1.3.0, DuckDB compresses strings with
// DICT_FSST (a dictionary whose strings are FSST-compressed, or either
// alone) and refuses the older two.
func declaredCompression(sql string, storage [3]int) string {
	if !versionAtLeast(storage, dictFSSTSince) {
		return sql
	}
	const dictFSST = "USING COMPRESSION dict_fsst"
	return strings.NewReplacer(declareDictionary, dictFSST, declareFSST, dictFSST).Replace(sql)
}

// StorageFormat is the storage format of the store's file, as DuckDB tags
// it ("v1.5.0+"), and whether it is older than StorageVersion, the format
// `mcptrail convert` copies a file into.
func (s *Store) StorageFormat(ctx context.Context) (format string, older bool, err error) {
	v, err := fileStorageVersion(ctx, s.db)
	if err != nil {
		return "", false, err
	}
	return storageTag(v), !versionAtLeast(v, currentStorage), nil
}
