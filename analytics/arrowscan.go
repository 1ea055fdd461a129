package analytics

// The driver offers Arrow views only in builds with its duckdb_arrow tag,
// which `go install` cannot set. The function behind them is DuckDB's C
// API, already linked into every build by the driver's bindings: this file
// calls it on the driver's own connection, so that staged batches and the
// INSERT that reads them share one transaction.

/*
#include <stdlib.h>

typedef struct _duckdb_connection { void *internal_ptr; } *duckdb_connection;
typedef struct _duckdb_arrow_stream { void *internal_ptr; } *duckdb_arrow_stream;
typedef enum { DuckDBSuccess = 0, DuckDBError = 1 } duckdb_state;

// From duckdb.h: a temporary view named table_name over the stream.
duckdb_state duckdb_arrow_scan(duckdb_connection connection, const char *table_name, duckdb_arrow_stream arrow);
*/
import "C"

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/cdata"
	"github.com/duckdb/duckdb-go/v2/mapping"
)

// errNoRawConnection says the driver changed its connection's layout: the
// pinned driver version keeps it; a new one needs rawConnection updated.
var errNoRawConnection = errors.New("the DuckDB driver's connection has no C connection field `conn` of type mapping.Connection (duckdb-go changed; update analytics/arrowscan.go)")

// rawConnection is the C connection inside the driver's connection.
func rawConnection(dc driver.Conn) (C.duckdb_connection, error) {
	c, err := driverField[mapping.Connection](dc, "conn", errNoRawConnection)
	if err != nil {
		return nil, err
	}
	if c.Ptr == nil {
		return nil, errors.New("the DuckDB connection is closed")
	}
	return C.duckdb_connection(c.Ptr), nil
}

// registerArrowView makes reader's records a temporary view name on the
// connection dc, until release.
func registerArrowView(dc driver.Conn, reader array.RecordReader, name string) (release func(), err error) {
	conn, err := rawConnection(dc)
	if err != nil {
		return nil, err
	}
	// The stream lives in C memory: DuckDB keeps a pointer to it.
	stream := (*cdata.CArrowArrayStream)(C.calloc(1, C.size_t(unsafe.Sizeof(cdata.CArrowArrayStream{}))))
	cdata.ExportRecordReader(reader, stream)
	release = func() {
		cdata.ReleaseCArrowArrayStream(stream)
		C.free(unsafe.Pointer(stream))
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if C.duckdb_arrow_scan(conn, cname, C.duckdb_arrow_stream(unsafe.Pointer(stream))) != C.DuckDBSuccess {
		release()
		return nil, fmt.Errorf("arrow scan of view %s failed", name)
	}
	return release, nil
}
