package analytics

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

// tailKeys are the keys (pk) of the sessions with a row in run_tails, so
// that a batch looks up the tails of the sessions that have one alone.
// run_tails holds one row per session ever seen; a batch's sessions are
// mostly new, or continue from recent batches, whose tails the lookup
// finds among the rows with a recent last_ts (DuckDB skips the older row
// groups by their min/max). Without the keys each batch joined all its
// sessions with every tail, a cost that grew with the sessions kept (8
// bytes a session here); a session's key is computed in Go (runSession.pk).
//
// They are read from the table at the first batch whose runs the Go path
// finds (use; until then a SQL recomputation adds none, and the read takes
// its rows too), and from then on every writer of run_tails on the store's
// write connection adds the keys it stored; keys of a batch that was
// rolled back stay, which only costs that session a read of the whole
// table. They live with the store, guarded by its write lock.
type tailKeys struct {
	built  bool
	sorted []uint64            // sorted
	recent map[uint64]struct{} // added since sorted was last merged
}

// use reads the keys from run_tails the first time it is called (on conn,
// inside the batch's transaction, so that they include its own writes):
// 0.9 s at 3.3M tails, once a store.
func (k *tailKeys) use(ctx context.Context, conn execQuerier) error {
	if k.built {
		return nil
	}
	var n int
	if err := conn.QueryRowContext(ctx, `SELECT count(*) FROM run_tails`).Scan(&n); err != nil {
		return fmt.Errorf("record runs: tail keys: %w", err)
	}
	sorted := make([]uint64, 0, n) // 8 bytes a key, no room to grow into
	if err := scanKeys(ctx, conn, `SELECT pk FROM run_tails`, func(pk uint64) { sorted = append(sorted, pk) }); err != nil {
		return err
	}
	slices.Sort(sorted) // here rather than in DuckDB, which would hold a sorted copy
	*k = tailKeys{built: true, sorted: sorted, recent: map[uint64]struct{}{}}
	return nil
}

// has tells whether run_tails may hold pk: always true before the keys are
// read.
func (k *tailKeys) has(pk uint64) bool {
	if !k.built {
		return true
	}
	if _, ok := k.recent[pk]; ok {
		return true
	}
	_, ok := slices.BinarySearch(k.sorted, pk)
	return ok
}

// add records that run_tails holds pk. The keys added are merged into the
// sorted ones once they are an eighth as many (or 65,536), so that merging
// costs a constant share of the adds.
func (k *tailKeys) add(pk uint64) {
	if !k.built || k.has(pk) {
		return
	}
	k.recent[pk] = struct{}{}
	if len(k.recent) < max(len(k.sorted)/8, 1<<16) {
		return
	}
	added := slices.Sorted(maps.Keys(k.recent))
	merged := make([]uint64, 0, len(k.sorted)+len(added))
	i, j := 0, 0
	for i < len(k.sorted) || j < len(added) {
		if j == len(added) || i < len(k.sorted) && k.sorted[i] < added[j] {
			merged = append(merged, k.sorted[i])
			i++
		} else {
			merged = append(merged, added[j])
			j++
		}
	}
	k.sorted, k.recent = merged, map[uint64]struct{}{}
}

// addStored records the sessions a SQL recomputation of runs stored a
// tail for (the keys in run_keys, recordRunsOf); nil k records nothing.
func (k *tailKeys) addStored(ctx context.Context, conn execQuerier) error {
	if k == nil || !k.built {
		return nil
	}
	return scanKeys(ctx, conn, `SELECT pk FROM run_keys`, k.add)
}

// scanKeys hands each key (UBIGINT) the query returns to each, in order.
func scanKeys(ctx context.Context, conn execQuerier, query string, each func(pk uint64)) error {
	rows, err := conn.QueryContext(ctx, query)
	if err != nil {
		return fmt.Errorf("record runs: tail keys: %w", err)
	}
	defer rows.Close()
	var pk uint64
	for rows.Next() {
		if err := rows.Scan(&pk); err != nil {
			return fmt.Errorf("record runs: tail keys: %w", err)
		}
		each(pk)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("record runs: tail keys: %w", err)
	}
	return nil
}
