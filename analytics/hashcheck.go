package analytics

import (
	"context"
	"fmt"

	"github.com/mcptrail/mcptrail/internal/duckhash"
)

// hashProbes are the strings the writer's check hashes: one DuckDB keeps
// inline (12 bytes or fewer, as most tool names are), one it does not and
// whose length is no whole number of 8-byte blocks; neither ASCII alone.
var hashProbes = [2]string{"vm_exec_é", "mcptrail: run_tails' keys are hash() — é"}

// checkHashes makes sure that the hashes a batch's upkeep computes in Go
// (duckhash: run_tails' keys, call_runs' hashes) are those the linked
// DuckDB's hash() computes in the SQL path, before anything is stored with
// them: keys that differ would split every session's runs in two without
// an error. str and strs stand for duckhash.String and duckhash.Strings.
func checkHashes(ctx context.Context, conn execQuerier, str func(string) uint64, strs func(...string) uint64) error {
	short, long := hashProbes[0], hashProbes[1]
	var got [4]uint64
	if err := conn.QueryRowContext(ctx, `SELECT hash(?::VARCHAR), hash(?::VARCHAR), hash(?::VARCHAR, ''::VARCHAR, ?::VARCHAR), hash(NULL::VARCHAR)`,
		short, long, short, long).Scan(&got[0], &got[1], &got[2], &got[3]); err != nil {
		return fmt.Errorf("check DuckDB's hash(): %w", err)
	}
	want := [4]uint64{str(short), str(long), strs(short, "", long), duckhash.Null}
	names := [4]string{fmt.Sprintf("hash(%q)", short), fmt.Sprintf("hash(%q)", long), "hash of three values", "hash(NULL)"}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("the DuckDB linked into this build hashes strings differently from internal/duckhash (%s = %#x, Go %#x): "+
				"build mcptrail with the DuckDB its go.mod names, or bring internal/duckhash up to date with this one", names[i], got[i], want[i])
		}
	}
	return nil
}
