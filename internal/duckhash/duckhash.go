// Package duckhash is DuckDB's hash() of VARCHAR values, in Go: the store
// keys the runs it keeps (run_tails' pk, call_runs' hashes) by hash(),
// which its SQL computes, and a batch's upkeep computes the same keys in Go
// instead of handing DuckDB the strings to hash. It follows the DuckDB this
// module links (duckdb-go-bindings in go.mod): TestMatchesDuckDB holds the
// two together, and analytics checks them again whenever it opens a store.
package duckhash

const (
	lengthMul = 0xc6a4a7935bd1e995 // the length's multiplier
	blockMul  = 0xd6e8feb86659fd93 // each 8-byte block's, and the finaliser's
	// Null is hash() of a NULL VARCHAR.
	Null uint64 = 0xbf58476d1ce4e5b9
)

// String is hash(s) of a VARCHAR s: its bytes eight at a time, little
// endian, the last block zero-padded, each xored into a state seeded by
// the length and multiplied; then the state through a 64-bit murmur
// finaliser.
func String(s string) uint64 {
	h := 0xe17a1465 ^ uint64(len(s))*lengthMul
	for ; len(s) >= 8; s = s[8:] {
		h ^= uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
			uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56 // one load, little endian
		h *= blockMul
	}
	if len(s) > 0 {
		var last uint64
		for i := len(s) - 1; i >= 0; i-- {
			last = last<<8 | uint64(s[i])
		}
		h ^= last
		h *= blockMul
	}
	return murmur64(h)
}

// Combine folds the hash of a further value into the hash of the values
// before it, as hash(a, b, …) does.
func Combine(h, next uint64) uint64 {
	h ^= h >> 32
	h *= blockMul
	return h ^ next
}

// Strings is hash(s[0], s[1], …) of VARCHAR values; at least one.
func Strings(s ...string) uint64 {
	h := String(s[0])
	for _, v := range s[1:] {
		h = Combine(h, String(v))
	}
	return h
}

func murmur64(x uint64) uint64 {
	x ^= x >> 32
	x *= blockMul
	x ^= x >> 32
	x *= blockMul
	x ^= x >> 32
	return x
}
