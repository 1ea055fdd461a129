package duckhash

import (
	"database/sql"
	"math/rand/v2"
	"strings"
	"testing"

	_ "github.com/duckdb/duckdb-go/v2"
)

// TestMatchesDuckDB compares String, Strings and Null with the linked
// DuckDB's hash() over strings of every length up to 300 bytes (inlined
// and not, whole blocks and remainders), of ASCII and of multi-byte
// runes, and over NULL.
func TestMatchesDuckDB(t *testing.T) {
	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := rand.New(rand.NewPCG(1, 2))
	runes := []rune("aZ09 _-:/{}\"é€😀\u0000")
	random := func(n int) string {
		var b strings.Builder
		for b.Len() < n {
			b.WriteRune(runes[r.IntN(len(runes))])
		}
		return b.String()
	}
	for n := range 300 {
		a, c := random(n), random(r.IntN(40))
		var h, h3 uint64
		if err := db.QueryRow(`SELECT hash(?::VARCHAR), hash(?::VARCHAR, ?::VARCHAR, ?::VARCHAR)`, a, c, "", a).Scan(&h, &h3); err != nil {
			t.Fatal(err)
		}
		if got := String(a); got != h {
			t.Fatalf("String(%q) = %#x, DuckDB's hash() %#x", a, got, h)
		}
		if got := Strings(c, "", a); got != h3 {
			t.Fatalf("Strings(%q, \"\", %q) = %#x, DuckDB's hash() %#x", c, a, got, h3)
		}
	}
	var null, withNull uint64
	if err := db.QueryRow(`SELECT hash(NULL::VARCHAR), hash('a', NULL::VARCHAR)`).Scan(&null, &withNull); err != nil {
		t.Fatal(err)
	}
	if null != Null || Combine(String("a"), Null) != withNull {
		t.Fatalf("hash(NULL) = %#x (Null %#x); hash('a', NULL) = %#x, Combine gives %#x", null, Null, withNull, Combine(String("a"), Null))
	}
}
