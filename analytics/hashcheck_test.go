package analytics

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mcptrail/mcptrail/internal/duckhash"
)

// TestCheckHashesRefusesADifferentHash: the writer's check passes with
// duckhash against the linked DuckDB, and fails, naming the fix, with a
// hash that differs from hash() in one bit of one value, for short strings
// alone, or in how several values combine.
func TestCheckHashesRefusesADifferentHash(t *testing.T) {
	ctx := context.Background()
	db, err := sql.Open("duckdb", "")
	require.NoError(t, err)
	defer db.Close()
	require.NoError(t, checkHashes(ctx, db, duckhash.String, duckhash.Strings))

	offByOne := func(s string) uint64 { return duckhash.String(s) ^ 1 }
	err = checkHashes(ctx, db, offByOne, duckhash.Strings)
	require.Error(t, err)
	require.Contains(t, err.Error(), "hashes strings differently from internal/duckhash")

	// Wrong for short strings alone (those DuckDB keeps inline).
	shortWrong := func(s string) uint64 {
		if len(s) <= 12 {
			return duckhash.String(s) + 1
		}
		return duckhash.String(s)
	}
	err = checkHashes(ctx, db, shortWrong, duckhash.Strings)
	require.Error(t, err)
	require.Contains(t, err.Error(), `hash("vm_exec_é")`)

	xored := func(s ...string) uint64 {
		h := uint64(0)
		for _, v := range s {
			h ^= duckhash.String(v)
		}
		return h
	}
	err = checkHashes(ctx, db, duckhash.String, xored)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "go.mod"), err.Error())
	require.Contains(t, err.Error(), "hash of three values")
}
