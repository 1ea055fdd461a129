package analytics

import (
	"database/sql"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMedianGapIsDuckDBs: the Go path's median of a run's gaps is the
// median DuckDB's list_aggregate gives the same BIGINT list (the SQL path's
// median), to the bit: odd and even counts, halves, gaps up to 2^52 ms, and
// none.
func TestMedianGapIsDuckDBs(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	require.NoError(t, err)
	defer db.Close()
	r := rand.New(rand.NewPCG(3, 4))
	var sorted []int64
	for i := range 400 {
		gaps := make([]int64, r.IntN(12))
		for j := range gaps {
			switch i % 3 {
			case 0:
				gaps[j] = r.Int64N(20)
			case 1:
				gaps[j] = r.Int64N(1 << 52)
			default:
				gaps[j] = 1<<52 - r.Int64N(1000)
			}
		}
		list := make([]string, len(gaps))
		for j, g := range gaps {
			list[j] = strconv.FormatInt(g, 10)
		}
		var want float64
		require.NoError(t, db.QueryRow(`SELECT coalesce(list_aggregate([`+strings.Join(list, ", ")+`]::BIGINT[], 'median'), 0)`).Scan(&want))
		got := medianGap(gaps, &sorted)
		require.Equal(t, math.Float64bits(want), math.Float64bits(got), "median of %v: DuckDB %v, Go %v", gaps, want, got)
	}
}
