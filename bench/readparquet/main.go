// Command readparquet reads mcptrail's Parquet archive without DuckDB: with
// Apache Arrow's own Parquet implementation (arrow-go's pqarrow), it walks
// the hive-partitioned folders (server=<s>/date=<yyyy-mm-dd>/calls-<n>.parquet),
// takes the partition values from the folder names as any hive-aware engine
// does, and prints the calls and distinct ids per server and day, then the
// total. bench/archive.sh compares it with DuckDB's read_parquet.
package main

import (
	"context"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// dataFile is a finished archive file; temporary files being written are
// named otherwise and skipped, as readers of the archive must.
var dataFile = regexp.MustCompile(`^calls-[0-9]+\.parquet$`)

type day struct{ server, date string }

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: readparquet ARCHIVE_DIR")
		os.Exit(2)
	}
	root := os.Args[1]
	rows := map[day]int64{}
	ids := map[day]map[string]struct{}{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !dataFile.MatchString(d.Name()) {
			return err
		}
		k, err := partition(root, path)
		if err != nil {
			return err
		}
		n, err := readIDs(path, func(id string) {
			if ids[k] == nil {
				ids[k] = map[string]struct{}{}
			}
			ids[k][id] = struct{}{}
		})
		rows[k] += n
		return err
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "readparquet:", err)
		os.Exit(1)
	}
	days := make([]day, 0, len(rows))
	for k := range rows {
		days = append(days, k)
	}
	sort.Slice(days, func(i, j int) bool {
		return days[i].server < days[j].server || days[i].server == days[j].server && days[i].date < days[j].date
	})
	var total, distinct int64
	for _, k := range days {
		fmt.Printf("%s\t%s\t%d\t%d\n", k.server, k.date, rows[k], len(ids[k]))
		total += rows[k]
		distinct += int64(len(ids[k]))
	}
	fmt.Printf("total\t\t%d\t%d\n", total, distinct)
}

// partition reads server and date from the hive folder names.
func partition(root, path string) (day, error) {
	rel, err := filepath.Rel(root, filepath.Dir(path))
	if err != nil {
		return day{}, err
	}
	var k day
	for _, seg := range strings.Split(filepath.ToSlash(rel), "/") {
		key, val, ok := strings.Cut(seg, "=")
		if !ok {
			continue
		}
		if val, err = url.PathUnescape(val); err != nil {
			return day{}, fmt.Errorf("%s: %w", path, err)
		}
		switch key {
		case "server":
			k.server = val
		case "date":
			k.date = val
		}
	}
	if k.server == "" || k.date == "" {
		return day{}, fmt.Errorf("%s: not under server=…/date=…", path)
	}
	return k, nil
}

// readIDs reads a file's id column and returns its rows.
func readIDs(path string, each func(string)) (int64, error) {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 64 << 10}, memory.DefaultAllocator)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	col := -1
	for i, f := range fr.Manifest.Fields {
		if f.Field.Name == "id" {
			col = i
		}
	}
	if col < 0 {
		return 0, fmt.Errorf("%s: no id column", path)
	}
	rr, err := fr.GetRecordReader(context.Background(), []int{col}, nil)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	defer rr.Release()
	var n int64
	for rr.Next() {
		rec := rr.RecordBatch()
		c := rec.Column(0)
		switch a := c.(type) {
		case *array.String:
			for i := 0; i < a.Len(); i++ {
				each(a.Value(i))
			}
		case *array.LargeString:
			for i := 0; i < a.Len(); i++ {
				each(a.Value(i))
			}
		default:
			return 0, fmt.Errorf("%s: id is %s", path, c.DataType())
		}
		n += rec.NumRows()
	}
	if err := rr.Err(); err != nil && err.Error() != "EOF" {
		return n, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}
