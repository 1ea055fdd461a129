package analytics

import (
	"context"
	"fmt"

	"github.com/mcptrail/mcptrail/internal/duckhash"
)

// hashProbe is the string the writer's check hashes: longer than DuckDB
// inlines, not a whole number of 8-byte blocks, and not ASCII alone.
const hashProbe = "mcptrail: run_tails' keys are hash() — é"

// checkHashes makes sure that the hashes a batch's upkeep computes in Go
// (duckhash: run_tails' keys, call_runs' hashes) are those the linked
// DuckDB's hash() computes in the SQL path, before anything is stored with
// them: keys that differ would split every session's runs in two without
// an error. str and strs stand for duckhash.String and duckhash.Strings.
func checkHashes(ctx context.Context, conn execQuerier, str func(string) uint64, strs func(...string) uint64) error {
	var one, three, null uint64
	if err := conn.QueryRowContext(ctx, `SELECT hash(?::VARCHAR), hash(?::VARCHAR, ''::VARCHAR, ?::VARCHAR), hash(NULL::VARCHAR)`,
		hashProbe, hashProbe, hashProbe).Scan(&one, &three, &null); err != nil {
		return fmt.Errorf("check DuckDB's hash(): %w", err)
	}
	if one != str(hashProbe) || three != strs(hashProbe, "", hashProbe) || null != duckhash.Null {
		return fmt.Errorf("the DuckDB linked into this build hashes strings differently from internal/duckhash (hash(%q) = %#x, Go %#x): "+
			"build mcptrail with the DuckDB its go.mod names, or bring internal/duckhash up to date with this one", hashProbe, one, str(hashProbe))
	}
	return nil
}
