// Command readjson is the baseline of bench/ingest.sh: it loads a JSONL file
// of v1 events into a fresh DuckDB table with DuckDB's own read_json, the
// fastest way DuckDB itself knows, so that mcptrail ingest can be compared
// with it as whole processes. Its file is created in the storage format
// mcptrail creates (analytics.StorageVersion): the format decides much of
// what storing costs (DuckDB's default, v1.0.0, weighs more string
// compressions per column), and both sides store into the same one.
package main

import (
	"database/sql"
	"fmt"
	"os"

	_ "github.com/duckdb/duckdb-go/v2"

	"github.com/mcptrail/mcptrail/analytics"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: readjson EVENTS.jsonl DB")
		os.Exit(2)
	}
	db, err := sql.Open("duckdb", os.Args[2]+"?storage_compatibility_version="+analytics.StorageVersion)
	if err != nil {
		fail(err)
	}
	defer db.Close()
	var n int64
	if _, err := db.Exec(`CREATE TABLE calls AS SELECT * FROM read_json(?, format = 'newline_delimited')`, os.Args[1]); err != nil {
		fail(err)
	}
	if err := db.QueryRow(`SELECT count(*) FROM calls`).Scan(&n); err != nil {
		fail(err)
	}
	fmt.Println(n)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "readjson:", err)
	os.Exit(1)
}
