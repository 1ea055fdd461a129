package audit

import (
	"bytes"
	"encoding/json"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stdCanonical is the reference: encoding/json Marshal of the arguments
// decoded with UseNumber, which is what Intercept hashes.
func stdCanonical(t testing.TB, args []byte) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	require.NoError(t, dec.Decode(&v))
	out, err := json.Marshal(v)
	require.NoError(t, err)
	return out
}

func TestArgsHashMatchesEncodingJSON(t *testing.T) {
	for _, args := range []string{
		`{}`,
		`{"vmid":101,"node":"pve1"}`,
		`{ "b" : 1 , "a" : [ 1 , 2 , { "d" : null , "c" : true } ] }`,
		`{"cmd":"echo <b> && cat a>b"}`,
		`{"unicode":"żółć 😀 \u00e9","sep":"a\u2028b\u2029c"}`,
		"{\"raw_sep\":\"a\u2028b\"}",
		`{"esc":"\"\\\/\b\f\n\r\t\u0001\u001f\u007f"}`,
		`{"surrogates":"\ud83d\ude00 \ud800 \udc00x \ud800\u0041"}`,
		`{"numbers":[0,-0,1.0,1e3,1E+3,-2.5e-3,12345678901234567890123]}`,
		`{"dup":1,"dup":2,"a":{"x":1,"x":{"y":3}}}`,
		`{"\u0062":1,"a":2,"b\u0000":3,"B":4}`,
		`{"\ud800":1,"\udfff":2}`,
		`{"html":"<script>&amp;</script>","key<&>":1}`,
		`{"nested":{"z":{"y":{"x":[[],{},""]}}}}`,
		`{"empty_key":"","":"v"}`,
	} {
		t.Run(args, func(t *testing.T) {
			want := stdCanonical(t, []byte(args))
			line := `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed","args":` + args + `}`
			e := decodeEvent(t, line, Options{StoreArgs: true})
			assert.Equal(t, string(want), string(e.Args))
			assert.Equal(t, sha(want), e.ArgsHash)

			var m map[string]json.RawMessage
			require.NoError(t, json.Unmarshal([]byte(args), &m))
			var keys []string
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			assert.Equal(t, keys, e.ArgKeys)

			canon, hash, err := CanonicalArgs([]byte(args))
			require.NoError(t, err)
			assert.Equal(t, string(want), string(canon))
			assert.Equal(t, e.ArgsHash, hash)

			noStore := decodeEvent(t, line, Options{})
			assert.Nil(t, noStore.Args)
			assert.Equal(t, e.ArgsHash, noStore.ArgsHash)
		})
	}
}

// TestArgsHashMatchesIntercept: a native event and an Intercept line for the
// same call carry the same args_hash.
func TestArgsHashMatchesIntercept(t *testing.T) {
	// Intercept: sha256(json.Marshal(map[string]any{"node":"pve1","vmid":101}))
	m := map[string]any{"vmid": 101, "node": "pve1"}
	b, err := json.Marshal(m)
	require.NoError(t, err)
	native := decodeEvent(t, `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"get_vm_status","decision":"allowed","args":{"vmid":101,"node":"pve1"}}`, Options{})
	assert.Equal(t, sha(b), native.ArgsHash)
	assert.Equal(t, "sha256:18da6ac8fc23043448cc9f3e5e8731d70e5670b91f1e97c18fdc573fc4f97b12", native.ArgsHash)
}

func TestCanonicalArgsRejects(t *testing.T) {
	_, _, err := CanonicalArgs([]byte(`[1]`))
	assert.Equal(t, ReasonMalformedJSON, ReasonOf(err))
	_, _, err = CanonicalArgs([]byte(`{"a":`))
	assert.Equal(t, ReasonMalformedJSON, ReasonOf(err))
}

// TestArgsHashAdversarial: deep objects with unsorted keys would make
// reordering quadratic; past the budget the encoding/json fallback gives the
// same bytes.
func TestArgsHashAdversarial(t *testing.T) {
	for _, tc := range []struct{ unit, closer string }{
		{`{"b":0,"a":`, `}`},
		{`{"b":0,"a":[`, `]}`},
		{`{"a":`, `}`}, // sorted: no reordering at all
	} {
		n := 3000
		args := `{"z":1,"x":` + strings.Repeat(tc.unit, n) + `"<&>"` + strings.Repeat(tc.closer, n) + `,"y":2}`
		line := `{"ts":"2026-11-03T09:00:00Z","server":"s","tool":"t","decision":"allowed","args":` + args + `}`
		start := time.Now()
		e := decodeEvent(t, line, Options{StoreArgs: true})
		elapsed := time.Since(start)
		want := stdCanonical(t, []byte(args))
		assert.Equal(t, string(want), string(e.Args), tc.unit)
		assert.Equal(t, sha(want), e.ArgsHash)
		assert.Equal(t, []string{"x", "y", "z"}, e.ArgKeys)
		assert.Less(t, elapsed, 2*time.Second, "no quadratic blow-up")

		canon, hash, err := CanonicalArgs([]byte(args))
		require.NoError(t, err)
		assert.Equal(t, string(want), string(canon))
		assert.Equal(t, e.ArgsHash, hash)
	}
}
